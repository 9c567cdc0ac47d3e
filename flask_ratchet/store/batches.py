"""Batches in the store: their rows, counting children as they end, settling, and the lock
order every batch writer keeps.

Counting happens in the transaction that ends each child (see :mod:`.flows`, which calls in
here), guarded by ``finished_at IS NULL``; settling is a swap on the same column, so exactly one
transaction settles a batch. Batch rows are locked in id order before any job row.
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .. import facts, payload
from ..facts import Event
from ..flows import BatchCounts, JobType, batch_outcome
from ..job import BatchChild, BatchProgress
from ..schema import batch, job, job_queue
from ..states import Action, JobStatus
from .dialect import Dialect, chunks
from .terminal import end_live, end_live_many
from .types import Ended, NewBatch

log = logging.getLogger("flask_ratchet")


@dataclass(frozen=True, slots=True)
class JobLinks:
    """What an ended job is linked to: its type, its batch, its callbacks, and its own
    condition if it is a dependent."""

    job_type: str
    batch_id: uuid.UUID | None
    callbacks: str | None
    condition: str | None  # the job's own condition, if it is a dependent


#: What counting a child into its batch reads back: the batch's name, counts and progress task.
_COUNTED = (batch.c.name, batch.c.total, batch.c.succeeded, batch.c.failed, batch.c.progress_task)


class Batches:
    """Batch rows: inserted with their parent, counted into as children end, settled once.
    Part of :class:`~flask_ratchet.store.flows.Flows`."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect

    def insert_batch(self, conn: Connection, new: NewBatch) -> None:
        """Insert a batch's row (its parent job is inserted first)."""
        conn.execute(
            sa.insert(batch).values(
                batch_id=new.batch_id,
                name=new.name,
                total=new.total,
                succeeded=0,
                failed=0,
                child_run_ms=0.0,
                child_wait_ms=0.0,
                progress_task=new.progress_task,
                created_at=self.dialect.now_sql(),
            )
        )

    def set_batch_total(self, conn: Connection, batch_id: uuid.UUID, total: int) -> None:
        """Set the child count of a batch whose children were streamed in."""
        conn.execute(sa.update(batch).where(batch.c.batch_id == batch_id).values(total=total))

    def batch_progress(self, conn: Connection, batch_id: uuid.UUID) -> BatchProgress | None:
        """A batch's counts and metrics, or None if there is no such batch."""
        row = conn.execute(sa.select(batch).where(batch.c.batch_id == batch_id)).first()
        return None if row is None else progress_of(row)

    def children(
        self, conn: Connection, batch_id: uuid.UUID, after: uuid.UUID | None, limit: int
    ) -> list[BatchChild]:
        """Up to ``limit`` children of a batch in submission order, after the child ``after``:
        a keyset page of the index ``(batch_id, job_id)``, so each page costs the same however
        many children there are (a 100,000-child batch is read a page at a time, never whole).

        Submission order is the order of their ids: UUIDv7s, made in order by the one process
        that submitted the batch (:mod:`flask_ratchet.ids`). A child that has ended and was
        moved to the archive by retention is no longer here.
        """
        stmt = (
            sa.select(
                job.c.job_id,
                # A live child's status is its hot row's; an ended one's, its cold row's.
                sa.func.coalesce(job_queue.c.status, job.c.terminal_status).label("status"),
                job.c.result,
            )
            .select_from(job.outerjoin(job_queue, job_queue.c.job_id == job.c.job_id))
            .where(job.c.batch_id == batch_id)
            .order_by(job.c.job_id)
            .limit(limit)
        )
        if after is not None:
            stmt = stmt.where(job.c.job_id > after)
        out = []
        for row in conn.execute(stmt):
            status = payload.read_member(JobStatus, "status", row.status)
            succeeded = status == JobStatus.SUCCEEDED
            result = payload.read_stored("result", row.result) if succeeded else None
            out.append(BatchChild(row.job_id, status, result))
        return out

    def lock(self, conn: Connection, batch_ids: Sequence[uuid.UUID]) -> None:
        """Lock unsettled batch rows, in id order, before any job row: every writer that may
        count into or settle a batch takes its locks in this order, so none waits for another
        in a cycle (PostgreSQL; SQLite's writers are serialised anyway). A settled batch is
        never written again (all its writes are guarded by ``finished_at IS NULL``), so it is
        not locked: that would only make writers wait, and order them against retention."""
        if not self.dialect.locks_rows:
            return
        # Chunks of the sorted ids are locked in order, one after another: still one order.
        for part in chunks(sorted(set(batch_ids))):
            conn.execute(
                sa.select(batch.c.batch_id)
                .where(batch.c.batch_id.in_(list(part)), batch.c.finished_at.is_(None))
                .order_by(batch.c.batch_id)
                .with_for_update()
            ).all()

    def lock_of(self, conn: Connection, job_ids: Sequence[uuid.UUID]) -> None:
        """:meth:`lock` the batches these jobs are children or parents of."""
        if not self.dialect.locks_rows:
            return  # lock would lock nothing: no lookup either
        mine: list[uuid.UUID] = []
        for part in chunks(job_ids):
            mine += conn.execute(
                sa.select(sa.func.coalesce(job.c.batch_id, job.c.job_id)).where(
                    job.c.job_id.in_(list(part)),
                    sa.or_(job.c.batch_id.is_not(None), job.c.job_type == JobType.BATCH),
                )
            ).scalars()
        self.lock(conn, mine)

    def uncount_children(self, conn: Connection, ids: Sequence[uuid.UUID]) -> None:
        """FAILED children are live again (retried, or paused): their failures no longer count
        in their batches, while a batch is unsettled (a settled batch keeps its counts)."""
        children = (
            sa.select(sa.func.count())
            .where(job.c.batch_id == batch.c.batch_id, job.c.job_id.in_(ids))
            .scalar_subquery()
        )
        parents = sa.select(job.c.batch_id).where(
            job.c.job_id.in_(ids), job.c.batch_id.is_not(None)
        )
        conn.execute(
            sa.update(batch)
            .where(batch.c.batch_id.in_(parents), batch.c.finished_at.is_(None))
            .values(failed=batch.c.failed - children)
        )

    def count_children(
        self,
        conn: Connection,
        ended: list[Ended],
        links: dict[uuid.UUID, JobLinks],
        out: list[Event],
    ) -> list[Ended]:
        """Count ended children into their batches; settle each batch whose last child this
        was. Return the batch parents that ended."""
        tallies: dict[uuid.UUID, list[float]] = defaultdict(lambda: [0, 0, 0.0, 0.0])
        for e in ended:
            parent = links[e.job_id].batch_id
            if parent is None:
                continue
            tally = tallies[parent]
            tally[0 if e.status == JobStatus.SUCCEEDED else 1] += 1
            tally[2] += e.run_ms or 0.0
            tally[3] += e.wait_ms or 0.0
        settled: list[Ended] = []
        for batch_id, (ok, bad, run_ms, wait_ms) in sorted(tallies.items()):
            counted = self.dialect.updated(
                conn,
                sa.update(batch)
                .where(
                    batch.c.batch_id == batch_id,
                    batch.c.finished_at.is_(None),
                    _room_for(int(ok + bad)),
                )
                .values(
                    succeeded=batch.c.succeeded + int(ok),
                    failed=batch.c.failed + int(bad),
                    child_run_ms=batch.c.child_run_ms + run_ms,
                    child_wait_ms=batch.c.child_wait_ms + wait_ms,
                ),
                *_COUNTED,
            )
            row = counted[0] if counted else None
            counts = None if row is None else counts_of(row)
            if row is None or counts is None:
                # Settled already (its parent was canceled: nothing to count into), or a row
                # holding counts ratchet never writes: those are recounted from the children.
                row = self.recount_batch(conn, batch_id)
                counts = None if row is None else counts_of(row)
                if row is None or counts is None:
                    continue
            if row.progress_task:
                out.append(
                    Event(
                        facts.CALLBACK,
                        {"task": row.progress_task, "batch_id": batch_id, "counts": counts},
                    )
                )
            if counts.ended >= counts.total:
                done = self.settle_batch(conn, batch_id, row.name, out)
                if done is not None:
                    settled.append(done)
        return settled

    def recount_batch(self, conn: Connection, batch_id: uuid.UUID) -> Any | None:
        """Count an unsettled batch's children again, from how each ended, into its row (locked
        first, so the count sees every child a concurrent writer ended); return the row's name,
        counts and progress task, or None if the batch is settled or gone. The counts a batch's
        row holds are only ever recounted when they cannot be right (written by hand, a damaged
        disk) or nothing can count into them any more (the recovery sweep)."""
        self.lock(conn, [batch_id])
        # A child without a hot row has ended, whatever its cold row says.
        ended = job_queue.c.job_id.is_(None)
        ok = ended & (job.c.terminal_status == JobStatus.SUCCEEDED)
        total, succeeded, failed = conn.execute(
            sa.select(
                sa.func.count(),
                sa.func.count(sa.case((ok, 1))),  # not FILTER (WHERE …): MariaDB lacks it
                sa.func.count(sa.case((ended & ~ok, 1))),
            )
            .select_from(job.outerjoin(job_queue, job_queue.c.job_id == job.c.job_id))
            .where(job.c.batch_id == batch_id)
        ).one()
        recounted = self.dialect.updated(
            conn,
            sa.update(batch)
            .where(batch.c.batch_id == batch_id, batch.c.finished_at.is_(None))
            .values(total=total, succeeded=succeeded, failed=failed),
            *_COUNTED,
        )
        row = recounted[0] if recounted else None
        if row is not None:
            log.warning(
                "batch %s: its counts in ratchet_batch were recounted from its children "
                "(%d of %d ended)",
                batch_id,
                succeeded + failed,
                total,
            )
        return row

    def settle_batch(
        self, conn: Connection, batch_id: uuid.UUID, name: str, out: list[Event]
    ) -> Ended | None:
        """End a batch whose children have all ended: exactly once (``finished_at`` is the
        swap), and its parent job SUCCEEDED or FAILED. Return the parent's end, or None if
        another transaction settled it or the parent had already ended (canceled)."""
        settled = self.dialect.updated(
            conn,
            sa.update(batch)
            .where(
                batch.c.batch_id == batch_id,
                batch.c.finished_at.is_(None),
                batch.c.succeeded + batch.c.failed >= batch.c.total,
            )
            .values(finished_at=self.dialect.now_sql()),
            batch.c.total,
            batch.c.succeeded,
            batch.c.failed,
        )
        if not settled:
            return None
        row = settled[0]
        counts = BatchCounts(row.total, row.succeeded, row.failed)
        status, error = batch_outcome(counts)
        action = Action.BATCH_SUCCEED if status == JobStatus.SUCCEEDED else Action.BATCH_FAIL
        ended = end_live(self.dialect, conn, batch_id, action, error=error, result=counts.to_json())
        out.append(
            Event(
                facts.BATCH_COMPLETED,
                {
                    "batch_id": batch_id,
                    "name": name,
                    # A parent that already ended was canceled: the batch ends with it.
                    "status": ended or JobStatus.CANCELED,
                    "total": counts.total,
                    "succeeded": counts.succeeded,
                    "failed": counts.failed,
                },
            )
        )
        if ended is None:
            return None
        return Ended(batch_id, ended, result=counts.to_json())

    def cascade_batches(
        self,
        conn: Connection,
        ended: list[Ended],
        links: dict[uuid.UUID, JobLinks],
        out: list[Event],
    ) -> list[Ended]:
        """A batch parent that was canceled cancels its children that have not ended."""
        canceled: list[Ended] = []
        for e in ended:
            if links[e.job_id].job_type != JobType.BATCH or e.status != JobStatus.CANCELED:
                continue
            # Each child canceled here is counted in the next round, and the last one settles
            # the batch (the parent, already CANCELED, stays so).
            live = conn.execute(
                sa.select(job.c.job_id)
                .select_from(job.join(job_queue, job_queue.c.job_id == job.c.job_id))
                .where(job.c.batch_id == e.job_id)
            ).scalars()
            children = [
                Ended(child, status, cascade=True, batch_id=e.job_id)
                for child, status in end_live_many(
                    self.dialect, conn, list(live), Action.CANCEL
                ).items()
            ]
            record_cascade(children, out)
            canceled += children
        return canceled


