"""The dialect strategy: what differs between databases, behind one interface every store part
uses. A database ratchet supports is one subclass of :class:`Dialect` plus its SQL.

- the clock: the database's time, in Python and inside a statement;
- transactions: a write transaction, a savepoint, a connection for one atomic statement;
- inserts: ``INSERT … ON CONFLICT`` in the dialect's spelling (:meth:`Dialect.insert_ignoring`,
  :meth:`Dialect.upsert`);
- the claim: marking due jobs RUNNING, the poller's hot path;
- wake-ups: the database's own channel for them, or what stands in for one;
- locking: whether row locks order writers, and the lock that serialises schema changes;
- the dialect's own SQL for the two batched hot paths (many jobs submitted, a batch of
  outcomes), where it has one; the shared SQL of :mod:`.submission` and :mod:`.executions`
  runs otherwise.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine, Row
from sqlalchemy.sql.elements import ColumnElement

from ..schema import job, node
from ..states import JobStatus
from ..wakeups.channels import Channels
from ..wakeups.end_watches import EndWatch, SleepingWatch
from .driver import savepoint
from .types import ClaimedJob, Finished, Inserted, NewJob, ReplicaLag

#: Rows per multi-row INSERT, or ids per ``IN (…)``: well under every driver's parameter limit.
CHUNK = 500


#: What a worker needs of the cold rows of the jobs it claimed (``:ids``), for the dialects
#: that read them after marking the hot rows (SQLite, MariaDB).
CLAIMED_COLD_ROWS = sa.select(
    job.c.job_id,
    job.c.task,
    job.c.payload,
    job.c.params,
    job.c.backoff,
    job.c.backoff_base,
    job.c.timeout,
    job.c.resource_name,
    job.c.depends_on,
    job.c.follow_up,
    job.c.batch_id,
    job.c.trace_context,
    job.c.expires_at,
).where(job.c.job_id.in_(sa.bindparam("ids", expanding=True)))


def chunks(items: Sequence[Any], size: int = CHUNK) -> Iterator[Sequence[Any]]:
    """Yield ``items`` in slices of at most ``size``."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


