"""The queues page: every queue, its jobs by state, its last hour, and whether it is paused.

A handful of statements however many queues there are: the queue names come from two skip
scans of the per-queue indexes (one statement each, at most :data:`MAX_QUEUES` names), the
live jobs of every queue from one grouped read of the hot table (which holds only live jobs),
the dead letters from one grouped read of the failed jobs, and the last hour's runs of the
queues listed (how many, their waits and run times) from one grouped read of the last hour's
executions (:mod:`.queue_runs`), with a second for the runs written before a run's row held its
queue (none an hour after the upgrade). A filter on the name, and the page's first name, are
applied to the skip scans' output in SQL.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from flask_ratchet.columns import const
from flask_ratchet.options import DEFAULT_QUEUE
from flask_ratchet.schema import execution, job, job_queue
from flask_ratchet.states import JobStatus
from flask_ratchet.store.queues import LiveFigures, Queues

from .jobs import Count
from .queue_runs import HourRuns, hour_runs

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
    #: Attempts that started in the last hour (shown once ended), by outcome.
    succeeded_last_hour: int
    failed_last_hour: int
    #: Seconds the oldest due PENDING job has waited; ``None`` if none is due.
    oldest_due_wait: float | None
    #: When and by whom the queue was last paused or resumed (``None``: never).
    changed_at: datetime | None = None
    changed_by: str | None = None
    #: The last hour's runs: their waits and run times.
    times: HourRuns = field(default_factory=HourRuns)

    @property
    def per_minute(self) -> float:
        """Attempts ended per minute over the last hour."""
        return (self.succeeded_last_hour + self.failed_last_hour) / 60


@dataclass(frozen=True, slots=True)
class QueuesReport:
    rows: list[QueueRow]
    #: More queues exist than :data:`MAX_QUEUES`.
    truncated: bool

    @property
    def next_after(self) -> str | None:
        """The name the next page starts after (``None``: this is the last page)."""
        return self.rows[-1].name if self.truncated and self.rows else None


def queues(
    conn: Connection,
    store: Queues,
    now: datetime,
    containing: str | None = None,
    after: str | None = None,
) -> QueuesReport:
    """The queues the page lists (those whose name holds ``containing``, whatever the case,
    and comes after ``after``, if given), with their figures; ``now`` is the database's
    time."""
    states = store.states(conn)
    live = store.live_figures(conn, now)
    names, truncated = queue_names(conn, store, states, containing, after)
    hour = hour_runs(conn, names, now)
    older = _older_runs(conn, now)
    dead = _dead_letters(conn)
    rows = []
    for name in names:
        state = states.get(name)
        figures = live.get(name, LiveFigures())
        runs = hour.get(name, HourRuns())
        ok, failed = older.get(name, (0, 0))
        rows.append(
            QueueRow(
                name=name,
                paused=bool(state is not None and state.paused),
                pending=Count(figures.pending),
                running=figures.running,
                dead_letters=Count(dead.get(name, 0)),
                succeeded_last_hour=runs.succeeded + ok,
                failed_last_hour=runs.failed + failed,
                oldest_due_wait=age(now, figures.oldest_due),
                changed_at=None if state is None else state.changed_at,
                changed_by=None if state is None else state.changed_by,
                times=runs,
            )
        )
    return QueuesReport(rows, truncated)


def age(now: datetime, since: datetime | None) -> float | None:
    """Seconds from ``since`` to ``now`` (never negative); ``None`` for none."""
    return None if since is None else max(0.0, (now - since).total_seconds())


def queue_names(
    conn: Connection,
    store: Queues,
    states: Collection[str],
    containing: str | None = None,
    after: str | None = None,
) -> tuple[list[str], bool]:
    """The default queue, every queue ever paused or resumed, and every queue some job names
    (live, or ended until retention archives it), by name: at most :data:`MAX_QUEUES`, and
    whether there were more; only those whose name holds ``containing`` (as
    :func:`~flask_ratchet.store.queues.named_like` decides) and comes after ``after``, if
    given. Each is found by one index probe, however many jobs it holds."""
    found = {
        name
        for name in (DEFAULT_QUEUE, *states)
        if (not containing or containing.lower() in name.lower())
        and (after is None or name > after)
    }
    found.update(store.live(conn, MAX_QUEUES + 1, containing, after))
    found.update(store.named(conn, MAX_QUEUES + 1, containing, after))
    ordered = sorted(found)
    return ordered[:MAX_QUEUES], len(ordered) > MAX_QUEUES


def _dead_letters(conn: Connection) -> dict[str, int]:
    """The FAILED jobs with no hot row (as the dead-letter page counts them), by queue: the
    FAILED jobs of each queue, from the index of them alone, less those paused since (the only
    FAILED jobs with a hot row: a retry clears the terminal status), from the hot table alone.
    """
    failed = conn.execute(
        sa.select(job.c.queue, sa.func.count())
        .where(job.c.terminal_status == const(JobStatus.FAILED))
        .group_by(job.c.queue)
    )
    counts = {name: int(n) for name, n in failed}
    paused = conn.execute(
        sa.select(job_queue.c.queue, sa.func.count())
        .where(
            job_queue.c.status == const(JobStatus.PAUSED),
            job_queue.c.paused_from_status == const(JobStatus.FAILED),
        )
        .group_by(job_queue.c.queue)
    )
    for name, n in paused:
        counts[name] = counts.get(name, 0) - int(n)
    return counts


def _older_runs(conn: Connection, now: datetime) -> dict[str, tuple[int, int]]:
    """The last hour's attempts whose run row holds no queue (written before it did), by their
    job's queue: (succeeded, failed). None an hour after the upgrade; the others, which hold
    their queue, are counted by :func:`~.queue_runs.hour_runs`."""
    failed = sa.case((execution.c.status == JobStatus.FAILED, 1), else_=0)
    rows = conn.execute(
        sa.select(job.c.queue, sa.func.count(), sa.func.sum(failed))
        .select_from(execution.join(job, job.c.job_id == execution.c.job_id))
        .where(execution.c.started_at >= now - timedelta(hours=1), execution.c.queue.is_(None))
        .group_by(job.c.queue)
    )
    return {name: (int(n) - int(bad or 0), int(bad or 0)) for name, n, bad in rows}