def _room_for(ended: int) -> sa.ColumnElement[bool]:
    """Whether a batch row's counts can take ``ended`` more children: counts that are not
    negative and leave room under the total (computed in 64 bits: the counts of a damaged row
    may be near the 32-bit end, where adding to them fails on PostgreSQL). A row that fails
    this is recounted (:meth:`Batches.recount_batch`)."""
    left = sa.cast(batch.c.total, sa.BigInteger) - batch.c.succeeded - batch.c.failed
    return sa.and_(batch.c.succeeded >= 0, batch.c.failed >= 0, left >= ended)


def counts_of(row: Any) -> BatchCounts | None:
    """A batch row's counts, or None if they are not counts ratchet writes (not whole numbers,
    negative, or more ended than the total)."""
    values = (row.total, row.succeeded, row.failed)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
        return None
    counts = BatchCounts(*values)
    return counts if counts.ended <= counts.total else None


def record_cascade(canceled: Iterable[Ended], out: list[Event]) -> None:
    """A ``job_canceled`` fact (``cascade``) for each job canceled because of another's end."""
    out.extend(Event(facts.JOB_CANCELED, {"job_id": e.job_id, "cascade": True}) for e in canceled)


def progress_of(row: Any) -> BatchProgress:
    """A ``ratchet_batch`` row as a :class:`BatchProgress`. A count or sum that is not a number
    (text or a blob SQLite kept) reads as 0, named with its stored value in ``damaged``."""
    damaged = []
    counts = []
    for name in ("total", "succeeded", "failed"):
        value = getattr(row, name)
        ok = isinstance(value, int) and not isinstance(value, bool)
        counts.append(value if ok else 0)
        if not ok:
            damaged.append(f"{name}={value!r}")
    sums = []
    for name in ("child_run_ms", "child_wait_ms"):
        value = getattr(row, name)
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        sums.append(float(value) if ok else 0.0)
        if not ok:
            damaged.append(f"{name}={value!r}")
    return BatchProgress(
        batch_id=row.batch_id,
        name=row.name,
        total=counts[0],
        succeeded=counts[1],
        failed=counts[2],
        finished=row.finished_at is not None,
        child_run_ms=sums[0],
        child_wait_ms=sums[1],
        created_at=row.created_at,
        finished_at=row.finished_at,
        damaged=", ".join(damaged) or None,
    )
