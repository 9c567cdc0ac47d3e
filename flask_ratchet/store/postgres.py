"""PostgreSQL (psycopg 3): the production dialect.

Time is always the server's ``now()``. The claim is one statement (see
:mod:`.postgres_claim`); submissions are one statement per chunk, or binary ``COPY``
(:mod:`.postgres_copy`), and PostgreSQL's completion one statement (:mod:`.postgres_completion`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql.elements import ColumnElement

from ..columns import UtcDateTime
from ..errors import ConfigError, DuplicateBusinessKey
from ..schema import IDEMPOTENCY_WHERE, business_key
from ..states import LIVE, JobStatus
from ..wakeups.channels import PgChannels
from .dialect import Dialect, chunks
from .driver import autocommit, driver_statement
from .postgres_claim import claim
from .postgres_completion import COMPLETE_STMT, complete_params
from .postgres_copy import SUBMITTED_COLUMNS, copy_jobs, copyable
from .submission import delete_jobs, job_values, match_duplicates, refuse_repeated_business_keys
from .types import ClaimedJob, Finished, Inserted, NewJob, ReplicaLag

_JOB_COLUMNS = ", ".join(c for c, _ in SUBMITTED_COLUMNS)
_JOB_PARAMS = ", ".join(f":{c}" for c, _ in SUBMITTED_COLUMNS)
_RECORD_COLUMNS = ", ".join(f"{c} {t}" for c, t in SUBMITTED_COLUMNS)  # json_to_recordset's
_CONFLICT = f"""
    ON CONFLICT (idempotency_key) WHERE {IDEMPOTENCY_WHERE} DO NOTHING
    RETURNING job_id, queue, priority, max_retries, first_due_at, business_key"""
# What follows the job insert in the submission statements: hot rows, then tags (``{tags}``
# selects them from the statement's own parameters) and business-key reservations, each only in
# a statement for jobs that have them (an empty part still costs the server a plan node).
_QUEUE_ROWS = """
), queue AS (
    INSERT INTO ratchet_job_queue (job_id, status, queue, scheduled_time, priority, attempts,
        max_retries, version, updated_at)
    SELECT job_id, :pending, queue, first_due_at, priority, 0, max_retries, 0, now() FROM job"""
_TAG_ROWS = """
), tag AS (
    INSERT INTO ratchet_job_tag (job_id, tag)
    {tags}"""
_RESERVATIONS = """
), reservation AS (
    -- No ON CONFLICT: a held key fails the whole statement, so nothing at all is written.
    INSERT INTO ratchet_business_key (business_key, job_id, reserved_at)
    SELECT business_key, job_id, now() FROM job WHERE business_key IS NOT NULL"""
_RETURNED = """
)
SELECT job_id FROM job
"""


def _after_job(tags: str | None, keys: bool) -> str:
    """The statement's parts after the job insert: tags selected by ``tags`` if given, and
    reservations if ``keys``."""
    tagged = _TAG_ROWS.format(tags=tags) if tags is not None else ""
    return _QUEUE_ROWS + tagged + (_RESERVATIONS if keys else "") + _RETURNED


_MANY_TAGS = """SELECT t.job_id, t.tag
    FROM json_to_recordset(CAST(:tags AS json)) AS t(job_id uuid, tag text)
    JOIN job USING (job_id)"""
_ONE_JOBS_TAGS = "SELECT job.job_id, t.tag FROM job, unnest(CAST(:tags AS text[])) AS t(tag)"

# A job's due time, and its deadline: a time given, or ``expires_in`` seconds after the due time
# (NULL when neither is: a NULL interval makes the sum NULL). As ``NewJob.due`` and ``.deadline``.
_DUE = "coalesce({run_at}, now() + make_interval(secs => {delay}))"
_DEADLINE = "coalesce({expires_at}, " + _DUE + " + make_interval(secs => {expires_in}))"

# Many jobs travel as one JSON document (one call into the C encoder; binding a dozen arrays
# costs tens of microseconds per job in the driver). A missing key reads as NULL.
_MANY = {
    "run_at": "run_at",
    "delay": "delay",
    "expires_at": "expires_at",
    "expires_in": "expires_in",
}
_SUBMIT = f"""
WITH input AS (
    SELECT * FROM json_to_recordset(CAST(:jobs AS json)) AS t(
        {_RECORD_COLUMNS}, run_at timestamptz, delay float8, expires_at timestamptz,
        expires_in float8)
), job AS (
    INSERT INTO ratchet_job ({_JOB_COLUMNS}, created_at, first_due_at, expires_at, attempts)
    SELECT {_JOB_COLUMNS}, now(), {_DUE.format(**_MANY)}, {_DEADLINE.format(**_MANY)}, 0
    FROM input{_CONFLICT}{_after_job(_MANY_TAGS, keys=True)}"""

# The same for one job, with scalar parameters: the common case, and cheaper to bind and plan.
_ONE = {
    "run_at": "CAST(:run_at AS timestamptz)",
    "delay": ":delay",
    "expires_at": "CAST(:expires_at AS timestamptz)",
    "expires_in": "CAST(:expires_in AS float8)",
}
_SUBMIT_ONE = f"""
WITH job AS (
    INSERT INTO ratchet_job ({_JOB_COLUMNS}, created_at, first_due_at, expires_at, attempts)
    VALUES ({_JOB_PARAMS}, now(), {_DUE.format(**_ONE)}, {_DEADLINE.format(**_ONE)}, 0)
    {_CONFLICT}"""
_SUBMIT_STMT = sa.text(_SUBMIT)
#: One job's statement, by (it has tags, it has a business key).
_SUBMIT_ONE_STMTS = {
    (tagged, keyed): sa.text(_SUBMIT_ONE + _after_job(_ONE_JOBS_TAGS if tagged else None, keyed))
    for tagged in (False, True)
    for keyed in (False, True)
}
_KEY_CONSTRAINT = "pk_ratchet_business_key"
#: The transaction-level advisory lock schema changes hold (the bytes of "ratchet!" as a number,
#: unlikely to be an app's own key).
SCHEMA_LOCK_KEY = int.from_bytes(b"ratchet!", "big") - 2**63
_LOCK_SCHEMA = sa.text("SELECT pg_advisory_xact_lock(:key)")
#: ``END_COLD_ROW`` for many jobs: the cold rows joined to the outcomes, a column an array.
_COLD_ENDS = sa.text(
    "UPDATE ratchet_job j SET terminal_status = v.status, result = v.result, "
    "terminal_error = v.error, fingerprint = v.fingerprint, attempts = v.attempts, "
    "progress = v.progress, finished_at = now() "
    "FROM unnest(CAST(:job_id AS uuid[]), CAST(:status AS text[]), CAST(:result AS text[]), "
    "CAST(:error AS text[]), CAST(:fingerprint AS text[]), CAST(:attempts AS int[]), "
    "CAST(:progress AS text[])) "
    "AS v(job_id, status, result, error, fingerprint, attempts, progress) "
    "WHERE j.job_id = v.job_id"
)
_TRANSIENT = frozenset({"40P01", "40001", "55P03"})


#: libpq options of a worker's own connections: a connection that died without a word (a NAT
#: or a load balancer dropping its flow, a server host gone) is noticed while it idles in the
#: pool (keepalives) and while a statement's bytes go unacknowledged (``tcp_user_timeout``), in
#: about half a minute; a connection attempt gives up after ``connect_timeout``. None of them
#: notices a proxy that keeps the socket open and forwards nothing (its own kernel answers):
#: a worker bounds its claims itself (``worker/deadline.py``).
ENGINE_TCP: dict[str, int] = {
    "connect_timeout": 10,
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30_000,
}


class PostgresDialect(Dialect):
    """The dialect of ``postgresql+psycopg://`` URLs.

    ``pooled``: the URL is a pooler in transaction mode (PgBouncer's ``pool_mode =
    transaction``), where consecutive transactions of one client may run on different server
    sessions. ratchet's own engines then send no session settings (a pooler refuses startup
    ``options``, and a ``SET`` would leak into other clients' transactions) and prepare no
    statement (a prepared statement lives in one server session); ``LISTEN`` needs a session
    of its own, so wake-ups travel over ``listen_url`` (a direct connection), or not at all:
    workers and waiters poll. The one advisory lock (schema changes) is transaction-level.
    """

    insert = staticmethod(postgresql.insert)

    def __init__(self, *, pooled: bool = False, listen_url: sa.URL | None = None) -> None:
        self.pooled = pooled
        self.listen_url = listen_url

    def prepare(self, engine: Engine) -> None:
        if not self.pooled:
            return
        with engine.connect() as conn:  # the app's engine: its statements run there too
            threshold = getattr(conn.connection.driver_connection, "prepare_threshold", None)
        if threshold is not None:
            raise ConfigError(
                "RATCHET_TRANSACTION_POOLING is set, but the app's engine prepares statements "
                "(a prepared statement lives in one server session, and the pooler hands each "
                "transaction to any): set SQLALCHEMY_ENGINE_OPTIONS = "
                '{"connect_args": {"prepare_threshold": None}}'
            )

    @contextmanager
    def begin(self, engine: Engine) -> Iterator[Connection]:
        with engine.begin() as conn:
            yield conn

    def claim_engine(self, engine: Engine, timeout: float | None = None) -> Engine:
        # Claims commit without waiting for the WAL flush (a disk flush per claim saved). A
        # claim lost in a server crash only leaves its jobs PENDING, as if never claimed: the
        # claiming worker's outcomes are fenced and change nothing, and the jobs run again, as
        # after a worker crash. Completions and submissions stay synchronous.
        # JIT never pays for a claim: it costs more to compile than the claim takes.
        settings = ["synchronous_commit=off", "jit=off"]
        if timeout is not None:
            settings.append(f"statement_timeout={max(1, round(timeout * 1000))}")
        return sa.create_engine(
            engine.url,
            pool_size=1,
            max_overflow=0,
            isolation_level="AUTOCOMMIT",
            connect_args=self._session(engine.url, *settings),
        )

    def worker_engine(self, url: sa.URL, concurrency: int, stalled_after: float) -> Engine:
        idle = max(1, round(stalled_after * 1000))
        return sa.create_engine(
            url,
            pool_size=4,
            max_overflow=4,
            connect_args=self._session(url, f"idle_in_transaction_session_timeout={idle}"),
        )

    def _session(self, url: sa.URL, *settings: str) -> dict[str, Any]:
        """``connect_args`` for one of ratchet's own engines: the session ``settings``; behind
        a transaction pooler none, and no prepared statements (see the class). Either way the
        client's TCP settings (:data:`ENGINE_TCP`), which the server never sees."""
        if self.pooled:
            return {"prepare_threshold": None, **ENGINE_TCP}
        return {**_server_options(url, *settings), **ENGINE_TCP}

    @contextmanager
    def single_statement(self, engine: Engine) -> Iterator[Connection]:
        # One statement is atomic by itself: autocommit saves the BEGIN and COMMIT round trips.
        with engine.connect() as conn:
            if autocommit(conn):  # a claim engine's, in autocommit for good
                yield conn
                return
            # A connection of the app's pool, switched for the block on the driver itself:
            # through SQLAlchemy (isolation_level="AUTOCOMMIT") the switch and its undoing at
            # check-in cost 14 µs more, a twentieth of a single enqueue.
            raw: Any = conn.connection.driver_connection
            raw.autocommit = True
            try:
                yield conn
            finally:
                _end_autocommit(conn, raw)

    def own_insert(self, conn: Connection, jobs: Sequence[NewJob]) -> list[Inserted]:
        """Insert jobs, their queue rows, tags and key reservations: with COPY when none can
        conflict, else in one statement per chunk."""
        if copyable(jobs):
            return copy_jobs(conn, jobs)
        refuse_repeated_business_keys(jobs)
        inserted: set[uuid.UUID] = set()
        joined = not autocommit(conn)
        for part in chunks(jobs, SUBMIT_CHUNK):
            if len(part) == 1:
                new = part[0]
                stmt = _SUBMIT_ONE_STMTS[bool(new.options.tags), new.business_key is not None]
                params = _submit_one_params(new)
            else:
                stmt, params = _SUBMIT_STMT, _submit_params(part)
            keyed = any(new.business_key for new in part)
            try:
                if keyed and joined:
                    # A refused key must not abort the transaction: the held key is looked up
                    # next, and an earlier chunk taken back out.
                    with self.savepoint(conn):
                        ids = _insert(conn, stmt, params)
                else:
                    ids = _insert(conn, stmt, params)
                inserted.update(ids)
            except sa.exc.IntegrityError as exc:
                if _constraint(exc) == _KEY_CONSTRAINT:
                    if inserted:  # an earlier chunk of this call went in: take it back out
                        delete_jobs(conn, list(inserted))
                    raise DuplicateBusinessKey(self._held_key(conn, part)) from None
                raise
        return match_duplicates(conn, jobs, inserted)

    def own_completion(
        self, conn: Connection, node_id: str, items: Sequence[Finished]
    ) -> set[uuid.UUID]:
        """A batch of outcomes in one statement (:mod:`.postgres_completion`)."""
        # On the driver's cursor (see .driver), like the claim: one per completion batch.
        rows = driver_statement(COMPLETE_STMT, conn.dialect).execute(
            conn, complete_params(node_id, items)
        )
        return {row[0] for row in rows}

    def own_cold_ends(self, conn: Connection, rows: Sequence[dict[str, Any]]) -> bool:
        """Terminal outcomes on their cold rows in one statement per chunk: the rows joined to
        the outcomes as arrays (an executemany is a statement per row)."""
        for part in chunks(rows):
            conn.execute(
                _COLD_ENDS,
                {
                    name: [row[f"b_{name}"] for row in part]
                    for name in (
                        "job_id",
                        "status",
                        "result",
                        "error",
                        "fingerprint",
                        "attempts",
                        "progress",
                    )
                },
            )
        return True

    def _held_key(self, conn: Connection, jobs: Sequence[NewJob]) -> str:
        keys = [new.business_key for new in jobs if new.business_key]
        held = conn.execute(
            sa.select(business_key.c.business_key).where(business_key.c.business_key.in_(keys))
        ).scalar()
        return str(held or keys[0])

    @contextmanager
    def schema_transaction(self, engine: Engine) -> Iterator[Connection]:
        with self.begin(engine) as conn:
            # Held until the transaction ends: the next upgrade reads the committed revision.
            conn.execute(_LOCK_SCHEMA, {"key": SCHEMA_LOCK_KEY})
            yield conn

    def transient(self, exc: BaseException) -> bool:
        # deadlock_detected, serialization_failure, lock_not_available (a lock_timeout)
        return getattr(getattr(exc, "orig", None), "sqlstate", None) in _TRANSIENT

    def now(self, conn: Connection) -> datetime:
        return conn.execute(sa.select(self.now_sql())).scalar_one()

    def now_sql(self) -> ColumnElement[datetime]:
        return sa.func.now(type_=UtcDateTime())

    def instant_sql(self) -> ColumnElement[datetime]:
        return sa.func.clock_timestamp(type_=UtcDateTime())  # now() is the transaction's start

    def ago_sql(self, seconds: float) -> ColumnElement[datetime]:
        return sa.func.now(type_=UtcDateTime()) - _interval(seconds)

    def later_sql(self, seconds: float) -> ColumnElement[datetime]:
        return sa.func.now(type_=UtcDateTime()) + _interval(seconds)

    def hour_sql(self) -> ColumnElement[datetime]:
        return sa.func.date_trunc("hour", sa.func.now(), type_=UtcDateTime())

    def channels(self, url: sa.URL) -> PgChannels | None:
        if not self.pooled:
            return PgChannels(url)
        return None if self.listen_url is None else PgChannels(self.listen_url)

    def claim_due(
        self,
        conn: Connection,
        limit: int,
        node_id: str,
        boost_minutes: int,
        quotas: Mapping[str, int] | None = None,
        refused: Collection[str] = (),
    ) -> list[ClaimedJob]:
        return claim(conn, limit, node_id, boost_minutes, quotas, refused)

    def status_estimates(self, conn: Connection) -> dict[JobStatus, int]:
        """``reltuples`` times the value's frequency in ``pg_stats``: live statuses from the hot
        table, ended ones from the cold rows."""
        return _estimates(conn)

    def replica_lag(self, conn: Connection) -> ReplicaLag:
        """Whether the server is in recovery, whether it replayed all it received, and the
        age of the newest commit it replayed."""
        row = conn.execute(_REPLICA_LAG).one()
        seconds = None if row.seconds is None else max(0.0, float(row.seconds))
        return ReplicaLag(bool(row.replica), bool(row.in_sync), seconds)


# The LSNs are NULL on a primary, and the receive LSN before streaming begins: not in sync.
_REPLICA_LAG = sa.text(
    "SELECT pg_is_in_recovery() AS replica, "
    "coalesce(pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn(), false) AS in_sync, "
    "extract(epoch FROM now() - pg_last_xact_replay_timestamp()) AS seconds"
)
_ESTIMATES = sa.text(
    "SELECT s.tablename, s.most_common_vals::text::text[] AS vals, "
    "s.most_common_freqs AS freqs, c.reltuples "
    "FROM pg_stats s JOIN pg_class c ON c.relname = s.tablename "
    "AND c.relnamespace = to_regnamespace(quote_ident(s.schemaname)) "
    "WHERE s.schemaname = current_schema() AND ("
    "(s.tablename = 'ratchet_job_queue' AND s.attname = 'status') OR "
    "(s.tablename = 'ratchet_job' AND s.attname = 'terminal_status'))"
)


def _estimates(conn: Connection) -> dict[JobStatus, int]:
    out: dict[JobStatus, int] = {}
    for row in conn.execute(_ESTIMATES):
        if row.reltuples is None or row.reltuples < 0 or not row.vals:
            continue
        live = row.tablename == "ratchet_job_queue"
        for value, freq in zip(row.vals, row.freqs, strict=False):
            if value in JobStatus.__members__ and (JobStatus(value) in LIVE) == live:
                out[JobStatus(value)] = int(row.reltuples * freq + 0.5)
    return out


def _insert(conn: Connection, stmt: sa.TextClause, params: dict[str, Any]) -> list[uuid.UUID]:
    """Run a submission statement on the driver's cursor (see .driver: one job's submission
    is a per-job hot path); the ids of the jobs it inserted."""
    return [row[0] for row in driver_statement(stmt, conn.dialect).execute(conn, params)]


#: Jobs per submission statement: large enough for bulk speed, small enough for memory.
SUBMIT_CHUNK = 5000


def _submit_params(jobs: Sequence[NewJob]) -> dict[str, Any]:
    """``_SUBMIT``'s parameters: the jobs and their tags as JSON documents."""
    return {
        "jobs": json.dumps([_json_row(new) for new in jobs]),
        "tags": json.dumps(
            [{"job_id": str(new.job_id), "tag": tag} for new in jobs for tag in new.options.tags]
        ),
        "pending": JobStatus.PENDING.value,
    }


def _json_row(new: NewJob) -> dict[str, Any]:
    """One job for ``_SUBMIT``'s JSON document: its non-null columns, JSON-typed."""
    row: dict[str, Any] = {}
    for column, value in (_due(new) | job_values(new)).items():
        if value is None:
            continue
        if isinstance(value, uuid.UUID):
            value = str(value)
        elif isinstance(value, datetime):
            value = value.isoformat()
        row[column] = value
    return row


def _interval(seconds: float) -> ColumnElement[Any]:
    return sa.func.make_interval(0, 0, 0, 0, 0, 0, sa.literal(float(seconds), sa.Float))


def _submit_one_params(new: NewJob) -> dict[str, Any]:
    """``_SUBMIT_ONE``'s parameters."""
    return (
        _due(new)
        | job_values(new)
        | {
            "tags": list(new.options.tags),
            "pending": JobStatus.PENDING.value,
        }
    )


def _due(new: NewJob) -> dict[str, Any]:
    return {
        "run_at": new.run_at,
        "delay": float(new.delay),
        "expires_at": new.expires_at,
        "expires_in": new.expires_in,
    }


def _end_autocommit(conn: Connection, raw: Any) -> None:
    """Give ``conn`` back to the pool as it was taken: out of autocommit, or invalidated if
    that cannot be done (a connection lost meanwhile)."""
    if conn.invalidated:
        return
    if raw.closed:
        conn.invalidate()
        return
    try:
        raw.autocommit = False
    except Exception as exc:  # the driver's: the connection is no longer usable
        conn.invalidate(exc)


def _constraint(exc: sa.exc.IntegrityError) -> str | None:
    """The name of the constraint a psycopg integrity error is about."""
    diag = getattr(exc.orig, "diag", None)
    return getattr(diag, "constraint_name", None)


def _server_options(url: sa.URL, *settings: str) -> dict[str, str]:
    """``connect_args`` setting ``settings`` for the session, after the URL's own ``options``
    (a ``search_path``, say), which a plain ``options`` argument would replace."""
    given = url.query.get("options", "")
    own = " ".join(f"-c {setting}" for setting in settings)
    return {"options": f"{given if isinstance(given, str) else ' '.join(given)} {own}".strip()}
