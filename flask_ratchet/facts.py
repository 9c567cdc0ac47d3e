"""What a transaction did, kept with its connection until it commits.

A store operation records facts on the connection it wrote on (:func:`record`): "job X ended
CANCELED", "dependent Y is due now". Whoever commits that connection's transaction takes them
(:func:`take`) and, once it has committed, turns them into signals and callbacks
(:func:`flask_ratchet.runtime.announce`): a receiver never hears of a change that was rolled back.
The store knows the facts; it knows nothing of who listens.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
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
#: A job's or batch's callback is due (``task`` and ``job_id``, or ``batch_id`` and ``counts``).
CALLBACK = "callback"
#: Jobs became due (released dependents, a submission): wake the workers. Not a signal.
WAKE = "wake"
#: The facts of a job's end (its terminal status was written): what waiters wait for.
ENDS = frozenset({JOB_COMPLETED, JOB_DEAD_LETTERED, JOB_CANCELED})


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