class Dialect:
    """One database's way of doing what the store parts need. Subclasses fill in the methods
    that raise ``NotImplementedError``; the others have a default that fits most databases."""

    #: ``sqlalchemy.dialects.<name>.insert``: the INSERT with ``on_conflict_do_nothing`` and
    #: ``on_conflict_do_update``.
    insert: Any
    #: Whether row locks order concurrent writers (``SELECT … FOR UPDATE``); False where whole
    #: write transactions are serialised anyway (SQLite's ``BEGIN IMMEDIATE``).
    locks_rows = True

    # -- transactions --------------------------------------------------------------------------

    def prepare(self, engine: Engine) -> None:
        """Once per process, before first use: settings the database needs (none by default)."""

    def begin(self, engine: Engine) -> AbstractContextManager[Connection]:
        """Open a write transaction on ``engine``; commit on success, roll back on error."""
        raise NotImplementedError

    def savepoint(self, conn: Connection) -> AbstractContextManager[None]:
        """A savepoint in ``conn``'s transaction: what the block wrote is rolled back (and only
        that) if it raises; released otherwise."""
        return savepoint(conn)

    def claim_engine(self, engine: Engine, timeout: float | None = None) -> Engine:
        """The engine a worker claims with (through :meth:`single_statement`); the worker
        makes it once from its own ``engine`` and disposes of it when it stops. With
        ``timeout``, the server ends a statement of it that runs longer, where it can (a
        server setting; the worker bounds the wait for an answer itself)."""
        return engine

    def single_statement(self, engine: Engine) -> AbstractContextManager[Connection]:
        """A connection for work that is one atomic write (the claim, a submission)."""
        return self.begin(engine)

    def worker_engine(self, url: sa.URL, concurrency: int, stalled_after: float) -> Engine:
        """The engine a worker process writes outcomes, heartbeats and maintenance on: its own,
        so that jobs using the app's ``db.session`` never compete with it for connections.

        A transaction of it left idle for ``stalled_after`` seconds is ended by the server:
        its process is stalled (stopped, paused, cut off) and counts as dead by then, and the
        row locks it holds would hold up the live workers' recovery of its jobs."""
        # No pre-ping (a round trip per checkout): every caller retries after a connection error.
        return sa.create_engine(url, pool_size=4, max_overflow=4)

    def schema_transaction(self, engine: Engine) -> AbstractContextManager[Connection]:
        """A write transaction to change ratchet's tables in, holding the lock that serialises
        such changes until it has ended, so that several upgrades at once (the pods of one
        deploy) run one after the other, each later one finding the work done. SQLite's
        ``BEGIN IMMEDIATE`` already serialises them."""
        return self.begin(engine)

    def transient(self, exc: BaseException) -> bool:
        """Whether ``exc`` ended a transaction that may simply be run again: the database broke
        a deadlock or gave up a lock wait (no error of the work itself)."""
        return False

    # -- the clock -----------------------------------------------------------------------------

    def now(self, conn: Connection) -> datetime:
        """The database's current time (UTC)."""
        raise NotImplementedError

    def now_sql(self) -> ColumnElement[datetime]:
        """The current time inside one statement."""
        raise NotImplementedError

    def instant_sql(self) -> ColumnElement[datetime]:
        """The current time as the statement runs, even late in a long transaction (where
        :meth:`now_sql` may be the transaction's start): for times compared across
        transactions that waited for one another's locks."""
        return self.now_sql()

    def ago_sql(self, seconds: float) -> ColumnElement[datetime]:
        """``seconds`` before the current time."""
        raise NotImplementedError

    def later_sql(self, seconds: float) -> ColumnElement[datetime]:
        """``seconds`` after the current time."""
        raise NotImplementedError

    def hour_sql(self) -> ColumnElement[datetime]:
        """The current time, truncated to the hour."""
        raise NotImplementedError

    def heard_within(self, seconds: float) -> ColumnElement[bool]:
        """Nodes that sent a heartbeat within ``seconds``: at most that long ago, and no
        further ahead either. Every heartbeat is the database's time; one later than that was
        written by hand (a far time, PostgreSQL's ``infinity``, text SQLite sorts after every
        time) and would keep a dead node's jobs RUNNING for ever. A live node writes its
        heartbeat again within an interval."""
        beat = node.c.last_heartbeat
        return sa.and_(beat >= self.ago_sql(seconds), beat <= self.later_sql(seconds))

    def updated(self, conn: Connection, stmt: sa.Update, *columns: Any) -> list[Any]:
        """Run ``stmt`` and return ``columns`` of each row it changed, as they are after it:
        ``UPDATE … RETURNING`` where the database has it (a database without it selects the
        rows under their lock, updates them by key, and reads them back)."""
        return list(conn.execute(stmt.returning(*columns)))

    # -- wake-ups ------------------------------------------------------------------------------

    def channels(self, url: sa.URL) -> Channels | None:
        """The database's own channel for wake-ups (PostgreSQL's ``NOTIFY``), or ``None``: then
        :meth:`wake_listener` and :meth:`end_watch` are what workers and waiters have, unless
        ``RATCHET_WAKEUP_URL`` names a channel (see :mod:`.wakeup`)."""
        return None

    def wake_listener(
        self, url: sa.URL, on_wake: Callable[[], None], stop: threading.Event
    ) -> threading.Thread:
        """Without a channel: a worker's thread (not started) that calls ``on_wake`` when
        another process has committed due jobs, until ``stop`` is set. By default it hears
        nothing (the worker's adaptive poll finds the jobs)."""
        return threading.Thread(target=stop.wait, name="ratchet-no-listener", daemon=True)

    def end_watch(self, url: sa.URL, within: float) -> EndWatch:
        """Without a channel: what a waiter waits on between reads of a job (by default it
        waits out each interval)."""
        return SleepingWatch()

    # -- inserts -------------------------------------------------------------------------------

    def insert_ignoring(self, table: sa.Table, key: str, where: str | None = None) -> Any:
        """``INSERT INTO table``, that inserts nothing where a row with the same ``key``
        (a unique column, or the column of a unique index of the rows where the SQL condition
        ``where`` holds) exists: add ``.values()`` or ``.from_select()``, and ``.returning()``
        to learn which rows went in."""
        return self.insert(table).on_conflict_do_nothing(
            index_elements=[key], index_where=None if where is None else sa.text(where)
        )

    def upsert(
        self,
        table: sa.Table,
        keys: Sequence[str],
        values: dict[str, Any],
        update: Callable[[Any], dict[str, Any]],
        where: Callable[[Any], ColumnElement[bool]] | None = None,
    ) -> Any:
        """``INSERT INTO table`` one row of ``values``, or where a row with the same ``keys``
        (a unique index) exists, update it with ``update(new)`` (``new``: the proposed row's
        columns), and only if ``where(new)`` holds."""
        stmt = self.insert(table).values(**values)
        return stmt.on_conflict_do_update(
            index_elements=list(keys),
            set_=update(stmt.excluded),
            where=None if where is None else where(stmt.excluded),
        )

    def upserted(
        self,
        conn: Connection,
        table: sa.Table,
        keys: Sequence[str],
        values: dict[str, Any],
        update: Callable[[Any], dict[str, Any]],
        where: Callable[[Any], ColumnElement[bool]] | None = None,
        returning: Sequence[Any] = (),
    ) -> Row[Any] | None:
        """Run :meth:`upsert` and return ``returning`` (default: the primary key) of the row it
        inserted or updated, or ``None`` if a row with the same ``keys`` exists and ``where``
        did not hold for it (nothing was written)."""
        stmt = self.upsert(table, keys, values, update, where)
        return conn.execute(stmt.returning(*(returning or table.primary_key.columns))).first()

    # -- submission and the claim --------------------------------------------------------------

    def insert_times(self) -> dict[str, ColumnElement[datetime]]:
        """Expressions for a new job's ``created``/``due`` times, fed per row by
        :meth:`time_params`."""
        raise NotImplementedError

    def time_params(self, new: NewJob, now: datetime) -> dict[str, Any]:
        """The parameters :meth:`insert_times` binds for ``new`` (``now``: this process's)."""
        raise NotImplementedError

    def own_insert(self, conn: Connection, jobs: Sequence[NewJob]) -> list[Inserted] | None:
        """Write ``jobs`` with the dialect's own SQL and return what :mod:`.submission` would,
        or ``None`` to have the shared SQL write them."""
        return None

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
        the oldest due of the highest effective priority (``boost_minutes`` of waiting raise a
        job's priority by one level; 0: never).

        ``quotas``: the queues to claim from, each with the most jobs to take from it; ``None``:
        every queue. Paused queues are skipped either way, and jobs of the ``refused`` tasks
        (which the claiming worker does not know)."""
        raise NotImplementedError

    # -- reports -------------------------------------------------------------------------------

    def status_estimates(self, conn: Connection) -> dict[JobStatus, int]:
        """The database's own estimate of the jobs per status, where it keeps statistics that
        cost nothing to read (none by default): what a capped count is replaced by."""
        return {}

    def replica_lag(self, conn: Connection) -> ReplicaLag:
        """How far the server of ``conn``, a read replica, is behind its primary (on
        PostgreSQL alone: ``RATCHET_READ_URL`` is refused on other databases)."""
        raise NotImplementedError(f"{type(self).__name__} reads no replica")

    def indexed(self, table: sa.Table, index: str) -> Any:
        """``table`` to select from, read through ``index`` where the planner must be told to
        (by default: as it is). Select its columns by name: the result may be text."""
        return table

    # -- completion ----------------------------------------------------------------------------

    def own_cold_ends(self, conn: Connection, rows: Sequence[dict[str, Any]]) -> bool:
        """Write terminal outcomes to their cold rows (the parameters of
        :data:`~flask_ratchet.store.terminal.END_COLD_ROW`, a dict per job) with the dialect's
        own SQL and return ``True``, or ``False`` to have the shared executemany write them."""
        return False

    def own_completion(
        self, conn: Connection, node_id: str, items: Sequence[Finished]
    ) -> set[uuid.UUID] | None:
        """Write a batch of outcomes with the dialect's own SQL and return the ids it changed,
        or ``None`` to have the shared SQL (:mod:`.executions`) write them."""
        return None
