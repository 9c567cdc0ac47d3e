"""The store operations both SQL dialects share, written once in SQLAlchemy Core.

Every status write is a compare-and-swap guarded by the statuses :mod:`flask_ratchet.states` allows
for that action: ``UPDATE/DELETE … WHERE job_id = :id AND status IN (…)``. A write that changes
no row means the job was not in an allowed status (or someone else got there first), and the
operation returns False without touching anything else.

Dialects differ in their clock, their transactions and the claim; see :mod:`.postgres` and
:mod:`.sqlite`.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import sqlalchemy as sa
from blinker import NamedSignal
from sqlalchemy.engine import Connection, Engine, Row
from sqlalchemy.sql import Select
from sqlalchemy.sql.elements import ColumnElement

from .. import events, payload
from ..errors import DuplicateBusinessKey
from ..flow import JobType
from ..job import Job, Page, decode_progress
from ..options import Backoff, Priority
from ..schema import business_key, execution, job, job_queue, job_tag
from ..states import LIVE, TERMINAL, Action, JobStatus, resume_target, sources, target
from .base import ClaimedJob, Inserted, JobFilter, NewJob, chunks
from .batches import Ended
from .cluster import ClusterStore
from .driver import driver_statement
from .execution import ExecutionStore
from .flow import FlowStore
from .resources import ResourceStore

_JOB_COLUMNS = [
    job.c.job_id,
    job.c.task,
    job.c.priority,
    job.c.payload,
    job.c.params,
    job.c.max_retries,
    job.c.backoff,
    job.c.backoff_base,
    job.c.timeout,
    job.c.resource_name,
    job.c.idempotency_key,
    job.c.business_key,
    job.c.depends_on,
    job.c.superseded_by,
    job.c.recurring_id,
    job.c.created_at,
    job.c.first_due_at,
    job.c.terminal_status,
    job.c.terminal_error,
    job.c.result,
    job.c.attempts,
    job.c.finished_at,
    job_queue.c.status,
    job_queue.c.scheduled_time,
    job_queue.c.attempts.label("live_attempts"),
    job_queue.c.picked_by,
    job_queue.c.picked_at,
    job_queue.c.paused_from_status,
    job_queue.c.last_error,
    # While the job runs its hot row has it; after the end, the cold row keeps the last one.
    sa.func.coalesce(job_queue.c.progress, job.c.progress).label("progress"),
]
_JOB_FROM = job.outerjoin(job_queue, job_queue.c.job_id == job.c.job_id)


class SqlJobStore(ExecutionStore, ClusterStore, FlowStore, ResourceStore):
    """Shared implementation of :class:`~flask_ratchet.store.base.JobStore`."""

    # -- dialect hooks beyond DialectHooks -----------------------------------------------------

    def prepare(self, engine: Engine) -> None:
        """Once per process, before first use: settings the database needs (none by default)."""

    def statement_engine(self, engine: Engine) -> Engine:
        """The engine to pass to :meth:`single_statement`; make it once and keep it."""
        return engine

    def claim_engine(self, engine: Engine) -> Engine:
        """The engine a worker claims with (through :meth:`single_statement`); the worker
        makes it once from its own ``engine`` and disposes of it when it stops."""
        return self.statement_engine(engine)

    def single_statement(self, engine: Engine) -> AbstractContextManager[Connection]:
        """A connection for work that is one atomic write (the claim, a submission)."""
        return self.begin(engine)

    def _insert_times(self) -> dict[str, ColumnElement[datetime]]:
        """Expressions for ``created``/``due``, fed per row by :meth:`_time_params`."""
        raise NotImplementedError

    def _time_params(self, new: NewJob, now: datetime) -> dict[str, Any]:
        raise NotImplementedError

    def claim_due(
        self, conn: Connection, limit: int, node_id: str, boost_minutes: int
    ) -> list[ClaimedJob]:
        raise NotImplementedError

    # -- submission ----------------------------------------------------------------------------

    @functools.cached_property
    def _job_insert(self) -> sa.Insert:
        times = self._insert_times()
        stmt: sa.Insert = (
            self.dialect_insert(job)
            .values(created_at=times["created"], first_due_at=times["due"])
            .on_conflict_do_nothing(index_elements=["idempotency_key"])
            .returning(job.c.job_id)
        )
        return stmt

    @functools.cached_property
    def _queue_insert(self) -> sa.Insert:
        times = self._insert_times()
        return sa.insert(job_queue).values(scheduled_time=times["due"], updated_at=times["created"])

    def insert_jobs(self, conn: Connection, jobs: Sequence[NewJob]) -> list[Inserted]:
        refuse_repeated_business_keys(jobs)
        now = datetime.now(UTC)
        inserted: set[uuid.UUID] = set()
        for part in chunks(jobs):
            rows = [_job_row(new) | self._time_params(new, now) for new in part]
            if len(rows) == 1:  # one job, the common case: no executemany (see _insert_one)
                if _insert_one(conn, self._job_insert, rows[0]):
                    inserted.add(part[0].job_id)
            else:
                inserted.update(conn.execute(self._job_insert, rows).scalars())

        outcome = self._match_duplicates(conn, jobs, inserted)
        fresh = [new for new in jobs if new.job_id in inserted]
        self._reserve_business_keys(conn, fresh, inserted)
        for part in chunks(fresh):
            rows = [_queue_row(new) | self._time_params(new, now) for new in part]
            if len(rows) == 1:
                _insert_one(conn, self._queue_insert, rows[0])
            else:
                conn.execute(self._queue_insert, rows)
        tags = [{"job_id": new.job_id, "tag": t} for new in fresh for t in new.options.tags]
        for part in chunks(tags):
            conn.execute(sa.insert(job_tag), list(part))
        return outcome

    def _match_duplicates(
        self, conn: Connection, jobs: Sequence[NewJob], inserted: set[uuid.UUID]
    ) -> list[Inserted]:
        """Map each job whose idempotency key already existed to the original job's id."""
        missing = [new.idempotency_key for new in jobs if new.job_id not in inserted]
        original: dict[str | None, uuid.UUID] = {}
        if missing:
            found = conn.execute(
                sa.select(job.c.idempotency_key, job.c.job_id).where(
                    job.c.idempotency_key.in_(missing)
                )
            )
            original = {key: job_id for key, job_id in found}
        result = []
        for new in jobs:
            if new.job_id in inserted:
                result.append(Inserted(new.job_id, True))
            else:
                # Only an idempotency-key conflict skips a row; the original exists.
                result.append(Inserted(original[new.idempotency_key], False))
        return result

    def _reserve_business_keys(
        self, conn: Connection, fresh: Sequence[NewJob], inserted: set[uuid.UUID]
    ) -> None:
        wanted = [new for new in fresh if new.business_key is not None]
        if not wanted:
            return
        stmt = (
            self.dialect_insert(business_key)
            .values(reserved_at=self.now_sql())
            .on_conflict_do_nothing(index_elements=["business_key"])
            .returning(business_key.c.job_id)
        )
        reserved: set[uuid.UUID] = set()
        for part in chunks(wanted):
            rows = [{"business_key": new.business_key, "job_id": new.job_id} for new in part]
            reserved.update(conn.execute(stmt, rows).scalars())
        refused = [new.business_key for new in wanted if new.job_id not in reserved]
        if refused:
            # Undo this call's rows (never anything else) so the caller's transaction is as before.
            self._delete_jobs(conn, list(inserted))
            raise DuplicateBusinessKey(str(refused[0]))

    def _delete_jobs(self, conn: Connection, ids: list[uuid.UUID]) -> None:
        """Delete jobs this call inserted, with every row that belongs to them."""
        for part in chunks(ids):
            for table in (business_key, job_tag, job_queue, job):
                conn.execute(sa.delete(table).where(table.c.job_id.in_(part)))

    # -- status changes ------------------------------------------------------------------------

    def cancel(self, conn: Connection, job_id: uuid.UUID) -> bool:
        # The batch row before any job row, as the completer does: one lock order, no deadlock.
        self.lock_batches_of(conn, [job_id])
        gone = conn.execute(
            sa.delete(job_queue)
            .where(job_queue.c.job_id == job_id, job_queue.c.status.in_(sources(Action.CANCEL)))
            .returning(job_queue.c.attempts)
        ).first()
        if gone is None:
            return False
        self.finish(conn, job_id, JobStatus.CANCELED, attempts=gone.attempts)
        return True

    def complete(
        self,
        conn: Connection,
        job_id: uuid.UUID,
        node_id: str,
        status: JobStatus,
        *,
        result: str | None = None,
        error: str | None = None,
    ) -> bool:
        """End a RUNNING job this node holds as SUCCEEDED or FAILED (terminal).

        Fenced by ``picked_by``: after orphan recovery or a cancel the row is gone or someone
        else's, the delete matches nothing, and a late finish changes nothing.
        """
        action = Action.SUCCEED if status == JobStatus.SUCCEEDED else Action.FAIL
        self.lock_batches_of(conn, [job_id])  # a child counts into its batch: see cancel
        gone = conn.execute(
            sa.delete(job_queue)
            .where(
                job_queue.c.job_id == job_id,
                job_queue.c.status.in_(sources(action)),
                job_queue.c.picked_by == node_id,
            )
            .returning(job_queue.c.status, job_queue.c.attempts)
        ).first()
        if gone is None:
            return False
        self.finish(
            conn,
            job_id,
            target(action, JobStatus(gone.status)),
            attempts=gone.attempts,
            error=error,
            result=result,
        )
        return True

    def pause(self, conn: Connection, job_id: uuid.UUID) -> bool:
        self.lock_batches_of(conn, [job_id])  # a revived FAILED child is uncounted: see cancel
        allowed = sources(Action.PAUSE)
        live_from = sorted(allowed & LIVE)
        paused = conn.execute(
            sa.update(job_queue)
            .where(job_queue.c.job_id == job_id, job_queue.c.status.in_(live_from))
            .values(
                status=JobStatus.PAUSED,
                paused_from_status=job_queue.c.status,
                version=job_queue.c.version + 1,
                updated_at=self.now_sql(),
            )
        )
        # A terminal FAILED job has no hot row: pausing it puts one back, guarded by the cold
        # row (and its failure no longer counts in its batch, if it is a child).
        revived = paused.rowcount != 1 and self._recreate_hot_row(
            conn, job_id, sorted(allowed & TERMINAL), JobStatus.PAUSED
        )
        if revived:
            self.uncount_child(conn, job_id)
        if paused.rowcount == 1 or revived:
            events.record(conn, [events.Event(events.job_paused.name, {"job_id": job_id})])
            return True
        current = conn.execute(
            sa.select(job_queue.c.status).where(job_queue.c.job_id == job_id)
        ).scalar()
        return current == JobStatus.PAUSED  # pausing a paused job is a no-op that succeeds

    def resume(self, conn: Connection, job_id: uuid.UUID) -> bool:
        self.lock_batches_of(conn, [job_id])  # resumed to FAILED, a child counts: see cancel
        for paused_from in (JobStatus.PENDING, JobStatus.FAILED):
            guard = (
                job_queue.c.job_id == job_id,
                job_queue.c.status.in_(sources(Action.RESUME)),
                job_queue.c.paused_from_status == paused_from,
            )
            back_to = resume_target(paused_from)
            if back_to in LIVE:
                stmt: sa.Executable = (
                    sa.update(job_queue)
                    .where(*guard)
                    .values(
                        status=back_to,
                        paused_from_status=None,
                        version=job_queue.c.version + 1,
                        updated_at=self.now_sql(),
                    )
                )
            else:  # back to a terminal status: the cold row still holds it
                stmt = sa.delete(job_queue).where(*guard)
            if conn.execute(stmt).rowcount == 1:
                events.record(conn, [events.Event(events.job_resumed.name, {"job_id": job_id})])
                if back_to not in LIVE:  # FAILED again: it counts in its batch again
                    self.recount_child(conn, job_id, back_to)
                return True
        return False

    def retry(self, conn: Connection, job_id: uuid.UUID) -> bool:
        self.lock_batches_of(conn, [job_id])  # a retried child is uncounted: see cancel
        if not self._recreate_hot_row(
            conn, job_id, sorted(sources(Action.RETRY)), JobStatus.PENDING
        ):
            return False
        key = conn.execute(sa.select(job.c.business_key).where(job.c.job_id == job_id)).scalar()
        if key is not None:
            took = conn.execute(
                self.dialect_insert(business_key)
                .values(business_key=key, job_id=job_id, reserved_at=self.now_sql())
                .on_conflict_do_nothing(index_elements=["business_key"])
                .returning(business_key.c.job_id)
            ).first()
            if took is None:
                # Another active job holds the key now: undo the hot row, change nothing.
                conn.execute(sa.delete(job_queue).where(job_queue.c.job_id == job_id))
                return False
        conn.execute(
            sa.update(job)
            .where(job.c.job_id == job_id)
            .values(
                terminal_status=None, terminal_error=None, result=None, finished_at=None, attempts=0
            )
        )
        self.uncount_child(conn, job_id)  # its failure no longer counts in its batch
        events.record(conn, [events.Event(events.job_retried.name, {"job_id": job_id})])
        return True

    def _recreate_hot_row(
        self, conn: Connection, job_id: uuid.UUID, from_terminal: list[JobStatus], to: JobStatus
    ) -> bool:
        """Insert a hot row for a terminal job whose cold status is in ``from_terminal``.

        The hot row's primary key makes this a compare-and-swap too: of two concurrent callers,
        one inserts and the other changes nothing.
        """
        paused_from = sa.literal(JobStatus.FAILED) if to == JobStatus.PAUSED else sa.null()
        source = sa.select(
            job.c.job_id,
            sa.literal(str(to)),
            self.now_sql(),
            job.c.priority,
            job.c.attempts if to == JobStatus.PAUSED else sa.literal(0),
            job.c.max_retries,
            paused_from,
            job.c.terminal_error if to == JobStatus.PAUSED else sa.null(),
            sa.literal(0),
            self.now_sql(),
        ).where(
            job.c.job_id == job_id,
            job.c.terminal_status.in_(from_terminal),
            # A batch's parent has no work of its own to run again: retry its children.
            job.c.job_type != JobType.BATCH,
        )
        stmt = (
            self.dialect_insert(job_queue)
            .from_select(
                [
                    "job_id",
                    "status",
                    "scheduled_time",
                    "priority",
                    "attempts",
                    "max_retries",
                    "paused_from_status",
                    "last_error",
                    "version",
                    "updated_at",
                ],
                source,
            )
            .on_conflict_do_nothing(index_elements=["job_id"])
            .returning(job_queue.c.job_id)
        )
        # RETURNING, not rowcount: drivers may report -1 for INSERT … ON CONFLICT.
        return conn.execute(stmt).first() is not None

    def finish(
        self,
        conn: Connection,
        job_id: uuid.UUID,
        status: JobStatus,
        *,
        attempts: int,
        error: str | None = None,
        result: str | None = None,
    ) -> None:
        """Write a terminal outcome to the cold row, free the business key, and set off what
        the job's end sets off (:meth:`after_end`).

        Call only after the guarded delete of the hot row succeeded: that delete is the swap.
        """
        assert status in TERMINAL
        ended = conn.execute(
            sa.update(job)
            .where(job.c.job_id == job_id)
            .values(
                terminal_status=status,
                terminal_error=error,
                result=result,
                attempts=attempts,
                finished_at=self.now_sql(),
            )
            .returning(job.c.task, job.c.follow_up)
        ).one()
        conn.execute(sa.delete(business_key).where(business_key.c.job_id == job_id))
        about: dict[str, Any] = {"job_id": job_id, "task": ended.task}
        announced: dict[JobStatus, tuple[NamedSignal, dict[str, Any]]] = {
            JobStatus.SUCCEEDED: (events.job_completed, {"result": result}),
            JobStatus.FAILED: (events.job_dead_lettered, {"error": error}),
            JobStatus.CANCELED: (events.job_canceled, {"cascade": False}),
        }
        signal, data = announced[status]
        events.record(conn, [events.Event(signal.name, about | data)])
        if ended.follow_up:  # only linked jobs have anything to set off
            self.after_end(conn, [Ended(job_id, status, result=result)])

    def result_of(self, conn: Connection, job_id: uuid.UUID) -> Any:
        """A job's result (decoded JSON), or None if it has none or there is no such job.

        :raises UnreadableJob: if the stored result is not JSON.
        """
        text = conn.execute(sa.select(job.c.result).where(job.c.job_id == job_id)).scalar()
        return payload.decode_stored("result", text)

    def mark_superseded(self, conn: Connection, job_id: uuid.UUID, by: uuid.UUID) -> None:
        conn.execute(sa.update(job).where(job.c.job_id == job_id).values(superseded_by=by))

    # -- reads ---------------------------------------------------------------------------------

    def get_job(self, conn: Connection, job_id: uuid.UUID) -> Job | None:
        row = conn.execute(
            sa.select(*_JOB_COLUMNS).select_from(_JOB_FROM).where(job.c.job_id == job_id)
        ).first()
        if row is None:
            return None
        return _to_job(row, tags_of(conn, [job_id]).get(job_id, ()))

    def find_jobs(
        self, conn: Connection, where: JobFilter, limit: int, cursor: str | None
    ) -> Page[Job]:
        stmt = sa.select(*_JOB_COLUMNS).select_from(_JOB_FROM)
        if where.statuses:
            live = [s for s in where.statuses if s in LIVE]
            ended = [s for s in where.statuses if s in TERMINAL]
            stmt = stmt.where(
                sa.or_(
                    job_queue.c.status.in_(live),
                    sa.and_(job_queue.c.job_id.is_(None), job.c.terminal_status.in_(ended)),
                )
            )
        stmt = narrowed(
            stmt,
            task=where.task,
            business_key=where.business_key,
            tag=where.tag,
            created_after=where.created_after,
            created_before=where.created_before,
        )
        if cursor is not None:
            stmt = stmt.where(job.c.job_id < _parse_cursor(cursor))
        # UUIDv7 ids grow with time: newest first, and a new job never shifts a later page.
        rows = conn.execute(stmt.order_by(job.c.job_id.desc()).limit(limit + 1)).all()
        more = len(rows) > limit
        rows = rows[:limit]
        tags = tags_of(conn, [r.job_id for r in rows])
        items = [_to_job(r, tags.get(r.job_id, ())) for r in rows]
        return Page(items, str(rows[-1].job_id) if more else None)

    def queue_health(self, conn: Connection) -> dict[str, Any]:
        now = self.now(conn)
        counts = {str(s): 0 for s in JobStatus}
        for status, n in conn.execute(
            sa.select(job_queue.c.status, sa.func.count()).group_by(job_queue.c.status)
        ):
            counts[status] = n
        ended = (
            sa.select(job.c.terminal_status, sa.func.count())
            .select_from(_JOB_FROM)
            .where(job_queue.c.job_id.is_(None), job.c.terminal_status.is_not(None))
            .group_by(job.c.terminal_status)
        )
        for status, n in conn.execute(ended):
            counts[status] = n
        oldest = conn.execute(
            sa.select(sa.func.min(job_queue.c.scheduled_time)).where(
                job_queue.c.status == JobStatus.PENDING, job_queue.c.scheduled_time <= now
            )
        ).scalar()
        if isinstance(oldest, str):  # SQLite's MIN() loses the column type
            oldest = datetime.fromisoformat(oldest).replace(tzinfo=UTC)
        return {
            "counts": counts,
            "due": self._count_due(conn, now),
            "oldest_pending_age": (now - oldest).total_seconds() if oldest else None,
            "p95_queue_wait": self._p95_queue_wait(conn, now),
        }

    def _count_due(self, conn: Connection, now: datetime) -> int:
        return int(
            conn.execute(
                sa.select(sa.func.count()).where(
                    job_queue.c.status == JobStatus.PENDING, job_queue.c.scheduled_time <= now
                )
            ).scalar_one()
        )

    def _p95_queue_wait(self, conn: Connection, now: datetime) -> float | None:
        """The 95th percentile of queue wait (seconds) over executions started in the last hour."""
        recent = execution.c.started_at >= now - _HOUR
        n = conn.execute(sa.select(sa.func.count()).where(recent)).scalar_one()
        if not n:
            return None
        value = conn.execute(
            sa.select(execution.c.queue_wait_ms)
            .where(recent)
            .order_by(execution.c.queue_wait_ms)
            .limit(1)
            .offset(int(0.95 * (n - 1)))
        ).scalar()
        return None if value is None else value / 1000.0


