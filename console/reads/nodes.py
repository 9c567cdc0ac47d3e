"""The nodes page: every worker node, its heartbeat age and how many jobs it holds: running,
and of those how many its threads have started (the rest wait for a thread)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from flask_ratchet.schema import job_queue, node
from flask_ratchet.states import JobStatus

from . import substates


def live(now: datetime, live_after: float) -> sa.ColumnElement[bool]:
    """Live nodes, as the console decides it: a heartbeat at most ``live_after`` seconds from
    ``now``, before or after (one further ahead was written by hand, as orphan recovery sees
    it: see ``Dialect.heard_within``)."""
    window = timedelta(seconds=live_after)
    return node.c.last_heartbeat.between(now - window, now + window)


@dataclass(frozen=True, slots=True)
class NodeRow:
    """A worker node as the console shows it."""

    node_id: str
    host: str
    pid: int
    version: str
    concurrency: int
    started_at: datetime
    heartbeat_age: float
    running: int
    #: Of ``running``, the jobs whose attempt a thread has taken (the rest wait for one).
    started: int = 0

    @property
    def waiting(self) -> int:
        """Jobs it claimed that wait for a free thread."""
        return self.running - self.started


def nodes(conn: Connection, now: datetime) -> list[NodeRow]:
    """Every node row with its heartbeat age and how many jobs it holds RUNNING."""
    running: dict[str, int] = dict(
        conn.execute(
            sa.select(job_queue.c.picked_by, sa.func.count())
            .where(job_queue.c.status == JobStatus.RUNNING)
            .group_by(job_queue.c.picked_by)
        ).all()
    )
    started = substates.started_by(conn, "node")
    rows = conn.execute(sa.select(node).order_by(node.c.node_id).limit(500)).all()
    return [
        NodeRow(
            node_id=r.node_id,
            host=r.host,
            pid=r.pid,
            version=r.version,
            concurrency=r.concurrency,
            started_at=r.started_at,
            heartbeat_age=max(0.0, (now - r.last_heartbeat).total_seconds()),
            running=int(running.get(r.node_id, 0)),
            started=substates.split(int(running.get(r.node_id, 0)), started, r.node_id)[0],
        )
        for r in rows
    ]
