"""What one app knows about ratchet at run time: :class:`Runtime`, in ``app.extensions["ratchet"]``.

It holds what every layer above the store needs (config, task registry, engine, store), says which
connection an operation runs on, and sends the events a transaction recorded once it has
committed. It knows nothing of :class:`~flask_ratchet.Ratchet`, the builders, the worker or the
console: they all take a ``Runtime``, never the other way round.
"""

from __future__ import annotations

import contextvars
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, TypeVar

from flask import current_app, has_request_context
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.orm import Session

from . import facts, migrate
from .config import RatchetConfig
from .database import OwnDatabase, in_reading, replica_for
from .delivery import announce
from .errors import SchemaNotReady
from .facts import Event
from .flows import BatchCounts
from .forks import fresh_pool_after_fork
from .job import BatchProgress, opened
from .recurring import RecurringDefinition
from .registry import TaskRegistry
from .sealing import Keyring
from .store import Store, check_shared, store_for
from .wakeups.channels import Channels, RedisChannels
from .wakeups.notices import Wakeups

T = TypeVar("T")

#: The connection of an enclosing ``ratchet.transaction()`` block, if any.
_transaction: contextvars.ContextVar[Connection | None] = contextvars.ContextVar(
    "ratchet_transaction", default=None
)
#: Set while jobs run in this process (the testing kit), for the code they call.
_inline: contextvars.ContextVar[bool] = contextvars.ContextVar("ratchet_inline", default=False)

log = logging.getLogger("flask_ratchet.events")

#: How many times :meth:`Runtime.run` runs a transaction the database gave up to break a
#: deadlock or a lock wait, and the pause before the second try (seconds; more before later
#: ones, each drawn at random so that the transactions that met do not meet again).
TRIES = 4
RETRY_PAUSE = 0.02


def current(registry: TaskRegistry | None = None, owner: str = "this Ratchet object") -> Runtime:
    """The current app's :class:`Runtime`; with ``registry``, it must be that registry's (the
    app was initialised by the ``Ratchet`` object that owns it; ``owner`` names the asker).

    :raises RuntimeError: outside an app context, in an app ratchet was not registered on, or
        in one another ``Ratchet`` object was registered on.
    """
    try:
        runtime = current_app.extensions["ratchet"]
    except RuntimeError:
        raise RuntimeError(
            "flask-ratchet needs an application context: use 'with app.app_context():'"
        ) from None
    except KeyError:
        raise RuntimeError("ratchet.init_app(app) was not called for this app") from None
    if registry is not None and runtime.registry is not registry:
        raise RuntimeError(f"{owner} belongs to another Ratchet instance than this app's")
    return runtime  # type: ignore[no-any-return]


