"""Changes to every job a filter matches: cancel, retry, delete, a chunk of jobs at a time.

The matching jobs are read newest first, a chunk at a time (keyset by id, so a job is read
once), and each chunk is changed with a few statements for the whole chunk, through the same
guards as the one-job operations of :class:`~.jobs.Jobs`: the guarded delete of the hot rows
for a cancel, the insert of hot rows (their primary key) for a retry, the locked cold rows for
a delete. A job that changed meanwhile is left alone and not counted.

The facts recorded are one aggregate per operation (``jobs-bulk-canceled`` …), not one per job:
a receiver of per-job signals would otherwise be called a hundred thousand times. What a job's
end sets off (a batch's counts, dependents, callbacks) is set off as for one job.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .. import facts
from ..facts import Event
from ..flows import JobType
from ..schema import (
    batch,
    business_key,
    dlq_alert,
    execution,
    job,
    job_log,
    job_queue,
    job_tag,
)
from ..states import LIVE, TERMINAL, Action, JobStatus, sources
from .dialect import Dialect
from .flows import Flows
from .job_reads import narrowed_by
from .terminal import end_live_many
from .types import Ended, JobFilter

#: Jobs changed per chunk: each chunk is a handful of statements, whatever its size.
BULK_CHUNK = 1000
#: Chunks of ids read at once: one read of the matching jobs costs about the same for ten
#: chunks as for one where the planner has no statistics yet (a table filled a moment ago).
READ_AHEAD = 10

#: What each bulk operation may start from.
BULK_SOURCES: dict[str, frozenset[JobStatus]] = {
    "cancel": frozenset(sources(Action.CANCEL)),
    "retry": frozenset(sources(Action.RETRY)),
    "delete": TERMINAL,
}


class Bulk:
    """Set-based operators' changes over a :class:`~.types.JobFilter`."""

    def __init__(self, dialect: Dialect, flows: Flows) -> None:
        self.dialect = dialect
        self.flows = flows

    def count(self, conn: Connection, action: str, where: JobFilter) -> int:
        """How many jobs ``action`` would change now (a dry run)."""
        statuses = _among(action, where)
        if not statuses:
            return 0
        stmt = sa.select(sa.func.count()).select_from(_matching(where, statuses).subquery())
        return int(conn.execute(stmt).scalar_one())

    def cancel(self, conn: Connection, where: JobFilter) -> int:
        """PENDING, PAUSED and RUNNING jobs matching ``where`` → CANCELED; how many."""
        return self._each_chunk(conn, "cancel", where, self._cancel)

    def retry(self, conn: Connection, where: JobFilter) -> int:
        """FAILED jobs matching ``where`` → PENDING, attempts reset, due now; how many. A job
        whose business key another live job holds now is left FAILED, as one retry leaves it."""
        return self._each_chunk(conn, "retry", where, self._retry)

    def delete(self, conn: Connection, where: JobFilter) -> int:
        """SUCCEEDED, FAILED and CANCELED jobs matching ``where``, with everything recorded
        about them, deleted; how many."""
        return self._each_chunk(conn, "delete", where, self._delete)

    # -- the chunks ----------------------------------------------------------------------------

    def _each_chunk(
        self,
        conn: Connection,
        action: str,
        where: JobFilter,
        change: Callable[[Connection, list[uuid.UUID]], int],
    ) -> int:
        statuses = _among(action, where)
        live = frozenset(s for s in statuses if s in LIVE)
        # Ended jobs one status at a time: the index on (terminal_status, job_id) then reads
        # each chunk in id order, where several statuses at once are read whole and sorted.
        passes = ([live] if live else []) + [frozenset({s}) for s in sorted(statuses - live)]
        changed = 0
        for among in passes:
            after: uuid.UUID | None = None
            while True:
                stmt = _matching(where, among)
                if after is not None:
                    stmt = stmt.where(job.c.job_id < after)
                newest = stmt.order_by(job.c.job_id.desc()).limit(BULK_CHUNK * READ_AHEAD)
                ids: list[uuid.UUID] = list(conn.execute(newest).scalars())
                if not ids:
                    break
                for start in range(0, len(ids), BULK_CHUNK):
                    part = ids[start : start + BULK_CHUNK]
                    # The batch rows before any job row: the lock order of every batch writer.
                    self.flows.batches.lock_of(conn, part)
                    changed += change(conn, part)
                after = ids[-1]
        return changed

    def _cancel(self, conn: Connection, ids: list[uuid.UUID]) -> int:
        ended = end_live_many(self.dialect, conn, ids, Action.CANCEL)
        if ended:
            linked = conn.execute(
                sa.select(job.c.job_id).where(job.c.job_id.in_(list(ended)), job.c.follow_up)
            ).scalars()
            self.flows.ended(conn, [Ended(i, JobStatus.CANCELED) for i in linked])
        return len(ended)

    def _retry(self, conn: Connection, ids: list[uuid.UUID]) -> int:
        now = self.dialect.now_sql()
        columns = (
            "job_id status scheduled_time priority attempts max_retries version updated_at"
        ).split()
        revived = set(
            conn.execute(
                self.dialect.insert_ignoring(job_queue, "job_id")
                .from_select(
                    columns,
                    sa.select(
                        job.c.job_id,
                        sa.literal(str(JobStatus.PENDING)),
                        now,
                        job.c.priority,
                        sa.literal(0),
                        job.c.max_retries,
                        sa.literal(0),
                        now,
                    ).where(
                        job.c.job_id.in_(ids),
                        _by_id_only(job.c.terminal_status).in_(sorted(sources(Action.RETRY))),
                        # A batch's parent has no work of its own to run again.
                        job.c.job_type != JobType.BATCH,
                    ),
                )
                .returning(job_queue.c.job_id)
            ).scalars()
        )
        if not revived:
            return 0
        keyed = set(
            conn.execute(
                sa.select(job.c.job_id).where(
                    job.c.job_id.in_(list(revived)), job.c.business_key.is_not(None)
                )
            ).scalars()
        )
        if keyed:
            took = set(
                conn.execute(
                    self.dialect.insert_ignoring(business_key, "business_key")
                    .from_select(
                        ["business_key", "job_id", "reserved_at"],
                        sa.select(job.c.business_key, job.c.job_id, now).where(
                            job.c.job_id.in_(list(keyed))
                        ),
                    )
                    .returning(business_key.c.job_id)
                ).scalars()
            )
            # Another live job holds the key now: those stay FAILED, their hot rows undone.
            if lost := keyed - took:
                conn.execute(sa.delete(job_queue).where(job_queue.c.job_id.in_(list(lost))))
                revived -= lost
        if not revived:
            return 0
        again = list(revived)
        # Their failures no longer count in batches not yet settled.
        children = (
            sa.select(sa.func.count())
            .where(job.c.batch_id == batch.c.batch_id, job.c.job_id.in_(again))
            .scalar_subquery()
        )
        parents = sa.select(job.c.batch_id).where(
            job.c.job_id.in_(again), job.c.batch_id.is_not(None)
        )
        conn.execute(
            sa.update(batch)
            .where(batch.c.batch_id.in_(parents), batch.c.finished_at.is_(None))
            .values(failed=batch.c.failed - children)
        )
        conn.execute(
            sa.update(job)
            .where(job.c.job_id.in_(again))
            .values(
                terminal_status=None, terminal_error=None, result=None, finished_at=None, attempts=0
            )
        )
        facts.record(conn, [Event(facts.WAKE)])
        return len(again)

    def _delete(self, conn: Connection, ids: list[uuid.UUID]) -> int:
        # As Jobs.delete_ended, for a chunk: the cold rows locked first, then those that are
        # live again (a paused FAILED job has a hot row) left out.
        locked = set(
            conn.execute(
                sa.select(job.c.job_id)
                .where(job.c.job_id.in_(ids), _by_id_only(job.c.terminal_status).in_(TERMINAL))
                .with_for_update()
            ).scalars()
        )
        if locked:
            locked -= set(
                conn.execute(
                    sa.select(job_queue.c.job_id).where(job_queue.c.job_id.in_(list(locked)))
                ).scalars()
            )
        if not locked:
            return 0
        gone = list(locked)
        conn.execute(sa.delete(job).where(job.c.job_id.in_(gone)))
        # Explicitly: SQLite enforces the foreign keys' ON DELETE CASCADE only when asked to.
        for table in (execution, job_log, dlq_alert, job_tag, business_key):
            conn.execute(sa.delete(table).where(table.c.job_id.in_(gone)))
        return len(gone)


