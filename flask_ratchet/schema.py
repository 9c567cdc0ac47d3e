"""The ``ratchet_*`` tables, as SQLAlchemy Core on a private ``MetaData``.

Never attached to the host app's ``db.Model``: the host's own migrations never see these tables, and
ours (``migrations/``, version table ``ratchet_alembic_version``) never see the host's.

Jobs are split as the seeds describe: ``ratchet_job`` is the cold row (what the job is, how it
ended) and ``ratchet_job_queue`` the hot row, which exists only while the job is live (PENDING,
RUNNING, PAUSED) and carries everything the claim needs, so the claim touches one small table.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.functions import FunctionElement

from .options import DEFAULT_QUEUE, QUEUE_MAX_LENGTH, Priority
from .states import JobStatus

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
metadata = sa.MetaData(naming_convention=NAMING)

VERSION_TABLE = "ratchet_alembic_version"


#: What a stored time outside Python's range reads as: PostgreSQL holds years from 4713 BC to
#: 294276 and ``infinity``, SQLite any text. The earliest is a day inside Python's range, so it
#: is a ``datetime`` in any session time zone psycopg converts it to; the latest is the last
#: second of 9999, at or after :data:`flask_ratchet.flows.NOT_YET` (a step's due time), which
#: must read back as it was written.
EARLIEST = datetime(1, 1, 2, tzinfo=UTC)
LATEST = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)


class Representable(FunctionElement[datetime]):
    """A stored time, held within ``EARLIEST``..``LATEST`` as it is read (PostgreSQL): psycopg
    cannot load a time outside Python's range, and one such row would fail every read of it."""

    name = "representable"
    inherit_cache = True

    def __init__(self, time: ColumnElement[datetime]) -> None:
        super().__init__(time)
        self.type = time.type


@compiles(Representable)
def _representable_as_is(element: Representable, compiler: SQLCompiler, **kw: Any) -> str:
    return str(compiler.process(element.clauses, **kw))  # SQLite: see process_result_value


@compiles(Representable, "postgresql")
def _representable_postgresql(element: Representable, compiler: SQLCompiler, **kw: Any) -> str:
    inner = compiler.process(element.clauses, **kw)
    earliest, latest = (
        f"TIMESTAMPTZ '{EARLIEST.isoformat()}'",
        f"TIMESTAMPTZ '{LATEST.isoformat()}'",
    )
    # Not GREATEST/LEAST: they skip NULLs, and NULL must stay NULL.
    return (
        f"CASE WHEN {inner} < {earliest} THEN {earliest} "
        f"WHEN {inner} > {latest} THEN {latest} ELSE {inner} END"
    )


