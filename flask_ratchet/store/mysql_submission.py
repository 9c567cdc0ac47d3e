"""MariaDB: writing new jobs.

``ratchet_job`` has three unique keys (the id, the idempotency key, a recurring master's
occurrence), and MariaDB's ``INSERT IGNORE`` would skip a row that conflicts on any of them,
silently. So the idempotency keys a submission carries are looked up first, only the jobs
whose key is new are written, with plain multi-row ``INSERT``\\s, and any other conflict is an
error, as on PostgreSQL. Two submissions of one new key at the same moment: the later one's
insert fails on the key, and it looks again, once.

Times are the server's: its ``UTC_TIMESTAMP(6)``, read once per submission, gives each job its
creation and due times, bound as values (a row of bound values only, so that the driver sends
many rows as one statement).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from contextlib import nullcontext
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..errors import DuplicateBusinessKey
from ..schema import IDEMPOTENCY_INDEX, business_key, job, job_queue, job_tag
from ..states import JobStatus
from .dialect import Dialect, chunks
from .driver import driver_statement
from .submission import job_values, refuse_repeated_business_keys
from .types import Inserted, NewJob


def insert_jobs(dialect: Dialect, conn: Connection, jobs: Sequence[NewJob]) -> list[Inserted]:
    """Insert jobs, their queue rows, tags and key reservations; return each job's id, or the
    id its idempotency key matched.

    :raises DuplicateBusinessKey: if a business key is held; nothing is written.
    """
    refuse_repeated_business_keys(jobs)
    for last_try in (False, True):
        originals = _originals(conn, jobs)
        fresh = _fresh(jobs, originals)
        try:
            # A refused key must leave nothing of this call behind, and the transaction usable.
            keyed = originals is not None or any(new.business_key for new in fresh)
            with dialect.savepoint(conn) if keyed else nullcontext():
                _write(dialect, conn, fresh)
            break
        except sa.exc.IntegrityError as exc:
            if last_try or IDEMPOTENCY_INDEX not in str(exc.orig):
                raise
    written = {new.job_id for new in fresh}
    return [
        Inserted(new.job_id, True)
        if new.job_id in written
        else Inserted(_original(new, originals, fresh), False)
        for new in jobs
    ]


def _originals(conn: Connection, jobs: Sequence[NewJob]) -> dict[str, uuid.UUID] | None:
    """The jobs that hold the idempotency keys of ``jobs`` already; ``None`` if none has one."""
    keys = sorted({new.idempotency_key for new in jobs if new.idempotency_key is not None})
    if not keys:
        return None
    found: dict[str, uuid.UUID] = {}
    for part in chunks(keys):
        stmt = sa.select(job.c.idempotency_key, job.c.job_id).where(job.c.idempotency_key.in_(part))
        found.update({key: job_id for key, job_id in conn.execute(stmt)})
    return found


def _fresh(jobs: Sequence[NewJob], originals: dict[str, uuid.UUID] | None) -> list[NewJob]:
    """The jobs to write: those whose idempotency key is new, the first of each key only."""
    if originals is None:
        return list(jobs)
    seen: set[str] = set()
    fresh = []
    for new in jobs:
        key = new.idempotency_key
        if key is not None and (key in originals or key in seen):
            continue
        if key is not None:
            seen.add(key)
        fresh.append(new)
    return fresh


def _original(
    new: NewJob, originals: dict[str, uuid.UUID] | None, fresh: list[NewJob]
) -> uuid.UUID:
    key = new.idempotency_key
    assert key is not None and originals is not None
    if key in originals:
        return originals[key]
    return next(f.job_id for f in fresh if f.idempotency_key == key)


def _write(dialect: Dialect, conn: Connection, fresh: Sequence[NewJob]) -> None:
    if not fresh:
        return
    now = dialect.now(conn)
    jobs, queue_rows, tags, keys = [], [], [], []
    for new in fresh:
        due = new.run_at if new.run_at is not None else now + timedelta(seconds=new.delay)
        jobs.append(
            job_values(new)
            | {
                "superseded_by": None,
                "attempts": 0,
                "created_at": now,
                "first_due_at": due,
                "expires_at": new.deadline(now),
            }
        )
        queue_rows.append(
            {
                "job_id": new.job_id,
                "status": JobStatus.PENDING.value,
                "queue": new.options.queue,
                "scheduled_time": due,
                "priority": int(new.options.priority),
                "attempts": 0,
                "max_retries": new.options.max_retries,
                "version": 0,
                "updated_at": now,
            }
        )
        tags += [{"job_id": new.job_id, "tag": tag} for tag in new.options.tags]
        if new.business_key is not None:
            keys.append(
                {"business_key": new.business_key, "job_id": new.job_id, "reserved_at": now}
            )
    for table, rows in ((job, jobs), (job_queue, queue_rows), (job_tag, tags)):
        _insert(conn, table, rows)
    try:
        _insert(conn, business_key, keys)
    except sa.exc.IntegrityError:
        raise DuplicateBusinessKey(_held_key(conn, fresh)) from None


def _insert(conn: Connection, table: sa.Table, rows: list[dict[str, Any]]) -> None:
    """One row on the driver's cursor (one job's submission is a per-job hot path, see
    :mod:`.driver`); many as multi-row INSERTs (the driver sends a chunk as one statement)."""
    if len(rows) == 1:
        (row,) = rows
        driver_statement(_INSERTS[table.name], conn.dialect, list(row)).execute(conn, row)
        return
    for part in chunks(rows):
        conn.execute(_INSERTS[table.name], list(part))


_INSERTS = {table.name: sa.insert(table) for table in (job, job_queue, job_tag, business_key)}


def _held_key(conn: Connection, jobs: Sequence[NewJob]) -> str:
    keys = [new.business_key for new in jobs if new.business_key]
    held = conn.execute(
        sa.select(business_key.c.business_key).where(business_key.c.business_key.in_(keys))
    ).scalar()
    return str(held or keys[0])
