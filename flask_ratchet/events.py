"""Lifecycle events as blinker signals (Flask's own signal library), sent after the commit.

Connect a receiver as with Flask's signals; the sender is the Flask app and every signal carries
``job_id`` (a batch's: ``batch_id``)::

    from flask_ratchet import events

    @events.job_dead_lettered.connect
    def page_someone(app, job_id, task, error, **extra): ...

A store operation records what happened on its connection (:func:`record`); whoever commits that
connection's transaction takes the events (:func:`take`) and sends them once it has committed, so
a receiver never hears of a change that was rolled back. A worker sends them from a thread of its
own (a slow receiver does not hold up job completion); a web process sends them in the thread
that committed. A receiver that raises is logged and changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from blinker import NamedSignal, Namespace
from sqlalchemy.engine import Connection
from sqlalchemy.pool import Pool

log = logging.getLogger("flask_ratchet.events")

_signals = Namespace()

#: A worker started running an attempt (``job_id``, ``task``, ``attempt``).
job_started = _signals.signal("ratchet.job-started")
#: A job SUCCEEDED (``job_id``, ``task``, ``result``: the JSON text or None).
job_completed = _signals.signal("ratchet.job-completed")
#: An attempt failed (``job_id``, ``task``, ``attempt``, ``error``), retried or not.
job_failed = _signals.signal("ratchet.job-failed")
#: A failed attempt will be retried (``job_id``, ``task``, ``attempt``, ``error``, ``delay``).
job_retrying = _signals.signal("ratchet.job-retrying")
#: A job FAILED for good: it is in the dead-letter queue (``job_id``, ``task``, ``error``).
job_dead_lettered = _signals.signal("ratchet.job-dead-lettered")
#: A job was CANCELED (``job_id``, ``cascade``: True when an upstream job's end canceled it).
job_canceled = _signals.signal("ratchet.job-canceled")
#: A job was PAUSED (``job_id``).
job_paused = _signals.signal("ratchet.job-paused")
#: A job was resumed (``job_id``).
job_resumed = _signals.signal("ratchet.job-resumed")
#: A FAILED job was retried by hand (``job_id``): PENDING again, attempts reset, due now.
job_retried = _signals.signal("ratchet.job-retried")
#: A batch ended (``batch_id``, ``name``, ``status``, ``total``, ``succeeded``, ``failed``).
batch_completed = _signals.signal("ratchet.batch-completed")
#: The last step of a chain SUCCEEDED (``job_id``: that step).
chain_completed = _signals.signal("ratchet.chain-completed")
#: A chain step FAILED or was CANCELED; its downstream steps are canceled (``job_id``).
chain_failed = _signals.signal("ratchet.chain-failed")
#: A dependent's condition held and it is due now (``job_id``, ``parent_id``, ``condition``).
branch_triggered = _signals.signal("ratchet.branch-triggered")

SIGNALS: dict[str, NamedSignal] = {
    s.name: s
    for s in (
        job_started,
        job_completed,
        job_failed,
        job_retrying,
        job_dead_lettered,
        job_canceled,
        job_paused,
        job_resumed,
        job_retried,
        batch_completed,
        chain_completed,
        chain_failed,
        branch_triggered,
    )
}


@dataclass(frozen=True, slots=True)
class Event:
    """One thing to announce after the commit: a signal, or a callback to call."""

    #: A signal's name (see :data:`SIGNALS`), or ``"callback"`` for a job's or batch's callback.
    kind: str
    data: dict[str, Any] = field(default_factory=dict)


CALLBACK = "callback"
#: Not announced: tells the worker's process that jobs became due (released dependents).
WAKE = "wake"

_PENDING = "ratchet_events"


def wanted(signal: NamedSignal) -> bool:
    """Whether anyone listens: the hot path builds no event nobody would hear."""
    return bool(signal.receivers)


def record(conn: Connection, events: Iterable[Event]) -> None:
    """Keep ``events`` with ``conn``'s transaction, to send once it commits."""
    conn.info.setdefault(_PENDING, []).extend(events)


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
