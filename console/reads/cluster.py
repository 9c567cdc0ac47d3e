"""The whole cluster's figures for a metrics scrape: jobs per status, per queue its pending and
due jobs, oldest due job and pause, the dead letters, the live nodes and the running batches.

One scrape sees every worker and every queue however many processes run, because it reads the
database, not a process. A constant number of statements however many queues there are: the
counts per status are exact up to :data:`~.jobs.COUNT_CAP` (past it, PostgreSQL's estimate),
the queues' live figures come from one grouped read of the hot table (which holds only live
jobs), their names from two skip scans (at most :data:`~.queues.MAX_QUEUES`), and running
batches are looked for among the newest :data:`~.batches.BATCH_WINDOW`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from flask_ratchet.schema import batch
from flask_ratchet.states import JobStatus
from flask_ratchet.store.dialect import Dialect
from flask_ratchet.store.queues import LiveFigures, Queues

from .batches import BATCH_WINDOW
from .jobs import Count
from .nodes import live
from .overview import status_counts
from .queues import age, queue_names


@dataclass(frozen=True, slots=True)
class QueueFigures:
    """One queue's live figures."""

    name: str
    pending: Count
    due: Count
    #: Seconds the oldest due job has waited; 0 when none is due.
    oldest_due_age: float
    paused: bool


@dataclass(frozen=True, slots=True)
class ClusterFigures:
    """Everything one scrape reports."""

    jobs: dict[JobStatus, Count]
    queues: list[QueueFigures]
    #: More queues exist than the scrape lists.
    queues_truncated: bool
    live_nodes: int
    running_batches: int
    #: Seconds the read replica these figures were read from is behind (0 in sync); ``None``:
    #: read from the database itself, or a lag not known yet (set by the metrics' reader).
    replica_lag: float | None = None


def cluster_figures(
    conn: Connection, dialect: Dialect, queues: Queues, now: datetime, live_after: float
) -> ClusterFigures:
    """The cluster's figures; ``now`` is the database's time, ``live_after`` the seconds since
    its last heartbeat within which a node counts as live."""
    states = queues.states(conn)
    live = queues.live_figures(conn, now)
    names, truncated = queue_names(conn, queues, states)
    rows = []
    for name in names:
        state = states.get(name)
        figures = live.get(name, LiveFigures())
        rows.append(
            QueueFigures(
                name=name,
                pending=Count(figures.pending),
                due=Count(figures.due),
                oldest_due_age=age(now, figures.oldest_due) or 0.0,
                paused=bool(state is not None and state.paused),
            )
        )
    return ClusterFigures(
        jobs=status_counts(conn, dialect),
        queues=rows,
        queues_truncated=truncated,
        live_nodes=_live_nodes(conn, now, live_after),
        running_batches=_running_batches(conn),
    )


def _live_nodes(conn: Connection, now: datetime, live_after: float) -> int:
    stmt = sa.select(sa.func.count()).where(live(now, live_after))
    return int(conn.execute(stmt).scalar_one())


def _running_batches(conn: Connection) -> int:
    """Batches not finished among the newest :data:`BATCH_WINDOW` (as the batches page walks
    them): a batch older than that still running is not counted."""
    newest = (
        sa.select(batch.c.finished_at)
        .order_by(batch.c.batch_id.desc())
        .limit(BATCH_WINDOW)
        .subquery()
    )
    stmt = sa.select(sa.func.count()).select_from(newest).where(newest.c.finished_at.is_(None))
    return int(conn.execute(stmt).scalar_one())
