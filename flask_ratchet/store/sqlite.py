"""SQLite: the embedded store, with the same behaviour as PostgreSQL.

SQLite has one writer at a time, so every write transaction this store opens starts with
``BEGIN IMMEDIATE``: it takes the write lock up front (waiting up to the driver's busy timeout)
instead of failing halfway when a reader tries to become a writer. Concurrent claimers are
therefore serialised, and each sees the rows the previous one marked RUNNING: disjoint sets, as
``SKIP LOCKED`` gives on PostgreSQL. The clock is this machine's, which is the database's.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql.elements import ColumnElement

from ..columns import UtcDateTime
from ..options import Priority
from ..schema import job, job_queue, queue_state
from ..states import Action, sources, target
from ..wakeups.end_watches import SqliteEndWatch
from ..wakeups.notices import SqliteWatcher
from .dialect import CLAIMED_COLD_ROWS, Dialect
from .driver import driver_statement
from .types import ClaimedJob, NewJob

# Every write transaction starts with it: run on the driver's cursor (see .driver).
_BEGIN_IMMEDIATE = sa.text("BEGIN IMMEDIATE")

#: Marks a DBAPI connection (in its pool entry's ``info``) whose synchronous level is set.
_SYNCHRONOUS_SET = "ratchet_sqlite_synchronous"


class SqliteDialect(Dialect):
    """The dialect of ``sqlite:///path`` URLs."""

    insert = staticmethod(sqlite.insert)
    locks_rows = False  # every write transaction begins IMMEDIATE: one writer at a time

    def __init__(self, synchronous: str | None = "NORMAL") -> None:
        self._synchronous = f"PRAGMA synchronous = {synchronous}" if synchronous else None

    def prepare(self, engine: Engine) -> None:
        # WAL lets readers (the app, the console) work while a worker writes. It is a property
        # of the database file, so setting it once is enough for every process.
        with engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA journal_mode = WAL")

    @contextmanager
    def begin(self, engine: Engine) -> Iterator[Connection]:
        with engine.connect() as conn, conn.begin():
            if self._synchronous and not conn.info.get(_SYNCHRONOUS_SET):
                # In WAL mode NORMAL commits without an fsync per transaction; a power cut may
                # lose the last commits but never corrupts the file (RATCHET_SQLITE_SYNCHRONOUS).
                # pysqlite opens no transaction for a PRAGMA, so this runs before BEGIN. The
                # setting lasts as long as the connection: once per connection is enough.
                conn.exec_driver_sql(self._synchronous)
                conn.info[_SYNCHRONOUS_SET] = True
            driver_statement(_BEGIN_IMMEDIATE, conn.dialect).execute(conn, {})
            yield conn

    @contextmanager
    def savepoint(self, conn: Connection) -> Iterator[None]:
        # pysqlite begins a transaction only before a data change, never before SAVEPOINT;
        # SQLite then starts one for the savepoint and its RELEASE commits it, in the middle
        # of the caller's transaction. Begin the real one first (IMMEDIATE, as every write
        # transaction here: a submission writes).
        if not conn.connection.driver_connection.in_transaction:  # type: ignore[union-attr]
            driver_statement(_BEGIN_IMMEDIATE, conn.dialect).execute(conn, {})
        with super().savepoint(conn):
            yield

    def transient(self, exc: BaseException) -> bool:
        # The busy timeout ran out while another connection held the write lock.
        return isinstance(exc, sa.exc.OperationalError) and "database is locked" in str(exc)

    def now(self, conn: Connection) -> datetime:
        return datetime.now(UTC)

    def now_sql(self) -> ColumnElement[datetime]:
        return sa.literal(datetime.now(UTC), UtcDateTime())

    def ago_sql(self, seconds: float) -> ColumnElement[datetime]:
        return sa.literal(datetime.now(UTC) - timedelta(seconds=seconds), UtcDateTime())

    def later_sql(self, seconds: float) -> ColumnElement[datetime]:
        return sa.literal(datetime.now(UTC) + timedelta(seconds=seconds), UtcDateTime())

    def hour_sql(self) -> ColumnElement[datetime]:
        hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
        return sa.literal(hour, UtcDateTime())

    def worker_engine(self, url: sa.URL, concurrency: int, stalled_after: float) -> Engine:
        # SQLite has no server to end a stalled writer's transaction: its lock ends with the
        # process.
        return sa.create_engine(url, connect_args={"timeout": 30})

    def wake_listener(
        self, url: sa.URL, on_wake: Callable[[], None], stop: threading.Event
    ) -> threading.Thread:
        return SqliteWatcher(str(url.database), on_wake, stop)

    def end_watch(self, url: sa.URL, within: float) -> SqliteEndWatch:
        return SqliteEndWatch(str(url.database or ""))

    def indexed(self, table: sa.Table, index: str) -> Any:
        # Without ANALYZE statistics SQLite may prefer another index and sort what it read;
        # SQLAlchemy renders no table hint for SQLite, hence the text.
        return sa.text(f"{table.name} INDEXED BY {index}")

    def insert_times(self) -> dict[str, ColumnElement[datetime]]:
        return {
            "created": sa.bindparam("p_now", type_=UtcDateTime()),
            "due": sa.bindparam("p_due", type_=UtcDateTime()),
        }

    def time_params(self, new: NewJob, now: datetime) -> dict[str, Any]:
        return {"p_now": now, "p_due": new.due(now)}

    def claim_due(
        self,
        conn: Connection,
        limit: int,
        node_id: str,
        boost_minutes: int,
        quotas: Mapping[str, int] | None = None,
        refused: Collection[str] = (),
    ) -> list[ClaimedJob]:
        now = datetime.now(UTC)
        named = None if quotas is None else len(quotas)
        claim = _claim_statement(bool(boost_minutes), named, bool(refused))
        params: dict[str, Any] = {
            "now": now,
            "limit": limit,
            "node": node_id,
            "boost": boost_minutes or 1,
        }
        if refused:
            params["refused"] = list(refused)
        for i, (name, quota) in enumerate((quotas or {}).items()):
            params[f"queue_{i}"], params[f"quota_{i}"] = name, quota
        hot = {r.job_id: r for r in conn.execute(claim, params)}
        if not hot:
            return []
        cold = conn.execute(CLAIMED_COLD_ROWS, {"ids": list(hot)})
        claimed = [
            ClaimedJob(
                job_id=c.job_id,
                task=c.task,
                payload=c.payload,
                params=c.params,
                priority=hot[c.job_id].priority,
                attempt=hot[c.job_id].attempts,
                max_retries=hot[c.job_id].max_retries,
                backoff=c.backoff,
                backoff_base=c.backoff_base,
                timeout=c.timeout,
                resource=c.resource_name,
                scheduled_time=hot[c.job_id].scheduled_time,
                picked_at=now,
                depends_on=c.depends_on,
                follow_up=c.follow_up,
                batch_id=c.batch_id,
                queue=hot[c.job_id].queue,
                trace_context=c.trace_context,
                expires_at=c.expires_at,
            )
            for c in cold
        ]
        claimed.sort(key=lambda c: (-c.priority, c.scheduled_time, c.job_id))
        return claimed


