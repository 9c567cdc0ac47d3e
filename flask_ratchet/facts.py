"""What a transaction did, kept with its connection until it commits.

A store operation records facts on the connection it wrote on (:func:`record`): "job X ended
CANCELED", "dependent Y is due now". Whoever commits that connection's transaction takes them
(:func:`take`) and, once it has committed, turns them into signals and callbacks
(:func:`flask_ratchet.delivery.announce`): a receiver never hears of a change that was rolled back.
The store knows the facts; it knows nothing of who listens.

When the app's ``db.session`` owns the transaction (a request), the facts wait with the session
instead (:func:`keep_with_session`) until its outermost transaction has committed and ended.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session, SessionTransaction
from sqlalchemy.pool import Pool

log = logging.getLogger("flask_ratchet.events")

# What happened, by kind: each is also the name of the signal it becomes (flask_ratchet.events).
JOB_STARTED = "ratchet.job-started"
JOB_COMPLETED = "ratchet.job-completed"
JOB_FAILED = "ratchet.job-failed"
JOB_RETRYING = "ratchet.job-retrying"
JOB_DEAD_LETTERED = "ratchet.job-dead-lettered"
JOB_CANCELED = "ratchet.job-canceled"
JOB_PAUSED = "ratchet.job-paused"
JOB_RESUMED = "ratchet.job-resumed"
JOB_RETRIED = "ratchet.job-retried"
BATCH_COMPLETED = "ratchet.batch-completed"
CHAIN_COMPLETED = "ratchet.chain-completed"
CHAIN_FAILED = "ratchet.chain-failed"
BRANCH_TRIGGERED = "ratchet.branch-triggered"
JOBS_BULK_CANCELED = "ratchet.jobs-bulk-canceled"
JOBS_BULK_RETRIED = "ratchet.jobs-bulk-retried"
JOBS_BULK_DELETED = "ratchet.jobs-bulk-deleted"
JOBS_BULK_SIGNALED = "ratchet.jobs-bulk-signaled"
JOB_SIGNAL_WAITING = "ratchet.job-signal-waiting"
JOB_SIGNALED = "ratchet.job-signaled"
JOB_SIGNAL_TIMED_OUT = "ratchet.job-signal-timed-out"
#: A job's or batch's callback is due (``task`` and ``job_id``, or ``batch_id`` and ``counts``).
CALLBACK = "callback"
#: Jobs became due (released dependents, a submission): wake the workers. Not a signal.
WAKE = "wake"
#: Jobs were written (``tasks``: how many of each task): what a session that is never
#: committed loses (:func:`warn_uncommitted`). Not a signal.
SUBMITTED = "submitted"
#: The kinds that are no signal, and that no receiver hears.
UNSIGNALLED = frozenset({WAKE, SUBMITTED})
#: The facts of a job's end (its terminal status was written): what waiters wait for.
ENDS = frozenset({JOB_COMPLETED, JOB_DEAD_LETTERED, JOB_CANCELED, JOBS_BULK_CANCELED})


@dataclass(frozen=True, slots=True)
class Event:
    """One thing that happened in a transaction, to announce after its commit."""

    #: One of this module's kinds.
    kind: str
    data: dict[str, Any] = field(default_factory=dict)


_PENDING = "ratchet_events"


def record(conn: Connection, events: Iterable[Event]) -> None:
    """Keep ``events`` with ``conn``'s transaction, to send once it commits."""
    conn.info.setdefault(_PENDING, []).extend(events)


def record_submitted(conn: Connection, tasks: Iterable[str]) -> None:
    """Record that jobs of ``tasks`` (one name per job) were written on ``conn``."""
    counts: dict[str, int] = {}
    for task in tasks:
        counts[task] = counts.get(task, 0) + 1
    if counts:
        record(conn, [Event(SUBMITTED, {"tasks": counts})])


def take(conn: Connection) -> list[Event]:
    """The events recorded on ``conn`` (removed from it)."""
    events: list[Event] = conn.info.pop(_PENDING, [])
    return events


@contextmanager
def dropped_on_error(conn: Connection) -> Iterator[None]:
    """Drop the events recorded on ``conn`` inside the block if it raises: the writes that
    recorded them were rolled back (to a savepoint), so they never happened, while the
    transaction itself goes on and may still commit."""
    kept = len(conn.info.get(_PENDING, ()))
    try:
        yield
    except BaseException:
        del conn.info.get(_PENDING, [])[kept:]
        raise


