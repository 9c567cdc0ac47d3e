"""PostgreSQL: many plain jobs written with ``COPY`` (the bulk path of ``enqueue_many``).

``COPY … FROM STDIN`` in binary streams rows without parsing a statement per row or a JSON
document, and psycopg adapts each row in C: for a bulk submission it costs about half of the
``json_to_recordset`` statement. It has no ``ON CONFLICT`` and returns nothing, so it only takes
jobs that cannot conflict: without an idempotency key or a business key (the caller checks
:func:`copyable`). Such a job is always created; every other submission takes the statement.

The rows are the same as the statement's: the cold row, the hot row, the tags, with the
transaction's ``now()`` as the creation time and the due time counted from it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Connection

from .. import tracing
from ..states import JobStatus
from .driver import translated_errors
from .submission import job_values
from .types import Inserted, NewJob

if TYPE_CHECKING:  # psycopg is the postgresql extra: an app on SQLite need not have it
    import psycopg

#: The ``ratchet_job`` columns a submission writes (:func:`~.submission.job_values`'s), with their
#: PostgreSQL types: the statements of :mod:`.postgres` and the COPY here both take them from it.
SUBMITTED_COLUMNS = (
    ("job_id", "uuid"), ("task", "text"), ("queue", "text"), ("job_type", "text"),
    ("priority", "int2"),
    ("payload", "text"), ("params", "text"), ("max_retries", "int4"), ("backoff", "text"),
    ("backoff_base", "float8"), ("timeout", "float8"), ("resource_name", "text"),
    ("idempotency_key", "text"), ("business_key", "text"), ("depends_on", "uuid"),
    ("recurring_id", "text"), ("fire_time", "timestamptz"), ("batch_id", "uuid"),
    ("follow_up", "bool"), ("callbacks", "text"), ("trace_context", "text"),
    ("principal", "text"),
)  # fmt: skip
_JOB = (
    f"COPY ratchet_job ({', '.join(c for c, _ in SUBMITTED_COLUMNS)}, created_at, first_due_at, "
    "expires_at, attempts) FROM STDIN (FORMAT BINARY)"
)
_QUEUE = """COPY ratchet_job_queue (job_id, status, queue, scheduled_time, priority, attempts,
    max_retries, version, updated_at) FROM STDIN (FORMAT BINARY)"""
_TAG = "COPY ratchet_job_tag (job_id, tag) FROM STDIN (FORMAT BINARY)"
# Binary rows carry no type names: each column's type, in order (``text`` also fits varchar).
_JOB_TYPES = [t for _, t in SUBMITTED_COLUMNS] + ["timestamptz"] * 3 + ["int4"]
_QUEUE_TYPES = [
    "uuid", "text", "text", "timestamptz", "int2", "int4", "int4", "int4", "timestamptz",
]  # fmt: skip
_TAG_TYPES = ["uuid", "text"]
_PENDING = JobStatus.PENDING.value
_NOW = "SELECT now()"


def copyable(jobs: Sequence[NewJob]) -> bool:
    """Whether ``jobs`` can take the COPY path: several, and none with a key that may conflict."""
    return len(jobs) > 1 and not any(new.idempotency_key or new.business_key for new in jobs)


def copy_jobs(conn: Connection, jobs: Sequence[NewJob]) -> list[Inserted]:
    """Write ``jobs`` (see :func:`copyable`) in ``conn``'s transaction, or in one of their own
    if ``conn`` is in autocommit: all of them or none."""
    with _transaction(conn) as raw, raw.cursor() as cur:
        # On psycopg's own connection, past SQLAlchemy's engine events: traced here, like the
        # driver's statements (see .driver).
        with tracing.statement("postgresql", _NOW):
            row = cur.execute(_NOW).fetchone()
        assert row is not None
        # In UTC: psycopg gives the session's zone, where adding a delay would count wall-clock
        # time across a daylight-saving change (the statement's now() + interval does not).
        now: datetime = row[0].astimezone(UTC)
        dues = [new.due(now) for new in jobs]
        # Errors as SQLAlchemy's (a refused row is an IntegrityError, as from the statement).
        with (
            translated_errors(conn, _JOB, None),
            tracing.statement("postgresql", _JOB),
            cur.copy(_JOB) as copy,
        ):
            copy.set_types(_JOB_TYPES)
            for new, due in zip(jobs, dues, strict=True):
                copy.write_row(_job_row(new, now, due))
        with (
            translated_errors(conn, _QUEUE, None),
            tracing.statement("postgresql", _QUEUE),
            cur.copy(_QUEUE) as copy,
        ):
            copy.set_types(_QUEUE_TYPES)
            for new, due in zip(jobs, dues, strict=True):
                o = new.options
                copy.write_row(
                    (new.job_id, _PENDING, o.queue, due, int(o.priority), 0, o.max_retries, 0, now)
                )
        if any(new.options.tags for new in jobs):
            with (
                translated_errors(conn, _TAG, None),
                tracing.statement("postgresql", _TAG),
                cur.copy(_TAG) as copy,
            ):
                copy.set_types(_TAG_TYPES)
                for new in jobs:
                    for tag in new.options.tags:
                        copy.write_row((new.job_id, tag))
    return [Inserted(new.job_id, True) for new in jobs]


@contextmanager
def _transaction(conn: Connection) -> Iterator[psycopg.Connection[Any]]:
    """The driver connection under ``conn``, inside a transaction.

    A connection in a transaction is used as it is (the caller commits or rolls back; one not
    yet begun is begun, as ``conn.execute`` would); one in autocommit gets a block of its own,
    since the COPYs must be atomic together.
    """
    import psycopg

    raw = conn.connection.driver_connection
    assert isinstance(raw, psycopg.Connection)
    if not raw.autocommit:
        if not conn.in_transaction():
            conn.begin()
        yield raw
        return
    with translated_errors(conn, "BEGIN", None), raw.transaction():
        yield raw


def _job_row(new: NewJob, now: datetime, due: datetime) -> tuple[Any, ...]:
    values = job_values(new)  # the keys are NULL here: see copyable()
    return (*(values[c] for c, _ in SUBMITTED_COLUMNS), now, due, new.deadline(now), 0)
