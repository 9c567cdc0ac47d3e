"""Job rows: submission, the claim, status changes by operators, reads.

Every status write is a compare-and-swap guarded by the statuses :mod:`flask_ratchet.states` allows
for that action: ``UPDATE/DELETE … WHERE job_id = :id AND status IN (…)``. A write that changes
no row means the job was not in an allowed status (or someone else got there first), and the
operation returns False without touching anything else.

Dialects differ in their clock, their transactions, their inserts and the claim: see
:mod:`.dialect`.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Row
from sqlalchemy.sql import Select

from .. import facts, payload, tracing
from ..facts import Event
from ..flows import JobType
from ..job import Job, decode_progress
from ..options import Backoff, Priority
from ..paging import Page, cursor_id
from ..paging import cursor as cursor_of
from ..schema import business_key, dlq_alert, execution, job, job_log, job_queue, job_tag
from ..states import LIVE, TERMINAL, Action, JobStatus, resume_target, sources
from .dialect import Dialect
from .flows import Flows
from .queues import Queues
from .submission import Submission
from .terminal import finish
from .types import ClaimedJob, Ended, Inserted, JobFilter, NewJob

_JOB_COLUMNS = [
    job.c.job_id,
    job.c.task,
    job.c.queue,
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


class Jobs:
    """Job rows: what the seeds' JobCrudStore, JobClaimStore, JobTerminalStore, JobRetryStore
    and JobPauseStore do."""

    def __init__(self, dialect: Dialect, flows: Flows, queues: Queues) -> None:
        self.dialect = dialect
        self.flows = flows
        self.queues = queues
        self._submission = Submission(dialect)

    # -- submission and the claim --------------------------------------------------------------

    def insert_jobs(self, conn: Connection, jobs: Sequence[NewJob]) -> list[Inserted]:
        """Insert jobs, their queue rows, tags and key reservations (with the dialect's own
        SQL where it has some); return each job's id, or the id its idempotency key matched.

        :raises DuplicateBusinessKey: if a business key is held; nothing is written.

        While tracing is on (:mod:`flask_ratchet.tracing`) the submission is a PRODUCER span,
        and each job is written with its context.
        """
        found = tracing.tracer()
        if found is None or not jobs:
            return self._insert(conn, jobs)
        queues = {new.options.queue for new in jobs}
        tasks = {new.task for new in jobs}
        one = str(jobs[0].job_id) if len(jobs) == 1 else None
        with tracing.sending(found, queues, tasks, len(jobs), one) as context:
            if context is not None:
                for new in jobs:
                    new.trace_context = context
            return self._insert(conn, jobs)

    def _insert(self, conn: Connection, jobs: Sequence[NewJob]) -> list[Inserted]:
        inserted = self.dialect.own_insert(conn, jobs)
        if inserted is None:
            inserted = self._submission.insert(conn, jobs)
        # What a session that is never committed loses: the warning at a request's end.
        created = zip(jobs, inserted, strict=True)
        facts.record_submitted(conn, (new.task for new, o in created if o.created))
        return inserted

    def claim_due(
        self,
        conn: Connection,
        limit: int,
        node_id: str,
        boost_minutes: int,
        quotas: Mapping[str, int] | None = None,
        refused: Collection[str] = (),
    ) -> list[ClaimedJob]:
        """Mark up to ``limit`` due jobs RUNNING for ``node_id`` and return them, best first:
        from the queues ``quotas`` names, at most ``quotas[queue]`` from each, or from every
        queue if it is ``None``; never from a paused queue, nor a job of the ``refused``
        tasks.

        The claim reads the paused queues itself. A claim of every queue also looks at a read
        of them at most a second old: while a queue is paused it names the others instead, or
        a paused backlog would fill its candidates."""
        if quotas is None:
            others = self.queues.claimable(conn, None)
            if others is not None:
                if not others:
                    return []
                quotas = dict.fromkeys(others, limit)
        return self.dialect.claim_due(conn, limit, node_id, boost_minutes, quotas, refused)

    # -- status changes ------------------------------------------------------------------------

    def cancel(self, conn: Connection, job_id: uuid.UUID) -> bool:
        """PENDING, PAUSED or RUNNING → CANCELED (a running job's outcome is then fenced out)."""
        # The batch row before any job row, as the completer does: one lock order, no deadlock.
        self.flows.batches.lock_of(conn, [job_id])
        gone = conn.execute(
            sa.delete(job_queue)
            .where(job_queue.c.job_id == job_id, job_queue.c.status.in_(sources(Action.CANCEL)))
            .returning(job_queue.c.attempts)
        ).first()
        if gone is None:
            return False
        ended = finish(self.dialect, conn, job_id, JobStatus.CANCELED, attempts=gone.attempts)
        self._followed_up(conn, ended)
        return True

    def _followed_up(self, conn: Connection, ended: Ended | None) -> None:
        """Set off what a job's end sets off, if it was written with follow-ups."""
        if ended is not None:
            self.flows.ended(conn, [ended])

    def pause(self, conn: Connection, job_id: uuid.UUID) -> bool:
        self.flows.batches.lock_of(conn, [job_id])  # a revived FAILED child is uncounted
        allowed = sources(Action.PAUSE)
        live_from = sorted(allowed & LIVE)
        paused = conn.execute(
            sa.update(job_queue)
            .where(job_queue.c.job_id == job_id, job_queue.c.status.in_(live_from))
            # In this order: MariaDB assigns left to right, each later value seeing the earlier
            # ones, so the old status is kept before it is overwritten.
            .ordered_values(
                (job_queue.c.paused_from_status, job_queue.c.status),
                (job_queue.c.status, JobStatus.PAUSED),
                (job_queue.c.version, job_queue.c.version + 1),
                (job_queue.c.updated_at, self.dialect.now_sql()),
            )
        )
        # A terminal FAILED job has no hot row: pausing it puts one back, guarded by the cold
        # row (and its failure no longer counts in its batch, if it is a child).
        revived = paused.rowcount != 1 and self._recreate_hot_row(
            conn, job_id, sorted(allowed & TERMINAL), JobStatus.PAUSED
        )
        if revived:
            self.flows.batches.uncount_child(conn, job_id)
        if paused.rowcount == 1 or revived:
            facts.record(conn, [Event(facts.JOB_PAUSED, {"job_id": job_id})])
            return True
        current = conn.execute(
            sa.select(job_queue.c.status).where(job_queue.c.job_id == job_id)
        ).scalar()
        return current == JobStatus.PAUSED  # pausing a paused job is a no-op that succeeds

    def resume(self, conn: Connection, job_id: uuid.UUID) -> bool:
        self.flows.batches.lock_of(conn, [job_id])  # resumed to FAILED, a child counts
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
                        updated_at=self.dialect.now_sql(),
                    )
                )
            else:  # back to a terminal status: the cold row still holds it
                stmt = sa.delete(job_queue).where(*guard)
            if conn.execute(stmt).rowcount == 1:
                facts.record(conn, [Event(facts.JOB_RESUMED, {"job_id": job_id})])
                if back_to not in LIVE:  # FAILED again: it counts in its batch again
                    self.flows.recount_child(conn, job_id, back_to)
                return True
        return False

    def make_due(self, conn: Connection, job_id: uuid.UUID) -> bool:
        """Bring a PENDING job's next run forward to now (a retry's backoff skipped by the
        testing kit); its status does not change. False if it is not PENDING."""
        stmt = (
            sa.update(job_queue)
            .where(job_queue.c.job_id == job_id, job_queue.c.status == JobStatus.PENDING)
            .values(scheduled_time=self.dialect.now_sql(), updated_at=self.dialect.now_sql())
        )
        return conn.execute(stmt).rowcount == 1

    def retry(self, conn: Connection, job_id: uuid.UUID) -> bool:
        self.flows.batches.lock_of(conn, [job_id])  # a retried child is uncounted
        if not self._recreate_hot_row(
            conn, job_id, sorted(sources(Action.RETRY)), JobStatus.PENDING
        ):
            return False
        key = conn.execute(sa.select(job.c.business_key).where(job.c.job_id == job_id)).scalar()
        if key is not None:
            took = conn.execute(
                self.dialect.insert_ignoring(business_key, "business_key")
                .values(business_key=key, job_id=job_id, reserved_at=self.dialect.now_sql())
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
        self.flows.batches.uncount_child(conn, job_id)  # its failure no longer counts
        facts.record(conn, [Event(facts.JOB_RETRIED, {"job_id": job_id})])
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
            self.dialect.now_sql(),
            job.c.priority,
            job.c.attempts if to == JobStatus.PAUSED else sa.literal(0),
            job.c.max_retries,
            paused_from,
            job.c.terminal_error if to == JobStatus.PAUSED else sa.null(),
            sa.literal(0),
            self.dialect.now_sql(),
        ).where(
            job.c.job_id == job_id,
            job.c.terminal_status.in_(from_terminal),
            # A batch's parent has no work of its own to run again: retry its children.
            job.c.job_type != JobType.BATCH,
        )
        stmt = (
            self.dialect.insert_ignoring(job_queue, "job_id")
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
            .returning(job_queue.c.job_id)
        )
        # RETURNING, not rowcount: drivers may report -1 for INSERT … ON CONFLICT.
        return conn.execute(stmt).first() is not None

    def delete_ended(self, conn: Connection, job_id: uuid.UUID) -> bool:
        """Delete a SUCCEEDED, FAILED or CANCELED job and everything that belongs to it.

        The guard is the cold row's terminal status and the absence of a hot row (a paused FAILED
        job has one again): a job that is live, or was retried a moment ago, is left alone and the
        call returns False. Children are deleted explicitly because SQLite does not enforce the
        foreign keys' ``ON DELETE CASCADE`` unless the connection asks for it.

        Three statements, in this order, because of concurrent pauses and retries on PostgreSQL:
        the cold row is locked first (``FOR UPDATE``, which also conflicts with the key-share lock a
        new hot row's foreign key takes), so a pause or retry that already inserted a hot row has
        committed before the hot-row check runs, and one that comes later waits for this delete and
        then finds no job. The check is a statement of its own so that, under READ COMMITTED, it
        sees what committed while the lock was awaited. SQLite's ``BEGIN IMMEDIATE`` already
        serialises writers (SQLAlchemy renders no ``FOR UPDATE`` there).
        """
        locked = conn.execute(
            sa.select(job.c.job_id)
            .where(job.c.job_id == job_id, job.c.terminal_status.in_(sorted(TERMINAL)))
            .with_for_update()
        ).first()
        if locked is None:
            return False
        hot = conn.execute(
            sa.select(job_queue.c.job_id).where(job_queue.c.job_id == job_id)
        ).first()
        if hot is not None:
            return False
        conn.execute(sa.delete(job).where(job.c.job_id == job_id))
        for table in (execution, job_log, dlq_alert, job_tag, business_key):
            conn.execute(sa.delete(table).where(table.c.job_id == job_id))
        return True

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
            queue=where.queue,
        )
        if cursor is not None:
            stmt = stmt.where(job.c.job_id < cursor_id(cursor, JOB_CURSOR))
        # UUIDv7 ids grow with time: newest first, and a new job never shifts a later page.
        rows = conn.execute(stmt.order_by(job.c.job_id.desc()).limit(limit + 1)).all()
        more = len(rows) > limit
        rows = rows[:limit]
        tags = tags_of(conn, [r.job_id for r in rows])
        items = [_to_job(r, tags.get(r.job_id, ())) for r in rows]
        return Page(items, cursor_of(JOB_CURSOR, rows[-1].job_id) if more else None)