@sa.event.listens_for(Pool, "checkin")
def _forget(dbapi_connection: Any, record: Any) -> None:
    """Events still kept when a connection goes back to its pool belong to a transaction that
    nobody took them from (it was rolled back): they never happened."""
    record.info.pop(_PENDING, None)


#: ``Session.info`` keys: the facts of the session's open transactions, each batch with the
#: transaction (a savepoint's, or the outermost) it was recorded in; the facts of the outermost
#: transaction once it has committed; and that the session's listeners are in place.
_KEPT = "ratchet_events"
_COMMITTED = "ratchet_committed_events"
_LISTENING = "ratchet_listening"


def keep_with_session(
    session: Session, events: list[Event], send: Callable[[list[Event]], None]
) -> None:
    """Keep ``events`` with ``session``'s transaction; ``send`` them once its outermost
    transaction has committed and ended.

    Not in SQLAlchemy's ``after_commit``: there the session is still in its 'committed' state,
    so a receiver or an eager job using it would fail, and an error raised there leaves the
    session in that state for good (every call, ``rollback()`` included, fails until
    ``close()``). Once ``after_transaction_end`` has come, the session has no transaction: what
    ``send`` raises reaches the caller of ``commit()``, and the session stays usable. A
    savepoint's facts (``begin_nested()``) wait for the outermost commit too, and are dropped
    if the savepoint rolls back.
    """
    if not events:
        return
    if not session.info.get(_LISTENING):
        # Once per session, for its whole life: SQLAlchemy ignores a listener registered
        # again, so a listener per transaction would hear only the session's first commit.
        session.info[_LISTENING] = True
        sa.event.listen(session, "after_commit", _committed)

        def ended(session: Session, transaction: SessionTransaction) -> None:
            if transaction.nested:
                _drop(session, transaction)  # still its own: it ended without committing
            elif transaction.parent is None:  # the outermost (not a flush's subtransaction)
                session.info.pop(_KEPT, None)  # ended without committing: never happened
                committed: list[Event] = session.info.pop(_COMMITTED, [])
                if committed:
                    send(committed)

        sa.event.listen(session, "after_transaction_end", ended)
    innermost = session.get_nested_transaction() or session.get_transaction()
    session.info.setdefault(_KEPT, []).append((innermost, events))


def _committed(session: Session) -> None:
    """A transaction of ``session`` committed: a savepoint's facts become those of the
    transaction around it; the outermost one's wait for its end."""
    kept: list[tuple[SessionTransaction | None, list[Event]]] = session.info.get(_KEPT, [])
    nested = session.get_nested_transaction()  # the one committing, until it is closed
    if nested is None:
        session.info[_KEPT] = []
        session.info.setdefault(_COMMITTED, []).extend(e for _, events in kept for e in events)
        return
    session.info[_KEPT] = [(nested.parent if t is nested else t, events) for t, events in kept]


def _drop(session: Session, transaction: SessionTransaction) -> None:
    kept: list[tuple[SessionTransaction | None, list[Event]]] = session.info.get(_KEPT, [])
    session.info[_KEPT] = [(t, events) for t, events in kept if t is not transaction]


_WARNED = "ratchet_warned"
warnings_log = logging.getLogger("flask_ratchet")


def warn_uncommitted(session: Session) -> None:
    """Log one WARNING if ``session`` holds jobs it never committed (its transaction is still
    open when the request ends, and its end rolls them back): which tasks, and how many.

    Called at the end of a request. An app without writes of its own, or a view that forgets
    ``db.session.commit()``, otherwise loses every job it enqueues without a word. Jobs it was
    warned about once are not named again by a later request sharing the session (tests that
    keep one app context for several requests).
    """
    warned: set[int] = session.info.setdefault(_WARNED, set())
    counts: dict[str, int] = {}
    for _, events in session.info.get(_KEPT, []):
        for event in events:
            if event.kind == SUBMITTED and id(event) not in warned:
                warned.add(id(event))
                for task, n in event.data["tasks"].items():
                    counts[task] = counts.get(task, 0) + n
    if not counts:
        return
    named = ", ".join(f"{task} ({n})" if n > 1 else task for task, n in sorted(counts.items()))
    warnings_log.warning(
        "a request ended without committing db.session, which held %d ratchet job%s it "
        "submitted: %s. They are rolled back and will never run: call db.session.commit() "
        "after enqueueing (or db.session.rollback() to drop them on purpose, without this "
        "warning)",
        sum(counts.values()),
        "" if sum(counts.values()) == 1 else "s",
        named,
    )