def _by_id_only(column: sa.Column[Any]) -> sa.ColumnElement[Any]:
    """``column`` in a form no index serves, where the ids are the way in: beside a list of
    ids, whose primary key lookup is always the plan to take (right after a bulk change in the
    same transaction, PostgreSQL's statistics of the statuses are stale and can make a status
    index look better, to be scanned whole for each chunk), and for a keyset walk in id order."""
    return sa.func.coalesce(column, "")


def _among(action: str, where: JobFilter) -> frozenset[JobStatus]:
    """The statuses ``action`` changes, narrowed by the filter's."""
    allowed = BULK_SOURCES[action]
    return allowed if where.statuses is None else allowed & frozenset(where.statuses)


def _matching(where: JobFilter, statuses: Collection[JobStatus]) -> sa.Select[Any]:
    """The ids of the jobs matching ``where`` in one of ``statuses``."""
    live = sorted(s for s in statuses if s in LIVE)
    ended = sorted(s for s in statuses if s in TERMINAL)
    stmt: sa.Select[Any]
    if not ended:  # live jobs only: the hot rows' status, joined
        stmt = (
            sa.select(job.c.job_id)
            .join(job_queue, job_queue.c.job_id == job.c.job_id)
            # Read in id order from the primary key, each chunk where the last one ended: from
            # the status index, every live job would be read and sorted for each chunk.
            .where(_by_id_only(job_queue.c.status).in_(live))
        )
    else:
        stmt = (
            sa.select(job.c.job_id)
            .outerjoin(job_queue, job_queue.c.job_id == job.c.job_id)
            .where(
                sa.or_(
                    job_queue.c.status.in_(live),
                    sa.and_(job_queue.c.job_id.is_(None), job.c.terminal_status.in_(ended)),
                )
            )
        )
    return narrowed_by(stmt, where)
