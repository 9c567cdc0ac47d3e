"""The ``ratchet_*`` tables, as SQLAlchemy Core on a private ``MetaData``.

Never attached to the host app's ``db.Model``: the host's own migrations never see these tables, and
ours (``migrations/``, version table ``ratchet_alembic_version``) never see the host's.

Jobs are split as the seeds describe: ``ratchet_job`` is the cold row (what the job is, how it
ended) and ``ratchet_job_queue`` the hot row, which exists only while the job is live (PENDING,
RUNNING, PAUSED) and carries everything the claim needs, so the claim touches one small table.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from .columns import DOUBLE, LONG_TEXT, StoredUuid, UtcDateTime
from .fingerprints import MAX_FINGERPRINT
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


def _id(name: str = "job_id", **kw: Any) -> sa.Column[Any]:
    return sa.Column(name, StoredUuid(), **kw)


def _job_fk(**kw: Any) -> sa.Column[Any]:
    return sa.Column(
        "job_id", StoredUuid(), sa.ForeignKey("ratchet_job.job_id", ondelete="CASCADE"), **kw
    )


def _index_where(name: str | None, *columns: str, where: str, unique: bool = False) -> sa.Index:
    """An index of only the rows where the SQL condition ``where`` holds (PostgreSQL, SQLite;
    on MariaDB and MySQL see :func:`flask_ratchet.schema_ddl.index_columns`)."""
    predicate = sa.text(where)
    return sa.Index(
        name,
        *columns,
        unique=unique,
        postgresql_where=predicate,
        sqlite_where=predicate,
        info={"where": where},
    )


def _partial_index(*columns: str, where: str) -> sa.Index:
    """An index of the rows whose ``where`` column is not NULL."""
    return _index_where(None, *columns, where=f"{where} IS NOT NULL")


#: The unique index of idempotency keys, and the rows it holds: an ``INSERT … ON CONFLICT`` on
#: it names both (a partial unique index is only inferred from a conflict target that says its
#: condition).
IDEMPOTENCY_INDEX = "uq_ratchet_job_idempotency_key"
IDEMPOTENCY_WHERE = "idempotency_key IS NOT NULL"

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
    sa.Column("payload", LONG_TEXT, nullable=False),  # JSON {"args": [...], "kwargs": {...}}
    sa.Column("params", LONG_TEXT),  # JSON object
    sa.Column("max_retries", sa.Integer, nullable=False),
    sa.Column("backoff", sa.String(16), nullable=False),
    sa.Column("backoff_base", DOUBLE, nullable=False),
    sa.Column("timeout", DOUBLE),
    sa.Column("resource_name", sa.String(100)),
    sa.Column("idempotency_key", KEY),
    sa.Column("business_key", KEY),
    _id("depends_on"),
    _id("superseded_by"),
    sa.Column("recurring_id", KEY),
    sa.Column("fire_time", UtcDateTime),
    sa.Column("created_at", UtcDateTime, nullable=False, index=True),
    sa.Column("first_due_at", UtcDateTime, nullable=False),
    # Survivors of the hot row, written at the terminal transition.
    sa.Column("terminal_status", STATUS),
    sa.Column("terminal_error", LONG_TEXT),
    # A FAILED job's error with what varies between jobs replaced (see fingerprints.py): its
    # dead-letter group, with its task. NULL for every other status.
    sa.Column("fingerprint", sa.String(MAX_FINGERPRINT)),
    sa.Column("result", LONG_TEXT),  # JSON
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("finished_at", UtcDateTime),
    sa.Column("progress", LONG_TEXT),  # JSON {"done", "total", "message"}, the last reported
    # The batch a child belongs to (its parent job's id).
    _id("batch_id"),
    # Whether the job's end sets off more work (a batch to count, dependent steps or branches
    # to release or cancel, callbacks): only such jobs pay for looking, see store/flows.py.
    sa.Column("follow_up", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("callbacks", LONG_TEXT),  # JSON {"success": [task, ...], "failure": [...]}
    # The submission's trace context (JSON: traceparent, …) while tracing is on; see tracing.py.
    sa.Column("trace_context", LONG_TEXT),
    # The time the job must have started by, or it ends CANCELED ("expired"); NULL: none.
    sa.Column("expires_at", UtcDateTime),
    # A job that awaits a signal (states.py, WAITING): its key, how long each wait lasts
    # (seconds), and the payload its signal delivered (JSON, sealed if the job is encrypted).
    sa.Column("signal_key", sa.String(255)),
    sa.Column("signal_timeout", DOUBLE),
    sa.Column("signal_payload", LONG_TEXT),
    # Who submitted the job (RATCHET_PRINCIPAL), as the host app names them; NULL: nobody said.
    sa.Column("principal", sa.String(255)),
    sa.Index(None, "task", "job_id"),
    # Unique where set: a key is held for ever, and a recurring master fires once per time.
    # Partial, as the indexes below, so that a job without either pays for no entry. On
    # MariaDB and MySQL they hold every row (NULLs never collide there either).
    _index_where(IDEMPOTENCY_INDEX, "idempotency_key", where=IDEMPOTENCY_WHERE, unique=True),
    _index_where(
        "uq_ratchet_job_recurring_id_fire_time",
        "recurring_id",
        "fire_time",
        where="recurring_id IS NOT NULL",
        unique=True,
    ),
    # Partial where most rows hold NULL: a job is written (and ended) without an entry in
    # an index that would never find it, which spares the submission and completion paths.
    _partial_index("business_key", where="business_key"),
    _partial_index("depends_on", where="depends_on"),
    _partial_index("signal_key", "job_id", where="signal_key"),
    _partial_index("principal", "job_id", where="principal"),
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
    # The dead letters grouped by task and fingerprint (the console's page), and one group's
    # jobs newest first (what retrying or deleting that group counts and takes).
    _index_where(
        "ix_ratchet_job_failed_fingerprint",
        "task",
        "fingerprint",
        "job_id",
        where=f"terminal_status = '{JobStatus.FAILED}'",
    ),
    # The console's filters and sorts, each walked newest first (see console/reads/jobs.py).
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
    # When a worker thread took the attempt (the claim's time on the database's clock plus how
    # long it waited in the worker): older than picked_at, it is an earlier attempt's. Written
    # by the worker's watchdog sweep, not per job (see flask_ratchet/substates.py).
    sa.Column("started_at", UtcDateTime),
    sa.Column("paused_from_status", STATUS),
    sa.Column("last_error", LONG_TEXT),
    sa.Column("progress", LONG_TEXT),  # JSON, while the job runs
    # Workers that handed the job back not knowing its task: see flask_ratchet/refusals.py.
    sa.Column("refused_since", UtcDateTime),
    sa.Column("refused_by", LONG_TEXT),
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
    # The waits that timed out, read in deadline order (a WAITING job's scheduled_time is its
    # deadline) without looking at the others.
    _index_where(
        "ix_ratchet_job_queue_waiting",
        "scheduled_time",
        "job_id",
        where=f"status = '{JobStatus.WAITING}'",
    ),
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
    sa.Column("duration_ms", DOUBLE),
    sa.Column("queue_wait_ms", DOUBLE),
    sa.Column("error", LONG_TEXT),
    sa.Column("traceback", LONG_TEXT),
    # The job's queue, copied: the queues page counts the last hour's runs per queue from
    # this table alone (NULL in rows written before it was added).
    sa.Column("queue", QUEUE),
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
    sa.Column("message", LONG_TEXT, nullable=False),
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
    sa.Column("info", LONG_TEXT),  # JSON
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
    sa.Column("error", LONG_TEXT, nullable=False),
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
    sa.Column("payload", LONG_TEXT, nullable=False),
    sa.Column("options", LONG_TEXT, nullable=False),  # JSON of the child jobs' options
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
    sa.Column("child_run_ms", DOUBLE, nullable=False),  # the children's run time, summed
    sa.Column("child_wait_ms", DOUBLE, nullable=False),  # their queue wait, summed
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
    sa.Column("threshold", DOUBLE),  # for SUCCESS_RATE and FAILURE_COUNT
    sa.Column("decision", sa.String(16)),  # TRIGGERED, SKIPPED or ERROR once decided
    sa.Column("error", LONG_TEXT),  # why routing failed (a predicate that raised)
    sa.Column("decided_at", UtcDateTime),
)

resource_limit = sa.Table(
    "ratchet_resource_limit",
    metadata,
    sa.Column("resource_name", sa.String(100), primary_key=True),
    sa.Column("max_concurrent", sa.Integer),  # NULL: no limit on jobs at once
    sa.Column("retry_delay", DOUBLE, nullable=False),
    sa.Column("updated_at", UtcDateTime, nullable=False),
    # At most rate_count starts in any rate_period seconds (both NULL: no rate).
    sa.Column("rate_count", sa.Integer),
    sa.Column("rate_period", DOUBLE),
)

#: The starts of the last rate period of each resource with a rate: its sliding window. The
#: primary key is the window's index (a resource's starts in time order).
resource_start = sa.Table(
    "ratchet_resource_start",
    metadata,
    sa.Column("resource_name", sa.String(100), primary_key=True),
    sa.Column("started_at", UtcDateTime, primary_key=True),
    sa.Column("job_id", StoredUuid(), primary_key=True),
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
    sa.Column("data", LONG_TEXT, nullable=False),  # JSON snapshot of the cold row
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
    sa.Column("target", LONG_TEXT, nullable=False),  # a job id, or the filter, as JSON
    sa.Column("requested", sa.Integer, nullable=False),
    sa.Column("changed", sa.Integer, nullable=False),
)
