"""The :class:`Ratchet` extension: registration, configuration and the public job API.

No SQL lives here (that is :mod:`flask_ratchet.store`) and nothing is started: ``init_app`` only
records state in ``app.extensions["ratchet"]``, adds the CLI group and the console blueprint.
"""

from __future__ import annotations

import contextvars
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import datetime, timedelta
from typing import Any, TypeVar, overload

import sqlalchemy as sa
from flask import Flask, current_app, has_request_context
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from . import events, migrate
from .announce import announce
from .breaker import BreakerSettings
from .config import RatchetConfig
from .errors import ConfigError, IllegalTransition, JobNotFound, SchemaNotReady
from .flow_facade import FlowFacade
from .forks import fresh_pool_after_fork
from .ids import job_id_of
from .job import Job, JobHandle, Page
from .options import Backoff, JobOptions, Priority, due_time, seconds, validate_options
from .recurring import RecurringDefinition
from .recurring_facade import RecurringFacade
from .registry import TaskRegistry
from .resources_facade import ResourcesFacade
from .states import Action, JobStatus, allowed
from .store import SqlJobStore, check_driver, store_for
from .store.base import ClaimedJob, JobFilter
from .submit import JobBuilder, make_builder, replacement_builder
from .worker.wakeup import Notifier

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

#: The connection of an enclosing ``ratchet.transaction()`` block, if any.
_transaction: contextvars.ContextVar[Connection | None] = contextvars.ContextVar(
    "ratchet_transaction", default=None
)

FIND_LIMIT_MAX = 1000


