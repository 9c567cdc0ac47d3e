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
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .. import facts, payload, tracing
from ..facts import Event
from ..flows import NOT_YET, JobType
from ..job import Job
from ..paging import Page
from ..schema import business_key, dlq_alert, execution, job, job_log, job_queue, job_tag
from ..sealing import Keyring, is_sealed
from ..states import LIVE, TERMINAL, Action, JobStatus, resume_target, sources
from . import job_reads
from .dialect import Dialect
from .flows import Flows
from .job_reads import by_id_only
from .queues import Queues
from .signals import Signals
from .submission import Submission
from .terminal import finish
from .types import ClaimedJob, Ended, Inserted, JobFilter, NewJob


class Jobs:
    """Job rows: what the seeds' JobCrudStore, JobClaimStore, JobTerminalStore, JobRetryStore
    and JobPauseStore do."""

    def __init__(self, dialect: Dialect, flows: Flows, queues: Queues) -> None:
        self.dialect = dialect
        self.flows = flows
        self.queues = queues
        #: Jobs that await a signal: parked as they are written, or as a step is released.
        self.signals = Signals(dialect, flows)
        flows.on_released = self.signals.park_released
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
        created = [new for new, o in zip(jobs, inserted, strict=True) if o.created]
        facts.record_submitted(conn, (new.task for new in created))
        self.signals.park(conn, [new for new in created if new.signal is not None])
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
        return self._cancel(conn, job_id)

    def expire(self, conn: Connection, job_id: uuid.UUID, node_id: str, reason: str) -> bool:
        """A job ``node_id`` claimed whose deadline passed before its attempt started: RUNNING
        → CANCELED with ``reason`` as its error, through the cancel's own guard, fenced by the
        claim (a cancel, a recovery or another node's claim first: nothing changes, False). The
        attempt the claim counted is given back: it never started."""
        return self._cancel(conn, job_id, held_by=node_id, error=reason)

    def _cancel(
        self,
        conn: Connection,
        job_id: uuid.UUID,
        *,
        held_by: str | None = None,
        error: str | None = None,
    ) -> bool:
        # The batch row before any job row, as the completer does: one lock order, no deadlock.
        self.flows.batches.lock_of(conn, [job_id])
        statuses = sources(Action.CANCEL)
        guard = [job_queue.c.job_id == job_id]
        if held_by is not None:  # only this node's claim, not yet started
            statuses &= {JobStatus.RUNNING}
            guard.append(job_queue.c.picked_by == held_by)
        gone = conn.execute(
            sa.delete(job_queue)
            .where(*guard, job_queue.c.status.in_(sorted(statuses)))
            .returning(job_queue.c.attempts)
        ).first()
        if gone is None:
            return False
        attempts = max(gone.attempts - 1, 0) if held_by is not None else gone.attempts
        ended = finish(
            self.dialect, conn, job_id, JobStatus.CANCELED, attempts=attempts, error=error
        )
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
        revived = paused.rowcount != 1 and bool(
            self._recreate_hot_rows(conn, [job_id], allowed & TERMINAL, JobStatus.PAUSED)
        )
        if revived:
            self.flows.batches.uncount_children(conn, [job_id])
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

    def run_now(self, conn: Connection, job_id: uuid.UUID) -> bool:
        """A PENDING job due later (scheduled, or a retry in its backoff) made due now, its
        attempts kept; False, nothing written, for any other job: already due, waiting on
        another job (a step due at ``NOT_YET`` is released by its parent, never by hand), or
        not PENDING. The guard is the swap: of two callers, one moves it."""
        now = self.dialect.now_sql()
        moved = conn.execute(
            sa.update(job_queue)
            .where(
                job_queue.c.job_id == job_id,
                job_queue.c.status == JobStatus.PENDING,
                job_queue.c.scheduled_time > now,
                job_queue.c.scheduled_time < NOT_YET,
            )
            .values(scheduled_time=now, version=job_queue.c.version + 1, updated_at=now)
        )
        if moved.rowcount != 1:
            return False
        facts.record(conn, [Event(facts.WAKE)])  # idle workers poll now, not at their next tick
        return True

    def retry(self, conn: Connection, job_id: uuid.UUID) -> bool:
        self.flows.batches.lock_of(conn, [job_id])  # a retried child is uncounted
        if not self.retry_many(conn, [job_id]):
            return False
        facts.record(conn, [Event(facts.JOB_RETRIED, {"job_id": job_id})])
        return True

    def retry_many(self, conn: Connection, ids: Sequence[uuid.UUID]) -> list[uuid.UUID]:
        """FAILED jobs among ``ids`` → PENDING, attempts reset, due now; the ids retried. A job
        whose business key another live job holds now stays FAILED. The caller holds the
        jobs' batch rows (:meth:`.Batches.lock_of`)."""
        revived = self._recreate_hot_rows(conn, ids, sources(Action.RETRY), JobStatus.PENDING)
        if revived:
            revived -= self._keys_held_elsewhere(conn, revived)
        if not revived:
            return []
        again = sorted(revived)
        self.flows.batches.uncount_children(conn, again)  # their failures no longer count
        conn.execute(
            sa.update(job)
            .where(job.c.job_id.in_(again))
            .values(
                terminal_status=None,
                terminal_error=None,
                fingerprint=None,
                result=None,
                finished_at=None,
                attempts=0,
            )
        )
        return again

    def _keys_held_elsewhere(self, conn: Connection, ids: set[uuid.UUID]) -> set[uuid.UUID]:
        """Reserve the business keys of jobs given hot rows again; those whose key another live
        job holds now get their hot rows undone, and are returned."""
        keyed = set(
            conn.execute(
                sa.select(job.c.job_id).where(
                    job.c.job_id.in_(list(ids)), job.c.business_key.is_not(None)
                )
            ).scalars()
        )
        if not keyed:
            return set()
        took = set(
            conn.execute(
                self.dialect.insert_ignoring(business_key, "business_key")
                .from_select(
                    ["business_key", "job_id", "reserved_at"],
                    sa.select(job.c.business_key, job.c.job_id, self.dialect.now_sql()).where(
                        job.c.job_id.in_(list(keyed))
                    ),
                )
                .returning(business_key.c.job_id)
            ).scalars()
        )
        lost = keyed - took
        if lost:
            conn.execute(sa.delete(job_queue).where(job_queue.c.job_id.in_(list(lost))))
        return lost

    def _recreate_hot_rows(
        self,
        conn: Connection,
        ids: Sequence[uuid.UUID],
        from_terminal: Collection[JobStatus],
        to: JobStatus,
    ) -> set[uuid.UUID]:
        """Insert hot rows for the terminal jobs among ``ids`` whose cold status is in
        ``from_terminal``; the ids given one.

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
            job.c.job_id.in_(ids),
            by_id_only(job.c.terminal_status).in_(sorted(from_terminal)),
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
        return set(conn.execute(stmt).scalars())

    def delete_ended(self, conn: Connection, job_id: uuid.UUID) -> bool:
        """Delete a SUCCEEDED, FAILED or CANCELED job and everything that belongs to it."""
        return bool(self.delete_ended_many(conn, [job_id]))

    def delete_ended_many(self, conn: Connection, ids: Sequence[uuid.UUID]) -> list[uuid.UUID]:
        """Delete the SUCCEEDED, FAILED and CANCELED jobs among ``ids`` and everything that
        belongs to them; the ids deleted.

        The guard is the cold row's terminal status and the absence of a hot row (a paused FAILED
        job has one again): a job that is live, or was retried a moment ago, is left alone.
        Children are deleted explicitly because SQLite does not enforce the foreign keys'
        ``ON DELETE CASCADE`` unless the connection asks for it.

        Three statements, in this order, because of concurrent pauses and retries on PostgreSQL:
        the cold rows are locked first (``FOR UPDATE``, which also conflicts with the key-share
        lock a new hot row's foreign key takes), so a pause or retry that already inserted a hot
        row has committed before the hot-row check runs, and one that comes later waits for this
        delete and then finds no job. The check is a statement of its own so that, under READ
        COMMITTED, it sees what committed while the lock was awaited. SQLite's ``BEGIN
        IMMEDIATE`` already serialises writers (SQLAlchemy renders no ``FOR UPDATE`` there).
        """
        locked = set(
            conn.execute(
                sa.select(job.c.job_id)
                .where(job.c.job_id.in_(ids), by_id_only(job.c.terminal_status).in_(TERMINAL))
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
            return []
        gone = sorted(locked)
        conn.execute(sa.delete(job).where(job.c.job_id.in_(gone)))
        for table in (execution, job_log, dlq_alert, job_tag, business_key):
            conn.execute(sa.delete(table).where(table.c.job_id.in_(gone)))
        return gone

    def result_of(self, conn: Connection, job_id: uuid.UUID, keyring: Keyring) -> Any:
        """A job's result (decoded JSON, opened with ``keyring`` if it is sealed), or None if
        it has none or there is no such job.

        :raises UnreadableJob: if the stored result is not JSON, or does not open.
        """
        text = conn.execute(sa.select(job.c.result).where(job.c.job_id == job_id)).scalar()
        if text is not None and is_sealed(text):
            text = keyring.open(text, job_id, "result")
        return payload.decode_stored("result", text)

    def mark_superseded(self, conn: Connection, job_id: uuid.UUID, by: uuid.UUID) -> None:
        conn.execute(sa.update(job).where(job.c.job_id == job_id).values(superseded_by=by))

    # -- reads (see .job_reads) ---------------------------------------------------------------

    def get_job(self, conn: Connection, job_id: uuid.UUID) -> Job | None:
        """A snapshot of one job, or ``None``."""
        return job_reads.get_job(conn, job_id)

    def get_jobs(self, conn: Connection, ids: list[uuid.UUID]) -> list[Job]:
        """Snapshots of the jobs ``ids`` names that exist, in id order."""
        return job_reads.get_jobs(conn, ids)

    def find_jobs(
        self, conn: Connection, where: JobFilter, limit: int, cursor: str | None
    ) -> Page[Job]:
        """Jobs matching ``where``, newest first, a page at a time."""
        return job_reads.find_jobs(conn, where, limit, cursor)