_HOUR = timedelta(hours=1)

S = TypeVar("S", bound=Select[Any])


def tags_of(conn: Connection, ids: list[uuid.UUID]) -> dict[uuid.UUID, tuple[str, ...]]:
    """The tags of each of ``ids`` (sorted); jobs without tags are left out."""
    if not ids:
        return {}
    out: dict[uuid.UUID, list[str]] = {}
    rows = conn.execute(
        sa.select(job_tag.c.job_id, job_tag.c.tag)
        .where(job_tag.c.job_id.in_(ids))
        .order_by(job_tag.c.job_id, job_tag.c.tag)
    )
    for job_id, tag in rows:
        out.setdefault(job_id, []).append(tag)
    return {k: tuple(v) for k, v in out.items()}


def narrowed(
    stmt: S,
    *,
    task: str | None = None,
    business_key: str | None = None,
    tag: str | None = None,
    created_after: datetime | None = None,
    created_before: datetime | None = None,
) -> S:
    """``stmt`` (over ``ratchet_job``) narrowed by the filters ``find_jobs`` and the console's
    job list share; ``None`` means any."""
    if task is not None:
        stmt = stmt.where(job.c.task == task)
    if business_key is not None:
        stmt = stmt.where(job.c.business_key == business_key)
    if tag is not None:
        stmt = stmt.where(sa.exists().where(job_tag.c.job_id == job.c.job_id, job_tag.c.tag == tag))
    if created_after is not None:
        stmt = stmt.where(job.c.created_at >= created_after)
    if created_before is not None:
        stmt = stmt.where(job.c.created_at < created_before)
    return stmt