class RatchetState:
    """What one app knows about ratchet: ``app.extensions["ratchet"]``."""

    def __init__(self, ratchet: Ratchet, db: SQLAlchemy, config: RatchetConfig) -> None:
        self.ratchet = ratchet
        self.db = db
        self.config = config
        self._stores: dict[int, SqlJobStore] = {}
        self._statement_engine: tuple[Engine, Engine] | None = None
        self._schema_ready = False
        self._lock = threading.Lock()
        #: Called with no arguments after a transaction that wrote a due job commits.
        self.wake_listeners: list[Callable[[], None]] = []
        self._notifier: Notifier | None = None

    @property
    def engine(self) -> Engine:
        """The app's default Flask-SQLAlchemy engine (needs an app context)."""
        return self.db.engine

    @property
    def store(self) -> SqlJobStore:
        """The store for :attr:`engine`'s dialect."""
        engine = self.engine
        store = self._stores.get(id(engine))
        if store is None:
            store = self._stores[id(engine)] = store_for(engine, self.config)
            fresh_pool_after_fork(engine)
        return store

    @property
    def statement_engine(self) -> Engine:
        """The engine single-statement operations run on (autocommit on PostgreSQL)."""
        engine = self.engine
        cached = self._statement_engine
        if cached is None or cached[0] is not engine:
            cached = self._statement_engine = (engine, self.store.statement_engine(engine))
        return cached[1]

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
        session = self.db.session()  # the Session of this app context
        if has_request_context() or session.in_transaction():
            return session.connection()
        return None

    @contextmanager
    def connection(
        self,
        own: Callable[[], AbstractContextManager[Connection]] | None = None,
        *,
        atomic: bool = False,
    ) -> Iterator[Connection]:
        """The joined connection, or a transaction of its own (``own``, default a write
        transaction) that commits at the end. The events recorded on it are sent once the
        transaction has committed: the joined one's when the app commits it.

        ``atomic``: the block writes several statements that stand or fall together. Joined,
        it runs in a savepoint (:meth:`_all_or_nothing`); its own transaction is all or
        nothing already.
        """
        joined = self.joined_connection()
        if joined is not None:
            with self._all_or_nothing(joined) if atomic else nullcontext():
                yield joined
            if _transaction.get() is None:  # ratchet.transaction() announces when it commits
                self._announce_after_commit(events.take(joined))
            return
        with (own or (lambda: self.store.begin(self.engine)))() as conn:
            yield conn
            recorded = events.take(conn)
        self.announce(recorded)

    @contextmanager
    def _all_or_nothing(self, conn: Connection) -> Iterator[None]:
        """Run the block in a savepoint of the caller's transaction. If it raises, exactly what
        it wrote is rolled back, with the events it recorded, and the error goes on to the
        caller, whose transaction stays usable: its own rows still commit (on PostgreSQL a
        failed statement outside a savepoint would abort the whole transaction)."""
        with events.dropped_on_error(conn), self.store.savepoint(conn):
            yield

    def announce(self, recorded: list[events.Event]) -> None:
        """Send committed events in this thread (see :mod:`flask_ratchet.announce`)."""
        if recorded:
            announce(current_app._get_current_object(), recorded, self.wake)  # type: ignore[attr-defined]

    def _announce_after_commit(self, recorded: list[events.Event]) -> None:
        """Keep events for the request's session; send them once it commits."""
        if not recorded:
            return
        session = self.db.session()
        kept = session.info.setdefault("ratchet_events", [])
        if not kept:
            sa.event.listen(session, "after_commit", self._session_announces, once=True)
            sa.event.listen(session, "after_rollback", _forget_events, once=True)
        kept.extend(recorded)

    def _session_announces(self, session: Session) -> None:
        self.announce(session.info.pop("ratchet_events", []))

    def submit(self, builders: Sequence[JobBuilder]) -> list[JobHandle]:
        """Insert the builders' jobs atomically; return their handles in order."""
        jobs = [b.build() for b in builders]
        urgent = any(b.wakes_workers for b in builders)
        outcome = self.write_jobs(
            lambda conn: self.store.insert_jobs(conn, jobs),
            wake=lambda _: urgent,
            own=lambda: self.store.single_statement(self.statement_engine),
        )
        return [JobHandle(o.job_id, o.created) for o in outcome]

    def write_jobs(
        self,
        write: Callable[[Connection], T],
        *,
        wake: Callable[[T], bool],
        own: Callable[[], AbstractContextManager[Connection]] | None = None,
    ) -> T:
        """Run ``write`` on :meth:`connection`, all or nothing (``atomic``), and wake the
        workers if ``wake(result)``, once the transaction has committed (never before: a woken
        worker must find the jobs), and at most once per transaction."""
        with self.connection(own, atomic=True) as conn:
            result = write(conn)
            if wake(result):
                events.record(conn, [events.Event(events.WAKE)])
        return result

    def wake(self) -> None:
        """Tell workers that committed work is due: in this process directly, and elsewhere by
        ``NOTIFY`` on PostgreSQL (SQLite workers see the commit themselves)."""
        for listener in list(self.wake_listeners):
            listener()
        if self.engine.dialect.name == "postgresql":
            if self._notifier is None:
                self._notifier = Notifier(self.engine.url)
            self._notifier.request()