class Runtime:
    """One app's ratchet: ``app.extensions["ratchet"]``.

    ``registry`` and ``recurring_definitions`` are those of the ``Ratchet`` object it was
    registered by (shared by every app that object is registered on); the rest is this app's.
    ``db`` is the app's Flask-SQLAlchemy, whose session operations join, or ratchet's own
    database (``RATCHET_DATABASE_URL``), which has no session: there each operation commits by
    itself, unless it runs inside ``transaction()``.
    """

    def __init__(
        self,
        db: SQLAlchemy | OwnDatabase,
        config: RatchetConfig,
        registry: TaskRegistry,
        recurring_definitions: dict[str, RecurringDefinition],
    ) -> None:
        #: The app's Flask-SQLAlchemy; ``None`` when ratchet has a database of its own.
        self.db = db if isinstance(db, SQLAlchemy) else None
        self._own = db if isinstance(db, OwnDatabase) else None
        self.config = config
        self.registry = registry
        self.keyring = Keyring(config.encryption_keys, config.encryption_current_key)
        #: ``RATCHET_READ_URL``'s replica, which the console's pages read from; else ``None``.
        self.replica = replica_for(config)
        #: Masters declared with ``@ratchet.recurring``, by id; workers register them at start.
        self.recurring_definitions = recurring_definitions
        self._engine: Engine | None = None
        self._store: Store | None = None
        self._schema_ready = False
        self._lock = threading.Lock()
        #: Called with no arguments after a transaction that wrote a due job commits.
        self.wake_listeners: list[Callable[[], None]] = []
        self._wakeups: Wakeups | None = None
        #: Eager mode (``flask_ratchet.testing``): runs a commit's due jobs here, right after it.
        self.run_inline: Callable[[], object] | None = None
        #: The testing kit's in-process runner of this app, made at its first use.
        self.inline_runner: object | None = None

    @property
    def engine(self) -> Engine:
        """The app's default Flask-SQLAlchemy engine (the first use needs an app context), or
        ratchet's own."""
        engine = self._engine
        if engine is None:
            if self._own is not None:
                engine = self._own.engine
            else:
                assert self.db is not None
                # Flask-SQLAlchemy makes an app's engines once, in its init_app, and this
                # runtime is one app's: kept, the look-up through current_app is saved on
                # every operation.
                engine = self.db.engine
            self._engine = engine
        return engine

    def session(self) -> Session | None:
        """The app's ``db.session`` of this app context, which operations join in a request or
        once it has begun a transaction; ``None`` with ratchet's own database."""
        return None if self.db is None else self.db.session()

    @property
    def store(self) -> Store:
        """The store for :attr:`engine`'s dialect."""
        store = self._store
        if store is None:
            engine = self.engine
            check_shared(engine, self.config)
            store = self._store = store_for(engine, self.config)
            fresh_pool_after_fork(engine)
        return store

    @property
    def auto_create(self) -> bool:
        """Whether tables are created at first use (by default: on SQLite only)."""
        if self.config.auto_create is not None:
            return self.config.auto_create
        return self.engine.dialect.name == "sqlite"

    def ensure_schema(self) -> None:
        """Once per process, make sure ratchet's tables are up to date: create or upgrade them
        if auto-create is on, else check their revision (one query, until it passes).

        :raises SchemaNotReady: if auto-create is off and the tables are missing or older than
            this version needs, naming the revisions and the command to run.
        """
        if self._schema_ready:
            return
        with self._lock:
            if not self._schema_ready:
                if self.auto_create:
                    if migrate.current(self.engine) != migrate.HEAD:
                        self._create_schema()
                else:
                    problem = migrate.schema_problem(self.engine)
                    if problem is not None:
                        raise SchemaNotReady(problem)
                self.store.prepare(self.engine)
                self._schema_ready = True

    def _create_schema(self) -> None:
        try:
            migrate.upgrade(self.engine)
        except OperationalError as exc:
            if "locked" not in str(exc):
                raise
            raise RuntimeError(
                "flask-ratchet could not create its tables: this app's own open transaction "
                "holds the SQLite write lock. Run 'flask ratchet db upgrade' once, or make the "
                "first ratchet call before writing in that transaction"
            ) from exc

    # -- which connection an operation runs on -------------------------------------------------

    def joined_connection(self) -> Connection | None:
        """The connection of the transaction a job operation must join, if there is one.

        Inside ``ratchet.transaction()``: that transaction. Inside a request, or when the app's
        ``db.session`` already has a transaction: the session's connection (committed or rolled
        back by the app, never by ratchet). Otherwise ``None``: the operation runs on its own.
        """
        outer = _transaction.get()
        if outer is not None:
            return outer
        self.ensure_schema()
        session = self.session()
        if session is not None and (has_request_context() or session.in_transaction()):
            return session.connection()
        return None

    @contextmanager
    def running_inline(self) -> Iterator[None]:
        """Mark the block as running jobs in this process (see :meth:`in_inline_run`)."""
        token = _inline.set(True)
        try:
            yield
        finally:
            _inline.reset(token)

    def in_inline_run(self) -> bool:
        """Whether this code runs inside a job run in-process (``run_jobs``, eager mode), where
        no other job can run until it returns."""
        return _inline.get()

    def in_transaction(self) -> bool:
        """Whether a transaction is open that operations here would join: the block of
        ``ratchet.transaction()``, or one the app's ``db.session`` has begun."""
        if _transaction.get() is not None:
            return True
        session = self.session()
        return session is not None and session.in_transaction()

    def connection(
        self,
        own: Callable[[], AbstractContextManager[Connection]] | None = None,
        *,
        atomic: bool = False,
    ) -> AbstractContextManager[Connection]:
        """The joined connection, or a transaction of its own (``own``, default a write
        transaction) that commits at the end. The events recorded on it are sent once the
        transaction has committed: the joined one's when the app commits it.

        ``atomic``: the block writes several statements that stand or fall together. Joined,
        it runs in a savepoint (:meth:`_all_or_nothing`); its own transaction is all or
        nothing already. Inside :func:`~flask_ratchet.database.reading` (pure reads), with a
        read replica and outside ``ratchet.transaction()``: a read-only one of the replica's.
        """
        return self._on(self._joined(), own, atomic)

    def _joined(self) -> Connection | None:
        """:meth:`joined_connection`, except while reading the replica: the request's session
        is then left as it is, no transaction begun on the primary for nothing."""
        return None if self._reads_replica() else self.joined_connection()

    def _reads_replica(self) -> bool:
        """Whether :meth:`connection` gives the read replica's (see there)."""
        return self.replica is not None and in_reading() and _transaction.get() is None

    @contextmanager
    def _on(
        self,
        joined: Connection | None,
        own: Callable[[], AbstractContextManager[Connection]] | None,
        atomic: bool,
    ) -> Iterator[Connection]:
        """:meth:`connection` once the joined connection is known (``joined``, else ``None``)."""
        if self._reads_replica():
            assert self.replica is not None
            with self.replica.connect() as conn:
                yield conn
            return
        if joined is not None:
            with self._all_or_nothing(joined) if atomic else nullcontext():
                yield joined
            if _transaction.get() is None:  # transaction() announces when it commits
                self._announce_after_commit(facts.take(joined))
            return
        with (own or (lambda: self.store.begin(self.engine)))() as conn:
            yield conn
            recorded = facts.take(conn)
        self.announce(recorded)

    def read_connection(self) -> AbstractContextManager[Connection]:
        """A connection for pure reads: the read replica's (``RATCHET_READ_URL``), else
        :meth:`connection`."""
        if self.replica is None:
            return self.connection()
        self.ensure_schema()  # the primary's tables, which the replica copies
        return self.replica.connect()

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """A transaction of its own that every operation inside the block joins, committed at
        the end (or the enclosing one, when blocks nest)."""
        outer = _transaction.get()
        if outer is not None:
            yield outer
            return
        self.ensure_schema()
        with self.store.begin(self.engine) as conn:
            token = _transaction.set(conn)
            try:
                yield conn
            finally:
                _transaction.reset(token)
            recorded = facts.take(conn)
        self.announce(recorded)

    @contextmanager
    def unit_of_work(self) -> Iterator[None]:
        """One transaction for every operation in the block, committed at its end and rolled
        back if it raises: the app's ``db.session`` (a request's, which operations join), or
        with ratchet's own database a :meth:`transaction`. The console runs each action so."""
        session = self.session()
        if session is None:
            with self.transaction():
                yield
            return
        try:
            yield
        except BaseException:
            session.rollback()
            raise
        session.commit()

    @contextmanager
    def _all_or_nothing(self, conn: Connection) -> Iterator[None]:
        """Run the block in a savepoint of the caller's transaction. If it raises, exactly what
        it wrote is rolled back, with the events it recorded, and the error goes on to the
        caller, whose transaction stays usable: its own rows still commit (on PostgreSQL a
        failed statement outside a savepoint would abort the whole transaction)."""
        with facts.dropped_on_error(conn), self.store.savepoint(conn):
            yield

    def run(
        self,
        work: Callable[[Connection], T],
        *,
        atomic: bool = False,
        own: Callable[[], AbstractContextManager[Connection]] | None = None,
    ) -> T:
        """``work(conn)`` on :meth:`connection` (``atomic`` and ``own`` as there); return what
        it returns.

        In a transaction of its own, ``work`` runs again (up to :data:`TRIES` times in all,
        after a short random pause) when the database ended that transaction to break a
        deadlock or gave up a lock wait (:meth:`.Dialect.transient`): ``work`` must be safe
        to run again from the start, as every operation here is. Joined to the caller's
        transaction it runs once: that transaction is the caller's to run again.
        """
        joined = self._joined()
        if joined is not None:
            with self._on(joined, own, atomic) as conn:
                return work(conn)
        attempt = 1
        while True:
            try:
                with self._on(None, own, atomic) as conn:
                    return work(conn)
            except DBAPIError as exc:
                if not self.again_after(exc, attempt):
                    raise
            attempt += 1

    def again_after(self, exc: DBAPIError, attempt: int) -> bool:
        """Whether a transaction that failed with ``exc`` at its ``attempt``-th try (from 1)
        is to run again, the database having given it up to break a deadlock or a lock wait;
        if so, after a short pause, taken here. See :meth:`run`."""
        if attempt >= TRIES or not self.store.dialect.transient(exc):
            return False
        log.info("a transaction was given up to break a lock wait; running it again")
        time.sleep(random.uniform(0.5, 1.5) * RETRY_PAUSE * attempt)
        return True

    def write_jobs(
        self,
        write: Callable[[Connection], T],
        *,
        wake: Callable[[T], bool],
        own: Callable[[], AbstractContextManager[Connection]] | None = None,
    ) -> T:
        """Run ``write`` through :meth:`run`, all or nothing (``atomic``), and wake the workers
        if ``wake(result)``, once the transaction has committed (never before: a woken worker
        must find the jobs), and at most once per transaction."""

        def written(conn: Connection) -> T:
            result = write(conn)
            if wake(result):
                facts.record(conn, [Event(facts.WAKE)])
            return result

        return self.run(written, atomic=True, own=own)

    # -- after commit --------------------------------------------------------------------------

    def announce(self, recorded: list[Event]) -> None:
        """Send committed events in this thread (see :func:`announce`); in eager mode, then run
        the jobs they made due."""
        if len(recorded) == 1 and recorded[0].kind == facts.SUBMITTED:
            return  # the common submission that wakes no worker: nothing to tell anyone
        if recorded:
            announce(current_app._get_current_object(), recorded, self.wake)  # type: ignore[attr-defined]
            if any(event.kind in facts.ENDS for event in recorded):
                try:
                    self.tell_ended()
                except Exception:
                    log.exception(
                        "telling waiters of ended jobs failed; they read them in a second"
                    )
            if self.run_inline is not None and any(e.kind == facts.WAKE for e in recorded):
                self.run_inline()

    def _announce_after_commit(self, recorded: list[Event]) -> None:
        """Keep events with the app's session; send them once its transaction has committed
        and ended (see :func:`facts.keep_with_session`): an eager job's error then reaches
        whoever called ``commit()``, and the session stays usable."""
        session = self.session()
        assert session is not None  # joined the session: there is one
        facts.keep_with_session(session, recorded, self.announce)

    @property
    def wakeups(self) -> Wakeups:
        """How this app's processes tell each other that jobs are due or ended: over the Redis
        of ``RATCHET_WAKEUP_URL``, else the database's own channel or watch (see
        :mod:`flask_ratchet.wakeups.notices`)."""
        found = self._wakeups
        if found is None:
            engine = self.engine
            dialect = self.store.dialect
            url = self.config.wakeup_url
            if url is not None:
                prefix = self.config.wakeup_prefix or f"ratchet:{engine.url.database}"
                channels: Channels | None = RedisChannels(url, prefix)
            else:
                channels = dialect.channels(engine.url)
            found = self._wakeups = Wakeups(channels, dialect, engine.url)
        return found

    def close_wakeups(self) -> None:
        """Close the connections this app's wake-up notices hold, if it sent any (see
        :meth:`.Wakeups.close`): for an app that is done with, a test's for instance. Reads
        nothing from the database."""
        if self._wakeups is not None:
            self._wakeups.close()

    def wake(self) -> None:
        """Tell workers that committed work is due: in this process directly, and elsewhere by
        the wake-up channel (PostgreSQL's ``NOTIFY``, Redis; SQLite workers see the commit
        themselves)."""
        for listener in list(self.wake_listeners):
            listener()
        notify = self.wakeups.notifier()
        if notify is not None:
            notify()

    def tell_ended(self) -> None:
        """Tell waiters in other processes (``JobHandle.wait``) that jobs ended here (a cancel
        from the API or the console, a worker's outcomes)."""
        notify = self.ended_notifier()
        if notify is not None:
            notify()

    def ended_notifier(self) -> Callable[[], None] | None:
        """The notifier of ends, one per process and app (``NOTIFY ratchet_ended``, Redis;
        ``None`` where waiters see the commit themselves or read every second)."""
        return self.wakeups.ended_notifier()

    def call_back(self, data: dict[str, Any]) -> None:
        """Run a committed callback event's task in this thread: a job's ``on_success`` or
        ``on_failure`` with the job's snapshot, a batch's ``on_progress`` with its progress."""
        task = self.registry.for_run(data["task"], self.config.allowed_modules)
        counts = data.get("counts")
        if isinstance(counts, BatchCounts):
            batch_id: uuid.UUID = data["batch_id"]
            with self.connection() as conn:
                found = self.store.flows.batches.batch_progress(conn, batch_id)
            task.func(
                found or BatchProgress(batch_id, "", counts.total, counts.succeeded, counts.failed)
            )
            return
        with self.connection() as conn:
            job = self.store.jobs.get_job(conn, data["job_id"])
        if job is not None:
            task.func(opened(job, self.keyring))