def refuse_repeated_business_keys(jobs: Sequence[NewJob]) -> None:
    """Refuse a business key given to two jobs of one submission, before anything is written."""
    seen: set[str] = set()
    for new in jobs:
        if new.business_key is not None:
            if new.business_key in seen:
                raise DuplicateBusinessKey(new.business_key)
            seen.add(new.business_key)


def job_values(new: NewJob) -> dict[str, Any]:
    """The ``ratchet_job`` columns a submission sets, by name (every dialect binds these)."""
    o = new.options
    return {
        "job_id": new.job_id,
        "task": new.task,
        "job_type": new.job_type,
        "priority": int(o.priority),
        "payload": new.payload,
        "params": new.params,
        "max_retries": o.max_retries,
        "backoff": str(o.backoff),
        "backoff_base": o.backoff_base,
        "timeout": o.timeout,
        "resource_name": o.resource,
        "idempotency_key": new.idempotency_key,
        "business_key": new.business_key,
        "depends_on": new.depends_on,
        "recurring_id": new.recurring_id,
        "fire_time": new.fire_time,
        "batch_id": new.batch_id,
        "follow_up": new.follow_up,
        "callbacks": new.callbacks,
    }


def _insert_one(conn: Connection, stmt: sa.Insert, row: dict[str, Any]) -> list[Any]:
    """Insert one row on the driver's cursor (:mod:`.driver`): most of the cost of submitting
    one job is otherwise SQLAlchemy's per-call work. Returns the rows RETURNING gave (raw)."""
    return driver_statement(stmt, conn.dialect, list(row)).execute(conn, row)