#: The kind of ``find_jobs`` cursors (see :mod:`flask_ratchet.paging`).
JOB_CURSOR = "j"

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
    queue: str | None = None,
) -> S:
    """``stmt`` (over ``ratchet_job``) narrowed by the filters ``find_jobs`` and the console's
    job list share; ``None`` means any."""
    if task is not None:
        stmt = stmt.where(job.c.task == task)
    if queue is not None:
        # Written into the SQL (a validated queue name), so that PostgreSQL can use the partial
        # index of the queues other than the default.
        stmt = stmt.where(job.c.queue == sa.bindparam(None, queue, literal_execute=True))
    if business_key is not None:
        stmt = stmt.where(job.c.business_key == business_key)
    if tag is not None:
        stmt = stmt.where(sa.exists().where(job_tag.c.job_id == job.c.job_id, job_tag.c.tag == tag))
    if created_after is not None:
        stmt = stmt.where(job.c.created_at >= created_after)
    if created_before is not None:
        stmt = stmt.where(job.c.created_at < created_before)
    return stmt


def _to_job(row: Row[Any], tags: tuple[str, ...]) -> Job:
    """A snapshot of a job's rows. Stored JSON is read defensively: a column that is not what
    ratchet writes comes back as :class:`~flask_ratchet.payload.Unreadable`, never an error."""
    live = row.status is not None
    args, kwargs = payload.read_call(row.payload)
    return Job(
        id=row.job_id,
        task=row.task,
        queue=row.queue,
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