class UtcDateTime(sa.TypeDecorator[datetime]):
    """A timestamp that is always an aware UTC ``datetime`` in Python.

    PostgreSQL stores ``timestamptz``; SQLite stores naive UTC text, which sorts in time order.
    Every stored value is read as a ``datetime``: one Python cannot hold, or text SQLite holds
    that is not a time, reads as ``EARLIEST`` or ``LATEST`` (a row written by hand must not make
    every page that lists it fail).
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def column_expression(self, colexpr: ColumnElement[Any]) -> ColumnElement[datetime]:
        return Representable(colexpr)

    def result_processor(
        self, dialect: Dialect, coltype: object
    ) -> Callable[[Any], datetime | None] | None:
        process = super().result_processor(dialect, coltype)
        if process is None or dialect.name != "sqlite":
            return process
        parse = process

        def tolerant(value: Any) -> datetime | None:
            try:
                return parse(value)
            except (ValueError, TypeError, OverflowError):
                return _nearest_end(value)

        return tolerant

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: pass an aware datetime (e.g. tzinfo=UTC)")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, str):  # raw SQLite text from an untyped expression
            value = datetime.fromisoformat(value)
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)  # type: ignore[no-any-return]
        return value.astimezone(UTC)  # type: ignore[no-any-return]


def _nearest_end(text: Any) -> datetime:
    """The end of Python's range nearest to a stored time it cannot hold: years past 9999 (more
    than four digits) are late, anything else (a year 0, a negative year, not a time) early."""
    year = str(text).split("-", 1)[0]
    return LATEST if year.isdigit() and len(year) > 4 else EARLIEST


#: What an id column reads as when SQLite holds text there that is not a UUID (written by hand):
#: the nil UUID, which ratchet never writes (its ids are UUIDv7).
UNREADABLE_ID = uuid.UUID(int=0)


class StoredUuid(sa.TypeDecorator[uuid.UUID]):
    """A UUID column read defensively. PostgreSQL's ``uuid`` type holds nothing else; SQLite
    stores text, and a value there that is not a UUID reads as :data:`UNREADABLE_ID` instead of
    failing every query that reads the row (a claim, a page, retention)."""

    impl = sa.Uuid()
    cache_ok = True

    def result_processor(
        self, dialect: Dialect, coltype: object
    ) -> Callable[[Any], uuid.UUID | None] | None:
        process = super().result_processor(dialect, coltype)
        if process is None or dialect.supports_native_uuid:
            return process
        parse = process

        def tolerant(value: Any) -> uuid.UUID | None:
            try:
                return parse(value)
            except (ValueError, TypeError, AttributeError):
                return UNREADABLE_ID

        return tolerant


def _id(name: str = "job_id", **kw: Any) -> sa.Column[Any]:
    return sa.Column(name, StoredUuid(), **kw)


def _job_fk(**kw: Any) -> sa.Column[Any]:
    return sa.Column(
        "job_id", StoredUuid(), sa.ForeignKey("ratchet_job.job_id", ondelete="CASCADE"), **kw
    )


def _index_where(name: str | None, *columns: str, where: str) -> sa.Index:
    """An index of only the rows where the SQL condition ``where`` holds, on both databases."""
    predicate = sa.text(where)
    return sa.Index(name, *columns, postgresql_where=predicate, sqlite_where=predicate)


def _partial_index(*columns: str, where: str) -> sa.Index:
    """An index of the rows whose ``where`` column is not NULL."""
    return _index_where(None, *columns, where=f"{where} IS NOT NULL")


STATUS = sa.String(16)
KEY = sa.String(255)
QUEUE = sa.String(QUEUE_MAX_LENGTH)


def _queue_column() -> sa.Column[Any]:
    # A server default so that adding the column to a table of existing jobs is a change of the
    # catalogue on PostgreSQL, not a rewrite of every row (see migrations/versions/0007).
    return sa.Column("queue", QUEUE, nullable=False, server_default=DEFAULT_QUEUE)


job = sa.Table(
    "ratchet_job",
    metadata,
    _id(primary_key=True),
    sa.Column("task", sa.String(255), nullable=False),
    _queue_column(),
    sa.Column("job_type", sa.String(16), nullable=False),  # see flask_ratchet.flows.JobType
    sa.Column("priority", sa.SmallInteger, nullable=False),
    sa.Column("payload", sa.Text, nullable=False),  # JSON {"args": [...], "kwargs": {...}}
    sa.Column("params", sa.Text),  # JSON object
    sa.Column("max_retries", sa.Integer, nullable=False),
    sa.Column("backoff", sa.String(16), nullable=False),
    sa.Column("backoff_base", sa.Float, nullable=False),
    sa.Column("timeout", sa.Float),
    sa.Column("resource_name", sa.String(100)),
    sa.Column("idempotency_key", KEY, unique=True),
    sa.Column("business_key", KEY),
    _id("depends_on"),
    _id("superseded_by"),
    sa.Column("recurring_id", KEY),
    sa.Column("fire_time", UtcDateTime),
    sa.Column("created_at", UtcDateTime, nullable=False, index=True),
    sa.Column("first_due_at", UtcDateTime, nullable=False),
    # Survivors of the hot row, written at the terminal transition.
    sa.Column("terminal_status", STATUS),
    sa.Column("terminal_error", sa.Text),
    sa.Column("result", sa.Text),  # JSON
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("finished_at", UtcDateTime),
    sa.Column("progress", sa.Text),  # JSON {"done", "total", "message"}, the last reported
    # The batch a child belongs to (its parent job's id).
    _id("batch_id"),
    # Whether the job's end sets off more work (a batch to count, dependent steps or branches
    # to release or cancel, callbacks): only such jobs pay for looking, see store/flows.py.
    sa.Column("follow_up", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("callbacks", sa.Text),  # JSON {"success": [task, ...], "failure": [...]}
    # The submission's trace context (JSON: traceparent, …) while tracing is on; see tracing.py.
    sa.Column("trace_context", sa.Text),
    sa.UniqueConstraint("recurring_id", "fire_time"),  # a recurring master fires once per time
    sa.Index(None, "task", "job_id"),
    # Partial where most rows hold NULL: a job is written (and ended) without an entry in
    # an index that would never find it, which spares the submission and completion paths.
    _partial_index("business_key", where="business_key"),
    _partial_index("depends_on", where="depends_on"),
    _partial_index("batch_id", "job_id", where="batch_id"),
    _partial_index("superseded_by", where="superseded_by"),
    _partial_index("terminal_status", "finished_at", where="terminal_status"),
    # A recurring master's children, newest first (the console's list of them).
    _partial_index("recurring_id", "job_id", where="recurring_id"),
    # The failed jobs of one task, newest first: what "retry all" on a task filter counts and
    # takes. Only failed jobs are written to it.
    _index_where(
        "ix_ratchet_job_failed_task_job_id",
        "task",
        "job_id",
        where=f"terminal_status = '{JobStatus.FAILED}'",
    ),
    # The console's filters and sorts, each walked newest first (see store/console_queries.py).
    _partial_index("terminal_status", "job_id", where="terminal_status"),
    # Jobs of one queue, newest first. Only queues other than the default: a default job is
    # written without an entry here (the list walks the primary key for it), and an existing
    # table gains the index without an entry per row.
    _index_where(
        "ix_ratchet_job_named_queue", "queue", "job_id", where=f"queue <> '{DEFAULT_QUEUE}'"
    ),
    # A queue's dead letters, newest first (written only when a job fails for good).
    _index_where(
        "ix_ratchet_job_failed_queue",
        "queue",
        "job_id",
        where=f"terminal_status = '{JobStatus.FAILED}'",
    ),
    # Only jobs of a priority other than NORMAL, the default: a default job is written without
    # paying for an entry here, and the console finds NORMAL jobs on the primary key.
    _index_where(None, "priority", "job_id", where=f"priority <> {int(Priority.NORMAL)}"),
)

job_queue = sa.Table(
    "ratchet_job_queue",
    metadata,
    _job_fk(primary_key=True),
    sa.Column("status", STATUS, nullable=False),
    _queue_column(),  # copied from the cold row for the claim
    sa.Column("scheduled_time", UtcDateTime, nullable=False),
    sa.Column(
        "priority", sa.SmallInteger, nullable=False
    ),  # copied from the cold row for the claim
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("max_retries", sa.Integer, nullable=False),
    sa.Column("picked_by", sa.String(64)),
    sa.Column("picked_at", UtcDateTime),
    sa.Column("paused_from_status", STATUS),
    sa.Column("last_error", sa.Text),
    sa.Column("progress", sa.Text),  # JSON, while the job runs
    # Workers that handed the job back not knowing its task: see flask_ratchet/refusals.py.
    sa.Column("refused_since", UtcDateTime),
    sa.Column("refused_by", sa.Text),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("updated_at", UtcDateTime, nullable=False),
    # The claim reads one index per priority level, in due order: see store/postgres.py.
    _index_where(
        "ix_ratchet_job_queue_claim",
        "priority",
        "scheduled_time",
        "job_id",
        where=f"status = '{JobStatus.PENDING}'",
    ),
    # The claim of a worker that names its queues: the same, one queue at a time, so that a
    # backlog in other queues costs it nothing.
    _index_where(
        "ix_ratchet_job_queue_queue_claim",
        "queue",
        "priority",
        "scheduled_time",
        "job_id",
        where=f"status = '{JobStatus.PENDING}'",
    ),
    sa.Index(None, "status", "picked_at", "picked_by"),
    # The console's PENDING list, newest first. Partial: every index here is written on each
    # claim and completion, and only PENDING is large; RUNNING and PAUSED rows are few and the
    # index above reaches them (as it does the node filter: only RUNNING rows have a picked_by).
    _index_where("ix_ratchet_job_queue_pending", "job_id", where=f"status = '{JobStatus.PENDING}'"),
)

#: Queues an operator paused (a row per queue that was ever paused or resumed): no worker claims
#: from a paused queue. A queue exists by its jobs' naming it; this table only holds its state.
queue_state = sa.Table(
    "ratchet_queue",
    metadata,
    sa.Column("name", QUEUE, primary_key=True),
    sa.Column("paused", sa.Boolean, nullable=False),
    sa.Column("changed_at", UtcDateTime, nullable=False),
    sa.Column("changed_by", sa.String(255)),
)

business_key = sa.Table(
    "ratchet_business_key",
    metadata,
    sa.Column("business_key", KEY, primary_key=True),
    _job_fk(nullable=False, index=True),
    sa.Column("reserved_at", UtcDateTime, nullable=False),
)

job_tag = sa.Table(
    "ratchet_job_tag",
    metadata,
    _job_fk(primary_key=True),
    sa.Column("tag", sa.String(100), primary_key=True),
    sa.Index(None, "tag", "job_id"),
)

execution = sa.Table(
    "ratchet_execution",
    metadata,
    _id("execution_id", primary_key=True),
    _job_fk(nullable=False, index=True),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("node_id", sa.String(64), nullable=False),
    sa.Column("status", STATUS, nullable=False),
    sa.Column("started_at", UtcDateTime, nullable=False, index=True),
    sa.Column("finished_at", UtcDateTime),
    sa.Column("duration_ms", sa.Float),
    sa.Column("queue_wait_ms", sa.Float),
    sa.Column("error", sa.Text),
    sa.Column("traceback", sa.Text),
    # The overview's chart counts a bar's runs on the started_at index alone, and its failed
    # runs here (rows are written once, when a run ends: a success never touches this index).
    _index_where(
        "ix_ratchet_execution_failed_started_at",
        "started_at",
        "status",  # always FAILED, but SQLite counts from an index that holds every column named
        where=f"status = '{JobStatus.FAILED}'",
    ),
)

job_log = sa.Table(
    "ratchet_job_log",
    metadata,
    sa.Column(
        "log_id",
        sa.BigInteger().with_variant(sa.Integer, "sqlite"),
        primary_key=True,
        autoincrement=True,
    ),
    _job_fk(nullable=False, index=True),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("logged_at", UtcDateTime, nullable=False, index=True),
    sa.Column("level", sa.String(16), nullable=False),
    sa.Column("message", sa.Text, nullable=False),
)

node = sa.Table(
    "ratchet_node",
    metadata,
    sa.Column("node_id", sa.String(64), primary_key=True),
    sa.Column("host", sa.String(255), nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("version", sa.String(32), nullable=False),
    sa.Column("concurrency", sa.Integer, nullable=False),
    sa.Column("started_at", UtcDateTime, nullable=False),
    sa.Column("last_heartbeat", UtcDateTime, nullable=False, index=True),
    sa.Column("info", sa.Text),  # JSON
)

lock = sa.Table(
    "ratchet_lock",
    metadata,
    sa.Column("lock_name", sa.String(100), primary_key=True),
    sa.Column("locked_by", sa.String(64), nullable=False),
    sa.Column("locked_at", UtcDateTime, nullable=False),
    sa.Column("expires_at", UtcDateTime, nullable=False),
)

dlq_alert = sa.Table(
    "ratchet_dlq_alert",
    metadata,
    _id("alert_id", primary_key=True),
    _job_fk(nullable=False),
    sa.Column("task", sa.String(255), nullable=False),
    sa.Column("error_hash", sa.String(64), nullable=False),
    sa.Column("error", sa.Text, nullable=False),
    sa.Column("hour", UtcDateTime, nullable=False),  # the hour it dedupes within
    sa.Column("occurrences", sa.Integer, nullable=False),
    sa.Column("created_at", UtcDateTime, nullable=False, index=True),
    sa.Column("last_seen_at", UtcDateTime, nullable=False),
    sa.UniqueConstraint("job_id", "error_hash", "hour"),
)

recurring = sa.Table(
    "ratchet_recurring",
    metadata,
    sa.Column("recurring_id", KEY, primary_key=True),
    sa.Column("name", sa.String(255), nullable=False),
    sa.Column("task", sa.String(255), nullable=False),
    sa.Column("cron", sa.String(255), nullable=False),
    sa.Column("zone", sa.String(64), nullable=False),
    sa.Column("payload", sa.Text, nullable=False),
    sa.Column("options", sa.Text, nullable=False),  # JSON of the child jobs' options
    sa.Column("misfire", sa.String(32), nullable=False),
    sa.Column("status", STATUS, nullable=False),  # ACTIVE, PAUSED, CANCELED
    sa.Column("next_fire", UtcDateTime),
    sa.Column("last_fire", UtcDateTime),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.Column("updated_at", UtcDateTime, nullable=False),
    sa.Index(None, "status", "next_fire"),
)

batch = sa.Table(
    "ratchet_batch",
    metadata,
    # The parent job: it does no work of its own and ends when its last child has ended.
    sa.Column(
        "batch_id",
        StoredUuid(),
        sa.ForeignKey("ratchet_job.job_id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("name", sa.String(255), nullable=False),
    sa.Column("total", sa.Integer, nullable=False),
    sa.Column("succeeded", sa.Integer, nullable=False),
    sa.Column("failed", sa.Integer, nullable=False),  # failed or canceled children
    sa.Column("child_run_ms", sa.Float, nullable=False),  # the children's run time, summed
    sa.Column("child_wait_ms", sa.Float, nullable=False),  # their queue wait, summed
    sa.Column("progress_task", sa.String(255)),  # called as children end
    sa.Column("created_at", UtcDateTime, nullable=False, index=True),
    sa.Column("finished_at", UtcDateTime),  # set once, by the one transaction that finalises
)

workflow_condition = sa.Table(
    "ratchet_workflow_condition",
    metadata,
    # The dependent job (a chain step, a branch, a batch follow-up) and what it waits for.
    _job_fk(primary_key=True),
    sa.Column("parent_id", StoredUuid(), nullable=False, index=True),
    sa.Column("kind", sa.String(16), nullable=False),  # see flask_ratchet.flows.Condition
    sa.Column("predicate", sa.String(255)),  # a registered task, for WHEN
    sa.Column("threshold", sa.Float),  # for SUCCESS_RATE and FAILURE_COUNT
    sa.Column("decision", sa.String(16)),  # TRIGGERED, SKIPPED or ERROR once decided
    sa.Column("error", sa.Text),  # why routing failed (a predicate that raised)
    sa.Column("decided_at", UtcDateTime),
)

resource_limit = sa.Table(
    "ratchet_resource_limit",
    metadata,
    sa.Column("resource_name", sa.String(100), primary_key=True),
    sa.Column("max_concurrent", sa.Integer, nullable=False),
    sa.Column("retry_delay", sa.Float, nullable=False),
    sa.Column("updated_at", UtcDateTime, nullable=False),
)

resource_permit = sa.Table(
    "ratchet_resource_permit",
    metadata,
    sa.Column("job_id", StoredUuid(), primary_key=True),
    sa.Column("resource_name", sa.String(100), nullable=False, index=True),
    sa.Column("node_id", sa.String(64), nullable=False, index=True),
    sa.Column("acquired_at", UtcDateTime, nullable=False),
)

job_archive = sa.Table(
    "ratchet_job_archive",
    metadata,
    _id(primary_key=True),
    sa.Column("task", sa.String(255), nullable=False),
    sa.Column("terminal_status", STATUS, nullable=False),
    sa.Column("business_key", KEY),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.Column("finished_at", UtcDateTime),
    sa.Column("archived_at", UtcDateTime, nullable=False, index=True),
    sa.Column("data", sa.Text, nullable=False),  # JSON snapshot of the cold row
)

audit = sa.Table(
    "ratchet_audit",
    metadata,
    _id("audit_id", primary_key=True),
    sa.Column("at", UtcDateTime, nullable=False, index=True),
    sa.Column("actor", sa.String(255), nullable=False),
    sa.Column("role", sa.String(16), nullable=False),
    sa.Column("action", sa.String(32), nullable=False),  # retry, cancel, pause, resume, delete
    sa.Column("scope", sa.String(16), nullable=False),  # job, selected, filter
    sa.Column("target", sa.Text, nullable=False),  # a job id, or the filter, as JSON
    sa.Column("requested", sa.Integer, nullable=False),
    sa.Column("changed", sa.Integer, nullable=False),
)


def const(value: JobStatus | int) -> Any:
    """A status or priority written into the SQL text rather than bound.

    The partial indexes (``status = 'PENDING'``, ``priority <> 2``) are usable only where
    PostgreSQL can prove the predicate from the query text; a bound parameter would do only
    while the driver's statement is not yet prepared with a generic plan. Safe: the value is a
    member of an enum (or a validated priority level), never request text.
    """
    if isinstance(value, JobStatus):
        return sa.literal_column(f"'{value.value}'", sa.String)
    return sa.literal_column(str(int(value)), sa.SmallInteger)


def aware(value: Any) -> datetime:
    """A timestamp read back from the database (a string, or naive, on SQLite) in UTC."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    assert isinstance(value, datetime)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