def _job_row(new: NewJob) -> dict[str, Any]:
    return job_values(new) | {"superseded_by": None, "attempts": 0}


def _queue_row(new: NewJob) -> dict[str, Any]:
    return {
        "job_id": new.job_id,
        "status": JobStatus.PENDING,
        "priority": int(new.options.priority),
        "attempts": 0,
        "max_retries": new.options.max_retries,
        "version": 0,
    }


def _parse_cursor(cursor: str) -> uuid.UUID:
    try:
        return uuid.UUID(cursor)
    except (ValueError, TypeError):
        raise ValueError(f"cursor {cursor!r} is not one find_jobs() returned") from None


def _to_job(row: Row[Any], tags: tuple[str, ...]) -> Job:
    """A snapshot of a job's rows. Stored JSON is read defensively: a column that is not what
    ratchet writes comes back as :class:`~flask_ratchet.payload.Unreadable`, never an error."""
    live = row.status is not None
    args, kwargs = payload.read_call(row.payload)
    return Job(
        id=row.job_id,
        task=row.task,
        status=payload.read_member(
            JobStatus,
            "status" if live else "terminal_status",
            row.status if live else row.terminal_status,
        ),
        priority=payload.read_member(Priority, "priority", row.priority),
        args=args,
        kwargs=kwargs,
        params=payload.read_stored("params", row.params, dict) or {},
        attempts=row.live_attempts if live else row.attempts,
        max_retries=row.max_retries,
        backoff=payload.read_member(Backoff, "backoff", row.backoff),
        backoff_base=row.backoff_base,
        timeout=row.timeout,
        resource=row.resource_name,
        tags=tags,
        idempotency_key=row.idempotency_key,
        business_key=row.business_key,
        created_at=row.created_at,
        scheduled_at=row.scheduled_time if live else row.first_due_at,
        picked_by=row.picked_by,
        picked_at=row.picked_at,
        paused_from=(
            payload.read_member(JobStatus, "paused_from_status", row.paused_from_status)
            if row.paused_from_status
            else None
        ),
        finished_at=row.finished_at,
        error=row.last_error if live else row.terminal_error,
        result=payload.read_stored("result", row.result),
        superseded_by=row.superseded_by,
        depends_on=row.depends_on,
        recurring_id=row.recurring_id,
        progress=None if row.progress is None else payload.read_with(decode_progress, row.progress),
    )
