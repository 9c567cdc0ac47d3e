"""Writing new jobs in SQLAlchemy Core: the shared SQL every dialect can run, and the pieces a
dialect's own faster SQL reuses (matching idempotency keys, taking a submission back out).

A submission is all or nothing from the caller's point of view: if a business key is held, the
rows this call wrote are deleted again before :class:`~flask_ratchet.errors.DuplicateBusinessKey`
is raised, so the caller's transaction is as it was.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..errors import DuplicateBusinessKey
from ..schema import IDEMPOTENCY_WHERE, business_key, job, job_queue, job_tag
from ..states import JobStatus
from .dialect import Dialect, chunks
from .driver import driver_statement
from .types import Inserted, NewJob


class Submission:
    """The shared SQL of :meth:`~flask_ratchet.store.jobs.Jobs.insert_jobs`: a multi-row
    INSERT per table and chunk, or one row on the driver's cursor."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect

    @functools.cached_property
    def _job_insert(self) -> sa.Insert:
        times = self.dialect.insert_times()
        stmt: sa.Insert = (
            self.dialect.insert_ignoring(job, "idempotency_key", IDEMPOTENCY_WHERE)
            .values(created_at=times["created"], first_due_at=times["due"])
            .returning(job.c.job_id)
        )
        return stmt

    @functools.cached_property
    def _queue_insert(self) -> sa.Insert:
        times = self.dialect.insert_times()
        return sa.insert(job_queue).values(scheduled_time=times["due"], updated_at=times["created"])

    def insert(self, conn: Connection, jobs: Sequence[NewJob]) -> list[Inserted]:
        """Insert jobs, their queue rows, tags and key reservations."""
        refuse_repeated_business_keys(jobs)
        now = datetime.now(UTC)
        time_params = self.dialect.time_params
        inserted: set[uuid.UUID] = set()
        for part in chunks(jobs):
            rows = [_job_row(new, now) | time_params(new, now) for new in part]
            if len(rows) == 1:  # one job, the common case: no executemany (see _insert_one)
                if _insert_one(conn, self._job_insert, rows[0]):
                    inserted.add(part[0].job_id)
            else:
                inserted.update(conn.execute(self._job_insert, rows).scalars())

        outcome = match_duplicates(conn, jobs, inserted)
        fresh = [new for new in jobs if new.job_id in inserted]
        self._reserve_business_keys(conn, fresh, inserted)
        for part in chunks(fresh):
            rows = [_queue_row(new) | time_params(new, now) for new in part]
            if len(rows) == 1:
                _insert_one(conn, self._queue_insert, rows[0])
            else:
                conn.execute(self._queue_insert, rows)
        tags = [{"job_id": new.job_id, "tag": t} for new in fresh for t in new.options.tags]
        for part in chunks(tags):
            conn.execute(sa.insert(job_tag), list(part))
        return outcome

    def _reserve_business_keys(
        self, conn: Connection, fresh: Sequence[NewJob], inserted: set[uuid.UUID]
    ) -> None:
        wanted = [new for new in fresh if new.business_key is not None]
        if not wanted:
            return
        stmt = (
            self.dialect.insert_ignoring(business_key, "business_key")
            .values(reserved_at=self.dialect.now_sql())
            .returning(business_key.c.job_id)
        )
        reserved: set[uuid.UUID] = set()
        for part in chunks(wanted):
            rows = [{"business_key": new.business_key, "job_id": new.job_id} for new in part]
            reserved.update(conn.execute(stmt, rows).scalars())
        refused = [new.business_key for new in wanted if new.job_id not in reserved]
        if refused:
            # Undo this call's rows (never anything else) so the caller's transaction is as before.
            delete_jobs(conn, list(inserted))
            raise DuplicateBusinessKey(str(refused[0]))


def match_duplicates(
    conn: Connection, jobs: Sequence[NewJob], inserted: set[uuid.UUID]
) -> list[Inserted]:
    """Map each job whose idempotency key already existed to the original job's id."""
    missing = [new.idempotency_key for new in jobs if new.job_id not in inserted]
    original: dict[str | None, uuid.UUID] = {}
    if missing:
        found = conn.execute(
            sa.select(job.c.idempotency_key, job.c.job_id).where(job.c.idempotency_key.in_(missing))
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


def delete_jobs(conn: Connection, ids: list[uuid.UUID]) -> None:
    """Delete jobs a submission inserted, with every row that belongs to them."""
    for part in chunks(ids):
        for table in (business_key, job_tag, job_queue, job):
            conn.execute(sa.delete(table).where(table.c.job_id.in_(part)))


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
        "queue": o.queue,
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
        "trace_context": new.trace_context,
        "principal": new.principal,
    }


def _insert_one(conn: Connection, stmt: sa.Insert, row: dict[str, Any]) -> list[Any]:
    """Insert one row on the driver's cursor (:mod:`.driver`): most of the cost of submitting
    one job is otherwise SQLAlchemy's per-call work. Returns the rows RETURNING gave (raw)."""
    return driver_statement(stmt, conn.dialect, list(row)).execute(conn, row)


def _job_row(new: NewJob, now: datetime) -> dict[str, Any]:
    return job_values(new) | {
        "superseded_by": None,
        "attempts": 0,
        "expires_at": new.deadline(now),
    }


def _queue_row(new: NewJob) -> dict[str, Any]:
    return {
        "job_id": new.job_id,
        "status": JobStatus.PENDING,
        "queue": new.options.queue,
        "priority": int(new.options.priority),
        "attempts": 0,
        "max_retries": new.options.max_retries,
        "version": 0,
    }