@functools.cache
def _claim_statement(boosted: bool, named: int | None, excluding: bool) -> sa.Update:
    """The claim, built once per shape: the oldest due PENDING rows of each priority level (of
    each of ``named`` queues, bound as ``queue_<i>`` with at most ``quota_<i>`` jobs each; of
    every queue if ``None``; and, ``excluding``, not of the tasks bound as ``refused``), merged
    by effective priority, paused queues' left out, marked RUNNING (parameters ``now``,
    ``limit``, ``node``, ``boost``)."""
    q = job_queue
    (source,) = sources(Action.CLAIM)
    now = sa.bindparam("now", type_=UtcDateTime())
    limit = sa.bindparam("limit", type_=sa.Integer())
    due: tuple[ColumnElement[bool], ...] = (q.c.status == source, q.c.scheduled_time <= now)
    if excluding:
        refused: Any = sa.bindparam("refused", expanding=True)
        due += (~sa.exists().where(job.c.job_id == q.c.job_id, job.c.task.in_(refused)),)
    queues: list[tuple[Any, Any]] = (
        [(None, limit)]
        if named is None
        else [
            (sa.bindparam(f"queue_{i}", type_=sa.String()), sa.bindparam(f"quota_{i}"))
            for i in range(named)
        ]
    )
    levels = []
    for name, quota in queues:
        for level in sorted(Priority, reverse=True):
            where: list[ColumnElement[bool]] = [*due, q.c.priority == int(level)]
            if name is not None:
                where.append(q.c.queue == name)
            oldest = (
                sa.select(
                    q.c.job_id,
                    q.c.queue,
                    q.c.priority,
                    q.c.scheduled_time,
                    (sa.literal(0) if name is None else quota).label("quota"),
                )
                .where(*where)
                .order_by(q.c.scheduled_time, q.c.job_id)
                .limit(quota)
                .subquery()
            )
            levels.append(sa.select(oldest))
    candidate = sa.union_all(*levels).subquery()
    effective: ColumnElement[Any] = candidate.c.priority
    if boosted:
        waited = (sa.func.julianday(now) - sa.func.julianday(candidate.c.scheduled_time)) * 1440.0
        boost = sa.bindparam("boost", type_=sa.Integer())
        effective = candidate.c.priority + sa.cast(waited / boost, sa.Integer)
    order = (effective.desc(), candidate.c.scheduled_time, candidate.c.job_id)
    # A queue paused since the worker last looked (it names the other queues once it knows):
    # left out of the pick, not the scans, whose index walks it would slow.
    unpaused = candidate.c.queue.not_in(sa.select(queue_state.c.name).where(queue_state.c.paused))
    if named is None:
        picked = sa.select(candidate.c.job_id).where(unpaused).order_by(*order).limit(limit)
    else:
        nth = sa.func.row_number().over(partition_by=candidate.c.queue, order_by=order)
        ranked = (
            sa.select(
                candidate.c.job_id,
                candidate.c.quota,
                effective.label("effective"),
                candidate.c.scheduled_time,
                nth.label("nth"),
            )
            .where(unpaused)
            .subquery()
        )
        picked = (
            sa.select(ranked.c.job_id)
            .where(ranked.c.nth <= ranked.c.quota)
            .order_by(ranked.c.effective.desc(), ranked.c.scheduled_time, ranked.c.job_id)
            .limit(limit)
        )
    # "+status": the guard must not be used as an index term. SQLite would otherwise walk every
    # PENDING row of the (status, …) index to find the picked ids, instead of looking each up
    # by its key: a claim costing as much as the backlog is long.
    guard = sa.literal_column(f"+{q.c.status.name}", q.c.status.type) == source
    return (
        sa.update(q)
        .where(q.c.job_id.in_(picked), guard)
        .values(
            status=target(Action.CLAIM, source),
            picked_by=sa.bindparam("node"),
            picked_at=now,
            attempts=q.c.attempts + 1,
            version=q.c.version + 1,
            updated_at=now,
        )
        .returning(
            q.c.job_id, q.c.priority, q.c.attempts, q.c.max_retries, q.c.scheduled_time, q.c.queue
        )
    )
