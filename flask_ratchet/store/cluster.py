"""What nodes share through the database: heartbeats, orphan recovery, leases, retention.

Every time here is the database's (``now_sql``/``ago_sql``), never a worker's clock: two nodes
with skewed clocks still agree on who is dead and whose lease expired.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement

from ..breaker import BREAKER_RESET
from ..columns import UNREADABLE_ID, UtcDateTime, is_mysql
from ..ids import uuid7
from ..options import Priority
from ..schema import (
    audit,
    batch,
    business_key,
    dlq_alert,
    execution,
    job,
    job_archive,
    job_log,
    job_queue,
    job_tag,
    lock,
    node,
    workflow_condition,
)
from ..states import Action, JobStatus, sources, target
from .dialect import Dialect, chunks
from .flows import Flows
from .resources import release_node_permits, release_stale_permits
from .terminal import finish
from .types import NodeInfo, Recovered

log = logging.getLogger("flask_ratchet")

_UTC = UtcDateTime()
#: The audit action by which a worker says it stopped cleanly (its actor: the node id); the
#: console's nodes page names the last ones once no worker runs.
WORKER_STOPPED = "worker-stopped"


class Cluster:
    """Nodes, orphans, leases, the next due time and retention."""

    def __init__(self, dialect: Dialect, flows: Flows) -> None:
        self.dialect = dialect
        self.flows = flows

    # -- nodes ---------------------------------------------------------------------------------

    def heartbeat(self, conn: Connection, info: NodeInfo, state: str | None = None) -> datetime:
        """Record that ``info.node_id`` is alive, with what it reports of its ``state`` (JSON:
        its circuit breakers); return the database's time."""
        beat = self.dialect.upsert(
            node,
            ("node_id",),
            {
                "info": state,
                "node_id": info.node_id,
                "host": info.host,
                "pid": info.pid,
                "version": info.version,
                "concurrency": info.concurrency,
                "started_at": self.dialect.now_sql(),
                "last_heartbeat": self.dialect.now_sql(),
            },
            lambda new: {
                "last_heartbeat": new.last_heartbeat,
                "pid": new.pid,
                "info": new.info,
            },
        ).returning(node.c.last_heartbeat)
        return conn.execute(beat).scalar_one()  # type: ignore[no-any-return]

    def breaker_resets(self, conn: Connection, since: datetime) -> list[tuple[str, str]]:
        """Circuit-breaker resets operators asked for at or after ``since``: (audit row id,
        service) of each ``reset-breaker`` audit row.

        The id is only a key (each reset is applied once), read as the text the row holds: an
        id SQLite keeps that is not a UUID (written by hand) must not fail the heartbeat that
        reads it, or the node would look dead.
        """
        # MariaDB keeps the id as 16 bytes: cast to text they are no valid UTF-8, and a driver
        # decoding them fails (PyMySQL 1.1.0 then loses its place in the connection): as hex.
        key = sa.func.hex(audit.c.audit_id) if is_mysql(conn.dialect) else audit.c.audit_id
        rows = conn.execute(
            sa.select(sa.cast(key, sa.String).label("audit_id"), audit.c.target)
            .where(audit.c.action == BREAKER_RESET, audit.c.at >= since)
            .order_by(audit.c.at)
        )
        return [(r.audit_id, r.target) for r in rows]

    def record_audit(
        self,
        conn: Connection,
        *,
        at: datetime,
        actor: str,
        role: str,
        action: str,
        scope: str,
        target: str,
        requested: int,
        changed: int,
    ) -> uuid.UUID:
        """Write one audit row: who did what to how many jobs, and how many actually changed."""
        audit_id = uuid7()
        conn.execute(
            sa.insert(audit).values(
                audit_id=audit_id,
                at=at,
                actor=actor[:255],
                role=role,
                action=action,
                scope=scope,
                target=target,
                requested=requested,
                changed=changed,
            )
        )
        return audit_id

    def remove_node(self, conn: Connection, node_id: str) -> None:
        """A node that shut down cleanly says so: its row goes, as before (nothing counts it
        live or waits for it), and a :data:`WORKER_STOPPED` audit row keeps what it was (its
        host, pid, version and queues), so that the console can name the last workers once
        none runs. Nodes that die leave no such row: orphan recovery and the dead-node
        cleanup read node rows only, and are unchanged."""
        gone = conn.execute(
            sa.delete(node)
            .where(node.c.node_id == node_id)
            .returning(node.c.host, node.c.pid, node.c.version, node.c.info)
        ).first()
        known: dict[str, Any] = {}
        if gone is not None:
            known = {"host": gone.host, "pid": gone.pid, "version": gone.version}
            known["queues"] = published_queues(gone.info)
        self.record_audit(
            conn,
            at=self.dialect.now(conn),
            actor=node_id,
            role="worker",
            action=WORKER_STOPPED,
            scope="node",
            target=json.dumps(known),
            requested=1,
            changed=int(gone is not None),
        )

    def delete_dead_nodes(self, conn: Connection, silent_for: float) -> int:
        """Forget nodes not heard from within ``silent_for`` seconds (see :meth:`heard_within`)."""
        result = conn.execute(sa.delete(node).where(sa.not_(self.dialect.heard_within(silent_for))))
        return int(result.rowcount)

    def recover_orphans(self, conn: Connection, grace: float) -> Recovered:
        """RUNNING jobs of nodes silent for ``grace``, claimed over ``grace`` ago, run again.

        Both conditions must hold: a live node's slow job is never taken, and neither is a job
        claimed a moment ago by a node whose first heartbeat is not in yet. A job that has used all
        its attempts (it keeps killing its workers) goes to the dead-letter queue instead.
        """
        alive = sa.select(node.c.node_id).where(self.dialect.heard_within(grace))
        release_stale_permits(self.dialect, conn, grace)
        return self._take_back(
            conn,
            (
                job_queue.c.picked_at < self.dialect.ago_sql(grace),
                sa.or_(job_queue.c.picked_by.is_(None), job_queue.c.picked_by.not_in(alive)),
            ),
            "its worker stopped sending heartbeats",
        )

    def reclaim_own(self, conn: Connection, node_id: str) -> Recovered:
        """At start-up: RUNNING jobs left by an earlier process with this node id."""
        release_node_permits(conn, node_id)
        return self._take_back(
            conn,
            (job_queue.c.picked_by == node_id,),
            f"worker {node_id} restarted while running it",
        )

    def reclaim_unheld(
        self, conn: Connection, node_id: str, held: Collection[uuid.UUID]
    ) -> Recovered:
        """RUNNING jobs claimed under this node id that its process does not hold (``held``):
        a claim whose commit the worker could not confirm (the connection broke as it
        committed) may have committed. Taken back as orphans are."""
        where: tuple[Any, ...] = (job_queue.c.picked_by == node_id,)
        if held:
            where += (job_queue.c.job_id.not_in(list(held)),)
        return self._take_back(conn, where, f"worker {node_id} could not confirm its claim")

    def _take_back(self, conn: Connection, where: tuple[Any, ...], why: str) -> Recovered:
        running = sorted(sources(Action.RELEASE))
        spent = job_queue.c.attempts > job_queue.c.max_retries
        doomed = (
            conn.execute(
                sa.select(job_queue.c.job_id).where(job_queue.c.status.in_(running), spent, *where)
            )
            .scalars()
            .all()
        )
        # A job failed here counts into its batch: batch rows first, then job rows, the order
        # every batch writer follows (a cancel of the batch could deadlock with this otherwise).
        self.flows.batches.lock_of(conn, doomed)
        failed: list[tuple[uuid.UUID, int]] = []
        for part in chunks(doomed):
            gone = conn.execute(
                sa.delete(job_queue)
                # The conditions again: a job taken meanwhile (ended, or claimed by a live node)
                # is left alone.
                .where(job_queue.c.job_id.in_(list(part)), job_queue.c.status.in_(running), spent)
                .where(*where)
                .returning(job_queue.c.job_id, job_queue.c.attempts)
            )
            failed += [(row.job_id, row.attempts) for row in gone]
        for job_id, attempts in failed:
            ended = finish(
                self.dialect,
                conn,
                job_id,
                target(Action.FAIL, JobStatus.RUNNING),
                attempts=attempts,
                error=f"WorkerLost: {why}, on every one of its {attempts} attempts",
            )
            if ended is not None:
                self.flows.ended(conn, [ended])
        requeued = self.dialect.updated(
            conn,
            sa.update(job_queue)
            .where(job_queue.c.status.in_(running), sa.not_(spent), *where)
            .values(
                status=target(Action.RELEASE, JobStatus.RUNNING),
                scheduled_time=self.dialect.now_sql(),
                picked_by=None,
                picked_at=None,
                last_error=f"WorkerLost: {why}",
                version=job_queue.c.version + 1,
                updated_at=self.dialect.now_sql(),
            ),
            job_queue.c.job_id,
        )
        taken = ([row.job_id for row in requeued], [job_id for job_id, _ in failed])
        tasks: dict[uuid.UUID, str] = {}
        for part in chunks([*taken[0], *taken[1]]):
            rows = conn.execute(sa.select(job.c.job_id, job.c.task).where(job.c.job_id.in_(part)))
            tasks.update((row.job_id, row.task) for row in rows)
        return Recovered(*taken, tasks=tasks, reason=f"WorkerLost: {why}")

    # -- leases --------------------------------------------------------------------------------

    def try_lease(self, conn: Connection, name: str, owner: str, ttl: float) -> bool:
        """Take or renew the lease ``name`` for ``ttl`` seconds; True if ``owner`` holds it now.

        A lease is free when nobody holds it or its holder let it expire.
        """
        held = self.dialect.upserted(
            conn,
            lock,
            ("lock_name",),
            {
                "lock_name": name,
                "locked_by": owner,
                "locked_at": self.dialect.now_sql(),
                "expires_at": self.dialect.later_sql(ttl),
            },
            lambda new: {
                "locked_by": new.locked_by,
                "locked_at": new.locked_at,
                "expires_at": new.expires_at,
            },
            where=lambda _: sa.or_(
                lock.c.locked_by == owner, lock.c.expires_at < self.dialect.now_sql()
            ),
            returning=[lock.c.locked_by],
        )
        return held is not None and held.locked_by == owner

    def release_lease(self, conn: Connection, name: str, owner: str) -> bool:
        """Give the lease up, if ``owner`` holds it."""
        result = conn.execute(
            sa.delete(lock).where(lock.c.lock_name == name, lock.c.locked_by == owner)
        )
        return bool(result.rowcount == 1)

    # -- scheduling ----------------------------------------------------------------------------

    def next_due(self, conn: Connection) -> datetime | None:
        """The earliest due time of any PENDING job (one index probe per priority level)."""
        return self.next_due_and_now(conn)[0]

    def next_due_and_now(
        self,
        conn: Connection,
        queues: Sequence[str] | None = None,
        refused: Collection[str] = (),
    ) -> tuple[datetime | None, datetime]:
        """:meth:`next_due` and the database's time, in one round trip; of the jobs of
        ``queues`` only, if given (one probe per queue and level), and of tasks other than the
        ``refused`` ones (a look at each due job's cold row: only while a worker leaves those
        to others, which a ``--burst`` worker asks once before it ends)."""
        of_queue: list[tuple[ColumnElement[bool], ...]] = (
            [()] if queues is None else [(job_queue.c.queue == name,) for name in queues]
        )
        if refused:
            not_refused = ~sa.exists().where(
                job.c.job_id == job_queue.c.job_id, job.c.task.in_(sorted(refused))
            )
            of_queue = [(*where, not_refused) for where in of_queue]
        firsts = [
            sa.select(job_queue.c.scheduled_time)
            .where(job_queue.c.status == JobStatus.PENDING, *where, job_queue.c.priority == int(p))
            .order_by(job_queue.c.scheduled_time)
            .limit(1)
            .scalar_subquery()
            for where in of_queue
            for p in Priority
        ]
        *values, now = conn.execute(sa.select(*firsts, self.dialect.now_sql())).one()
        due = [v for v in values if v is not None]
        # SQLite returns a scalar subquery's value as untyped text: let the column type read it.
        earliest = _UTC.process_result_value(min(due), conn.dialect) if due else None
        return earliest, _UTC.process_result_value(now, conn.dialect)  # type: ignore[return-value]

    # -- retention -----------------------------------------------------------------------------

    def archive_ended(self, conn: Connection, older_than: float, limit: int) -> int:
        """Move up to ``limit`` jobs that ended over ``older_than`` seconds ago to the archive.

        A row whose id is not a UUID (SQLite text written by hand, read as
        :data:`~flask_ratchet.columns.UNREADABLE_ID`) stays where it is: it cannot be deleted by
        its id, and archiving a copy under the nil id would fail every later pass."""
        fetched = conn.execute(
            sa.select(job)
            .where(
                job.c.terminal_status.is_not(None),
                job.c.finished_at < self.dialect.ago_sql(older_than),
                ~sa.exists().where(job_queue.c.job_id == job.c.job_id),
            )
            .order_by(job.c.finished_at)
            .limit(limit)
        ).all()
        rows = [r for r in fetched if r.job_id != UNREADABLE_ID]
        if len(rows) < len(fetched):
            log.warning(
                "retention: %d ended jobs whose id is not a UUID stay in ratchet_job "
                "(shown with the id %s; delete them by hand)",
                len(fetched) - len(rows),
                UNREADABLE_ID,
            )
        if not rows:
            return 0
        archived_at = self.dialect.now(conn)
        conn.execute(
            sa.insert(job_archive),
            [
                {
                    "job_id": r.job_id,
                    "task": r.task,
                    "terminal_status": r.terminal_status,
                    "business_key": r.business_key,
                    "created_at": r.created_at,
                    "finished_at": r.finished_at,
                    "archived_at": archived_at,
                    "data": json.dumps(
                        {k: v for k, v in r._mapping.items() if k != "job_id"}, default=str
                    ),
                }
                for r in rows
            ],
        )
        ids = [r.job_id for r in rows]
        # By hand, as SQLite does not enforce the foreign keys' ON DELETE CASCADE: batch rows
        # first (the lock order of every batch writer), then what refers to a job row.
        conn.execute(sa.delete(batch).where(batch.c.batch_id.in_(ids)))
        for table in (job_log, execution, dlq_alert, job_tag, business_key, workflow_condition):
            conn.execute(sa.delete(table).where(table.c.job_id.in_(ids)))
        conn.execute(sa.delete(job).where(job.c.job_id.in_(ids)))
        return len(ids)

    def purge_alerts(self, conn: Connection, older_than: float) -> int:
        """Delete DLQ alerts last seen over ``older_than`` seconds ago."""
        result = conn.execute(
            sa.delete(dlq_alert).where(dlq_alert.c.last_seen_at < self.dialect.ago_sql(older_than))
        )
        return int(result.rowcount)

    def purge_logs(self, conn: Connection, older_than: float) -> int:
        """Delete job log lines older than ``older_than`` seconds."""
        result = conn.execute(
            sa.delete(job_log).where(job_log.c.logged_at < self.dialect.ago_sql(older_than))
        )
        return int(result.rowcount)


def published_queues(info: str | None) -> list[str] | None:
    """The queues a node's heartbeat said it takes (``None``: every queue, or not readable)."""
    try:
        published = json.loads(info) if info else None
    except (ValueError, RecursionError):
        return None
    queues = published.get("queues") if isinstance(published, dict) else None
    return [str(q) for q in queues] if isinstance(queues, list) else None
