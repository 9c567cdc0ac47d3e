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
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .. import facts
from ..facts import Event
from ..schema import (
    job,
    job_queue,
)
from ..states import LIVE, TERMINAL, Action, JobStatus, sources
from .job_reads import by_id_only, narrowed_by
from .jobs import Jobs
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
    "signal": frozenset(sources(Action.SIGNAL)),
}

#: Gives the signal payload of each job of a chunk (sealed for an encrypted job).
Payloads = Callable[[Connection, list[uuid.UUID]], dict[uuid.UUID, "str | None"]]
#: Narrows each chunk to the jobs the caller may change (a policy's, :mod:`..api.policy`);
#: ``None``: every one.
Keep = Callable[[Connection, list[uuid.UUID]], list[uuid.UUID]] | None


class Bulk:
    """Set-based operators' changes over a :class:`~.types.JobFilter`."""

    def __init__(self, jobs: Jobs) -> None:
        self.jobs = jobs
        self.dialect = jobs.dialect
        self.flows = jobs.flows

    def count(self, conn: Connection, action: str, where: JobFilter, keep: Keep = None) -> int:
        """How many jobs ``action`` would change now (a dry run); with ``keep``, counted a
        chunk at a time through it."""
        statuses = _among(action, where)
        if not statuses:
            return 0
        if keep is not None:
            return sum(
                len(keep(conn, ids[i : i + BULK_CHUNK]))
                for ids in _matching_ids(conn, statuses, where)
                for i in range(0, len(ids), BULK_CHUNK)
            )
        stmt = sa.select(sa.func.count()).select_from(_matching(where, statuses).subquery())
        return int(conn.execute(stmt).scalar_one())

    def cancel(self, conn: Connection, where: JobFilter, keep: Keep = None) -> int:
        """PENDING, PAUSED and RUNNING jobs matching ``where`` (and kept by ``keep``) →
        CANCELED; how many."""
        return self._each_chunk(conn, "cancel", where, keep=keep)

    def retry(self, conn: Connection, where: JobFilter, keep: Keep = None) -> int:
        """FAILED jobs matching ``where`` → PENDING, attempts reset, due now; how many. A job
        whose business key another live job holds now is left FAILED, as one retry leaves it."""
        return self._each_chunk(conn, "retry", where, keep=keep)

    def delete(self, conn: Connection, where: JobFilter, keep: Keep = None) -> int:
        """SUCCEEDED, FAILED and CANCELED jobs matching ``where``, with everything recorded
        about them, deleted; how many."""
        return self._each_chunk(conn, "delete", where, keep=keep)

    def signal(
        self, conn: Connection, where: JobFilter, payloads: Payloads, keep: Keep = None
    ) -> int:
        """WAITING jobs matching ``where`` → PENDING, due now, each with its payload from
        ``payloads``; how many. No per-job ``job_signaled`` fact: the caller records one
        aggregate."""
        signals = self.jobs.signals

        def deliver(conn: Connection, ids: list[uuid.UUID]) -> list[uuid.UUID]:
            return signals.signal(conn, ids, payloads(conn, ids), each_event=False)

        return self._each_chunk(conn, "signal", where, deliver, keep)

    def change_listed(
        self, conn: Connection, action: str, ids: Sequence[uuid.UUID], keep: Keep = None
    ) -> list[uuid.UUID]:
        """Apply ``action`` (cancel, retry or delete) to the jobs ``ids`` names (and ``keep``
        keeps), a chunk at a time; the ids it changed (a job in another status is left alone)."""
        changed: list[uuid.UUID] = []
        for start in range(0, len(ids), BULK_CHUNK):
            part = list(ids[start : start + BULK_CHUNK])
            if keep is not None:
                part = keep(conn, part)
            self.flows.batches.lock_of(conn, part)  # batch rows first: the lock order
            changed += self._changes[action](conn, part)
        return changed

    # -- the chunks ----------------------------------------------------------------------------

    def _each_chunk(
        self,
        conn: Connection,
        action: str,
        where: JobFilter,
        change: Callable[[Connection, list[uuid.UUID]], list[uuid.UUID]] | None = None,
        keep: Keep = None,
    ) -> int:
        changed = 0
        for ids in _matching_ids(conn, _among(action, where), where):
            if change is None:
                changed += len(self.change_listed(conn, action, ids, keep))
            else:
                for i in range(0, len(ids), BULK_CHUNK):
                    part = ids[i : i + BULK_CHUNK]
                    changed += len(change(conn, part if keep is None else keep(conn, part)))
        return changed

    @property
    def _changes(self) -> dict[str, Callable[[Connection, list[uuid.UUID]], list[uuid.UUID]]]:
        return {"cancel": self._cancel, "retry": self._retry, "delete": self._delete}

    def _cancel(self, conn: Connection, ids: list[uuid.UUID]) -> list[uuid.UUID]:
        ended = end_live_many(self.dialect, conn, ids, Action.CANCEL)
        if ended:
            linked = conn.execute(
                sa.select(job.c.job_id).where(job.c.job_id.in_(list(ended)), job.c.follow_up)
            ).scalars()
            self.flows.ended(conn, [Ended(i, JobStatus.CANCELED) for i in linked])
        return list(ended)

    def _retry(self, conn: Connection, ids: list[uuid.UUID]) -> list[uuid.UUID]:
        again = self.jobs.retry_many(conn, ids)
        if again:
            facts.record(conn, [Event(facts.WAKE)])
        return again

    def _delete(self, conn: Connection, ids: list[uuid.UUID]) -> list[uuid.UUID]:
        return self.jobs.delete_ended_many(conn, ids)


def _matching_ids(
    conn: Connection, statuses: frozenset[JobStatus], where: JobFilter
) -> Iterator[list[uuid.UUID]]:
    """The ids of the jobs matching ``where`` in one of ``statuses``, newest first, a few
    chunks at a time (keyset by id, so that a job is read once)."""
    live = frozenset(s for s in statuses if s in LIVE)
    # Ended jobs one status at a time: the index on (terminal_status, job_id) then reads
    # each chunk in id order, where several statuses at once are read whole and sorted.
    passes = ([live] if live else []) + [frozenset({s}) for s in sorted(statuses - live)]
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
            yield ids
            after = ids[-1]


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
            .where(by_id_only(job_queue.c.status).in_(live))
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
