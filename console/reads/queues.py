"""The queues page: every queue, its jobs by state, its last hour, and whether it is paused.

Bounded like every console read: the queue names come from index probes (a skip scan of the
per-queue indexes, at most :data:`MAX_QUEUES`), counts stop at :data:`~.jobs.COUNT_CAP`, and
the last hour's figures read only the last hour's executions (as the overview's chart does).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from flask_ratchet.columns import const
from flask_ratchet.options import DEFAULT_QUEUE
from flask_ratchet.schema import execution, job, job_queue
from flask_ratchet.states import JobStatus
from flask_ratchet.store.health import oldest_due_age
from flask_ratchet.store.queues import Queues

from .jobs import COUNT_CAP, Count

#: The most queues the page lists (the first, by name).
MAX_QUEUES = 200


@dataclass(frozen=True, slots=True)
class QueueRow:
    """One line of the queues page."""

    name: str
    paused: bool
    pending: Count
    running: int
    dead_letters: Count
    #: Attempts that ended in the last hour, by outcome.
    succeeded_last_hour: int
    failed_last_hour: int
    #: Seconds the oldest due PENDING job has waited; ``None`` if none is due.
    oldest_due_wait: float | None
    #: When and by whom the queue was last paused or resumed (``None``: never).
    changed_at: datetime | None = None
    changed_by: str | None = None

    @property
    def per_minute(self) -> float:
        """Attempts ended per minute over the last hour."""
        return (self.succeeded_last_hour + self.failed_last_hour) / 60


@dataclass(frozen=True, slots=True)
class QueuesReport:
    rows: list[QueueRow]
    #: More queues exist than :data:`MAX_QUEUES`.
    truncated: bool


def queues(conn: Connection, store: Queues, now: datetime) -> QueuesReport:
    """Every queue the page lists, with its figures; ``now`` is the database's time."""
    states = store.states(conn)
    names, truncated = queue_names(conn, store, states)
    hour = _last_hour(conn, now)
    rows = []
    for name in names:
        state = states.get(name)
        ok, failed = hour.get(name, (0, 0))
        rows.append(
            QueueRow(
                name=name,
                paused=bool(state is not None and state.paused),
                pending=capped(conn, live_jobs(name, JobStatus.PENDING)),
                running=_count(conn, live_jobs(name, JobStatus.RUNNING)),
                dead_letters=capped(conn, _dead_letters(name)),
                succeeded_last_hour=ok,
                failed_last_hour=failed,
                oldest_due_wait=oldest_due_age(conn, now, name),
                changed_at=None if state is None else state.changed_at,
                changed_by=None if state is None else state.changed_by,
            )
        )
    return QueuesReport(rows, truncated)


def queue_names(conn: Connection, store: Queues, states: Collection[str]) -> tuple[list[str], bool]:
    """The default queue, every queue ever paused or resumed, and every queue some job names
    (live, or ended until retention archives it), by name: at most :data:`MAX_QUEUES`, and
    whether there were more. Each is found by one index probe, however many jobs it holds."""
    found = {DEFAULT_QUEUE, *states}
    found.update(store.live(conn, MAX_QUEUES + 1))
    found.update(store.named(conn, MAX_QUEUES + 1))
    ordered = sorted(found)
    return ordered[:MAX_QUEUES], len(ordered) > MAX_QUEUES


def live_jobs(name: str, status: JobStatus) -> sa.Select[Any]:
    """Queue ``name``'s hot rows in ``status``, to count."""
    return sa.select(sa.literal(1)).where(
        job_queue.c.status == const(status), job_queue.c.queue == name
    )


def _dead_letters(name: str) -> sa.Select[Any]:
    """FAILED jobs of queue ``name`` with no hot row (as the dead-letter page counts them)."""
    return sa.select(sa.literal(1)).where(
        job.c.terminal_status == const(JobStatus.FAILED),
        job.c.queue == name,
        ~sa.exists().where(job_queue.c.job_id == job.c.job_id),
    )


def _count(conn: Connection, rows: sa.Select[Any]) -> int:
    return int(conn.execute(sa.select(sa.func.count()).select_from(rows.subquery())).scalar_one())


def capped(conn: Connection, rows: sa.Select[Any]) -> Count:
    """How many ``rows`` there are, counting no further than :data:`COUNT_CAP` + 1."""
    n = _count(conn, rows.limit(COUNT_CAP + 1))
    return Count(n) if n <= COUNT_CAP else Count(COUNT_CAP, exact=False)


def _last_hour(conn: Connection, now: datetime) -> dict[str, tuple[int, int]]:
    """Attempts that started in the last hour, by queue: (succeeded, failed)."""
    failed = sa.case((execution.c.status == JobStatus.FAILED, 1), else_=0)
    rows = conn.execute(
        sa.select(job.c.queue, sa.func.count(), sa.func.sum(failed))
        .select_from(execution.join(job, job.c.job_id == execution.c.job_id))
        .where(execution.c.started_at >= now - timedelta(hours=1))
        .group_by(job.c.queue)
    )
    return {name: (int(n) - int(bad or 0), int(bad or 0)) for name, n, bad in rows}