class Ratchet(RecurringFacade, FlowFacade, ResourcesFacade):
    """The flask-ratchet extension.

    ::

        db = SQLAlchemy()
        ratchet = Ratchet()

        def create_app():
            app = Flask(__name__)
            db.init_app(app)
            ratchet.init_app(app)
            return app

    Tasks are registered on the extension object (``@ratchet.task``) and so are shared by every app
    it is initialised on; everything else (config, store, engine) is per app.
    """

    def __init__(self, app: Flask | None = None, db: SQLAlchemy | None = None) -> None:
        self.registry = TaskRegistry()
        self.recurring_definitions: dict[str, RecurringDefinition] = {}
        self._db = db
        if app is not None:
            self.init_app(app, db)

    def init_app(self, app: Flask, db: SQLAlchemy | None = None) -> None:
        """Register the extension on ``app``: config, CLI group and console. Starts nothing.

        :raises RuntimeError: if ratchet is already registered on ``app`` or there is no db.
        :raises ConfigError: naming the first invalid ``RATCHET_*`` key.
        """
        if "ratchet" in app.extensions:
            raise RuntimeError(
                "flask-ratchet is already registered on this app; call init_app() once per app"
            )
        db = db or self._db or app.extensions.get("sqlalchemy")
        if db is None:
            raise RuntimeError(
                "flask-ratchet needs Flask-SQLAlchemy: call db.init_app(app) before "
                "ratchet.init_app(app), or pass db=..."
            )
        config = RatchetConfig.from_mapping(app.config)
        app.extensions["ratchet"] = RatchetState(self, db, config)
        if "sqlalchemy" in app.extensions:
            # Now, not at ratchet's first use: an app factory may query the database before
            # gunicorn --preload forks its web workers, which must not share that connection.
            with app.app_context():
                for engine in db.engines.values():
                    fresh_pool_after_fork(engine)
                try:
                    check_driver(db.engine)  # at start-up, not in the first request
                except ValueError as exc:
                    raise ConfigError(f"SQLALCHEMY_DATABASE_URI: {exc}") from None

        from .cli import ratchet_cli

        app.cli.add_command(ratchet_cli)
        # The app's own `flask db migrate` must never write a migration dropping these tables.
        migrate.guard_host_migrations(app)
        # Tables are created at first use; in a web app, before any handler can take the
        # write lock that creating them needs.
        app.before_request(_ensure_schema)
        if config.console_url_prefix is not None:
            from .console import blueprint

            app.register_blueprint(blueprint, url_prefix=config.console_url_prefix)

    @property
    def state(self) -> RatchetState:
        """The current app's :class:`RatchetState` (needs an app context)."""
        try:
            state = current_app.extensions["ratchet"]
        except RuntimeError:
            raise RuntimeError(
                "flask-ratchet needs an application context: use 'with app.app_context():'"
            ) from None
        except KeyError:
            raise RuntimeError("ratchet.init_app(app) was not called for this app") from None
        if state.ratchet is not self:
            raise RuntimeError("this app was initialised with another Ratchet instance")
        return state  # type: ignore[no-any-return]

    # -- tasks ---------------------------------------------------------------------------------

    @overload
    def task(self, func: F) -> F: ...
    @overload
    def task(
        self,
        *,
        name: str | None = None,
        priority: Priority | int = ...,
        max_retries: int = ...,
        backoff: Backoff | str = ...,
        backoff_base: timedelta | float = ...,
        timeout: timedelta | float | None = ...,
        resource: str | None = ...,
        tags: Iterable[str] = ...,
        service: str | None = ...,
        circuit_breaker: BreakerSettings | str | Mapping[str, Any] | None = ...,
    ) -> Callable[[F], F]: ...

    def task(self, func: Any = None, **options: Any) -> Any:
        """Register a function as a task; the function is returned unchanged.

        ::

            @ratchet.task
            def send_welcome(user_id: int) -> None: ...

            @ratchet.task(name="billing.charge", priority=Priority.HIGH, max_retries=3)
            def charge(payment_id: int) -> dict: ...

        ``circuit_breaker`` (a preset name, settings, or a dict of them) gives the task a
        breaker, shared by every task with the same ``service`` (default: the task's name).
        """
        name = options.pop("name", None)
        service = options.pop("service", None)
        breaker = options.pop("circuit_breaker", None)
        defaults = JobOptions(**validate_options(**options))

        def register(f: F) -> F:
            self.registry.register(f, name, defaults, service=service, circuit_breaker=breaker)
            return f

        return register(func) if func is not None else register

    # -- submission ----------------------------------------------------------------------------

    def enqueue(self, fn: Callable[..., Any] | str, /, *args: Any, **kwargs: Any) -> JobBuilder:
        """Start building a job that runs ``fn(*args, **kwargs)`` as soon as a worker is free.

        ``fn`` is a registered task (or its name) or a function under ``RATCHET_ALLOWED_MODULES``.
        Nothing is written until :meth:`JobBuilder.submit`.
        """
        return make_builder(self.state, fn, args, kwargs)

    def enqueue_now(self, fn: Callable[..., Any] | str, /, *args: Any, **kwargs: Any) -> JobHandle:
        """Enqueue with the task's default options and submit: ``enqueue(...).submit()``."""
        return self.enqueue(fn, *args, **kwargs).submit()

    def schedule(
        self, delay: timedelta | float, fn: Callable[..., Any] | str, /, *args: Any, **kwargs: Any
    ) -> JobBuilder:
        """Start building a job due ``delay`` after now (the database's clock).

        :raises InvalidOption: unless ``delay`` is a ``timedelta`` or seconds from 0 to
            ``options.MAX_DURATION`` (100 years).
        """
        return make_builder(self.state, fn, args, kwargs, delay=seconds("delay", delay))

    def schedule_at(
        self, when: datetime, fn: Callable[..., Any] | str, /, *args: Any, **kwargs: Any
    ) -> JobBuilder:
        """Start building a job due at ``when`` (an aware datetime).

        :raises InvalidOption: for a naive datetime, or one before ``options.EARLIEST_DUE``
            (1970) or after ``options.LATEST_DUE`` (9999-01-01 UTC).
        """
        run_at = due_time("schedule_at()", when)
        return make_builder(self.state, fn, args, kwargs, run_at=run_at)

    def enqueue_many(self, builders: Iterable[JobBuilder]) -> list[JobHandle]:
        """Submit many jobs in one transaction with multi-row inserts; all or nothing."""
        return self.state.submit(list(builders))

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """Group job operations in one transaction of their own, committed at the end.

        Inside a request you rarely need this: operations join the request's ``db.session``.
        """
        outer = _transaction.get()
        if outer is not None:
            yield outer
            return
        state = self.state
        state.ensure_schema()
        with state.store.begin(state.engine) as conn:
            token = _transaction.set(conn)
            try:
                yield conn
            finally:
                _transaction.reset(token)
            recorded = events.take(conn)
        state.announce(recorded)

    # -- operations ----------------------------------------------------------------------------

    def cancel_job(self, job_id: uuid.UUID | str) -> bool:
        """PENDING, PAUSED or RUNNING → CANCELED (a running job's result is discarded)."""
        return self._change(job_id, SqlJobStore.cancel)

    def pause_job(self, job_id: uuid.UUID | str) -> bool:
        """PENDING or FAILED → PAUSED, remembering which. Pausing a paused job returns True."""
        return self._change(job_id, SqlJobStore.pause)

    def resume_job(self, job_id: uuid.UUID | str) -> bool:
        """PAUSED → the status it was paused from."""
        return self._change(job_id, SqlJobStore.resume)

    def retry_job(self, job_id: uuid.UUID | str) -> bool:
        """FAILED → PENDING, attempts reset, due now; re-reserves its business key."""
        return self._change(job_id, SqlJobStore.retry)

    def _change(
        self, job_id: uuid.UUID | str, op: Callable[[SqlJobStore, Connection, uuid.UUID], bool]
    ) -> bool:
        key = job_id_of(job_id)
        state = self.state
        with state.connection() as conn:
            return op(state.store, conn, key)

    def replace(
        self,
        job_id: uuid.UUID | str,
        delay: timedelta | float,
        fn: Callable[..., Any] | str,
        /,
        *args: Any,
        **kwargs: Any,
    ) -> JobHandle:
        """Cancel a job and submit ``fn(*args, **kwargs)`` in its place, in one transaction.

        The new job keeps the old one's options and business key; the old one is CANCELED with
        ``superseded_by`` pointing at the new one.

        :raises JobNotFound: if there is no such job.
        :raises IllegalTransition: if the job already ended (nothing is written).
        """
        key = job_id_of(job_id)
        state = self.state
        # Atomic: the new job's insert may be refused (its business key held meanwhile) after
        # the old job's cancel was written.
        with state.connection(atomic=True) as conn:
            old = state.store.get_job(conn, key)
            if old is None:
                raise JobNotFound(f"no job has id {key}")
            if not isinstance(old.status, JobStatus) or not allowed(Action.CANCEL, old.status):
                raise IllegalTransition(
                    f"job {key} is {old.status}: only PENDING, PAUSED or RUNNING jobs "
                    "can be replaced"
                )
            builder = replacement_builder(state, old, fn, args, kwargs, seconds("delay", delay))
            new = builder.build()
            if not state.store.cancel(conn, key):  # the swap: lost if the job just ended
                raise IllegalTransition(f"job {key} ended while it was being replaced")
            (inserted,) = state.store.insert_jobs(conn, [new])
            state.store.mark_superseded(conn, key, inserted.job_id)
        return JobHandle(inserted.job_id)

    # -- reads ---------------------------------------------------------------------------------

    def get_job(self, job_id: uuid.UUID | str) -> Job | None:
        """A snapshot of one job, or ``None`` if there is no such job."""
        key = job_id_of(job_id)
        state = self.state
        with state.connection() as conn:
            return state.store.get_job(conn, key)

    def find_jobs(
        self,
        *,
        status: JobStatus | str | Iterable[JobStatus | str] | None = None,
        task: Callable[..., Any] | str | None = None,
        tag: str | None = None,
        business_key: str | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page[Job]:
        """Jobs matching every given filter, newest first, a page at a time.

        ::

            page = ratchet.find_jobs(status="FAILED", tag="billing")
            while page.next_cursor:
                page = ratchet.find_jobs(status="FAILED", tag="billing", cursor=page.next_cursor)
        """
        if (
            isinstance(limit, bool)
            or not isinstance(limit, int)
            or not 1 <= limit <= FIND_LIMIT_MAX
        ):
            raise ValueError(f"limit must be from 1 to {FIND_LIMIT_MAX}, got {limit!r}")
        statuses: tuple[JobStatus, ...] | None = None
        if status is not None:
            items = [status] if isinstance(status, str) else list(status)
            try:
                statuses = tuple(JobStatus(s) for s in items)
            except ValueError:
                names = ", ".join(JobStatus)
                raise ValueError(f"status must be one of {names}, got {status!r}") from None
        task_name = task if task is None or isinstance(task, str) else self._task_name(task)
        where = JobFilter(statuses, task_name, tag, business_key, created_after, created_before)
        state = self.state
        with state.connection() as conn:
            return state.store.find_jobs(conn, where, limit, cursor)

    def _task_name(self, fn: Callable[..., Any]) -> str:
        return self.registry.for_submit(fn, self.state.config.allowed_modules).name

    def queue_health(self) -> dict[str, Any]:
        """Counts per status, due jobs, oldest due job's wait and p95 queue wait (seconds)."""
        state = self.state
        with state.connection() as conn:
            return state.store.queue_health(conn)

    def claim_due(self, limit: int, node_id: str) -> list[ClaimedJob]:
        """Mark up to ``limit`` due jobs RUNNING for ``node_id`` and return them: the claim.

        Always its own short transaction: a claim never joins a request.
        """
        state = self.state
        state.ensure_schema()
        with state.store.single_statement(state.statement_engine) as conn:
            return state.store.claim_due(conn, limit, node_id, state.config.priority_boost_minutes)


def _forget_events(session: Session, *args: Any) -> None:
    session.info.pop("ratchet_events", None)


def _ensure_schema() -> None:
    # Only to create the tables before a handler can take the write lock that needs. A missing
    # schema is not the host app's pages' problem: ratchet's own calls raise SchemaNotReady.
    state = current_app.extensions["ratchet"]
    if state.auto_create:
        state.ensure_schema()
