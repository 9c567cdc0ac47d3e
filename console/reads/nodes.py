"""The nodes page: every worker node, its heartbeat age, the queues it takes and the jobs it
runs now (started, or waiting for a thread); once no worker runs, the last ones that stopped
cleanly.

A constant number of statements however many nodes: the node rows (at most
:data:`MAX_NODES`), and one grouped read of the RUNNING jobs, ranked per node by window
functions so that each node brings at most :data:`RUNNING_SHOWN` of them with its count of
all.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from flask_ratchet.schema import audit, job, job_queue, node
from flask_ratchet.states import JobStatus
from flask_ratchet.store.cluster import WORKER_STOPPED, published_queues

from . import substates

#: The most nodes listed, the most running jobs listed per node, the most stopped nodes named.
MAX_NODES = 500
RUNNING_SHOWN = 20
STOPPED_SHOWN = 5


def live(now: datetime, live_after: float) -> sa.ColumnElement[bool]:
    """Live nodes, as the console decides it: a heartbeat at most ``live_after`` seconds from
    ``now``, before or after (one further ahead was written by hand, as orphan recovery sees
    it: see ``Dialect.heard_within``)."""
    window = timedelta(seconds=live_after)
    return node.c.last_heartbeat.between(now - window, now + window)


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A job a node runs now, and for how long since it claimed it."""

    job_id: uuid.UUID
    task: str
    queue: str
    elapsed: float


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
    #: The queues its heartbeat says it takes (``None``: every queue).
    queues: list[str] | None = None
    #: Its longest-running jobs, at most :data:`RUNNING_SHOWN` of :attr:`running`.
    jobs: list[RunningJob] = field(default_factory=list)

    @property
    def waiting(self) -> int:
        """Jobs it claimed that wait for a free thread."""
        return self.running - self.started

    @property
    def jobs_not_shown(self) -> int:
        return max(0, self.running - len(self.jobs))


@dataclass(frozen=True, slots=True)
class StoppedNode:
    """A worker that stopped cleanly, as its last audit row says."""

    node_id: str
    stopped_at: datetime
    host: str | None
    pid: int | None
    queues: list[str] | None


def nodes(conn: Connection, now: datetime) -> list[NodeRow]:
    """Every node row (the first :data:`MAX_NODES` by id) with its heartbeat age, the queues
    it takes, and the jobs it holds RUNNING."""
    counts, jobs = _running(conn, now)
    started = substates.started_by(conn, "node")
    rows = conn.execute(sa.select(node).order_by(node.c.node_id).limit(MAX_NODES)).all()
    return [
        NodeRow(
            node_id=r.node_id,
            host=r.host,
            pid=r.pid,
            version=r.version,
            concurrency=r.concurrency,
            started_at=r.started_at,
            heartbeat_age=max(0.0, (now - r.last_heartbeat).total_seconds()),
            running=counts.get(r.node_id, 0),
            queues=published_queues(r.info),
            jobs=jobs.get(r.node_id, []),
            started=substates.split(counts.get(r.node_id, 0), started, r.node_id)[0],
        )
        for r in rows
    ]


def _running(conn: Connection, now: datetime) -> tuple[dict[str, int], dict[str, list[RunningJob]]]:
    """The RUNNING jobs by the node that claimed them: how many, and the first
    :data:`RUNNING_SHOWN` by claim time (the longest running first), in one statement."""
    q = job_queue
    ranked = (
        sa.select(
            q.c.picked_by,
            q.c.job_id,
            q.c.queue,
            q.c.picked_at,
            job.c.task,
            sa.func.row_number()
            .over(partition_by=q.c.picked_by, order_by=(q.c.picked_at, q.c.job_id))
            .label("k"),
            sa.func.count().over(partition_by=q.c.picked_by).label("n"),
        )
        .select_from(q.join(job, job.c.job_id == q.c.job_id))
        .where(q.c.status == JobStatus.RUNNING, q.c.picked_by.is_not(None))
        .subquery("ranked")
    )
    rows = conn.execute(
        sa.select(ranked).where(ranked.c.k <= RUNNING_SHOWN).order_by(ranked.c.k)
    ).all()
    counts: dict[str, int] = {}
    jobs: dict[str, list[RunningJob]] = {}
    for r in rows:
        counts[r.picked_by] = int(r.n)
        since = r.picked_at
        elapsed = 0.0 if since is None else max(0.0, (now - since).total_seconds())
        jobs.setdefault(r.picked_by, []).append(RunningJob(r.job_id, r.task, r.queue, elapsed))
    return counts, jobs


def last_stopped(conn: Connection) -> list[StoppedNode]:
    """The last :data:`STOPPED_SHOWN` workers that stopped cleanly, the latest first (each
    node once): from the ``worker-stopped`` audit rows, newest first on the ``at`` index."""
    rows = conn.execute(
        sa.select(audit.c.actor, audit.c.at, audit.c.target)
        .where(audit.c.action == WORKER_STOPPED)
        .order_by(audit.c.at.desc(), audit.c.audit_id.desc())
        .limit(STOPPED_SHOWN * 4)
    )
    found: dict[str, StoppedNode] = {}
    for r in rows:
        if r.actor in found or len(found) == STOPPED_SHOWN:
            continue
        try:
            known = json.loads(r.target)
        except (ValueError, RecursionError):
            known = None
        known = known if isinstance(known, dict) else {}
        host, pid, queues = known.get("host"), known.get("pid"), known.get("queues")
        found[r.actor] = StoppedNode(
            node_id=r.actor,
            stopped_at=r.at,
            host=host if isinstance(host, str) else None,
            pid=pid if isinstance(pid, int) else None,
            queues=[str(q) for q in queues] if isinstance(queues, list) else None,
        )
    return list(found.values())
