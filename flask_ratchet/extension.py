"""The :class:`Ratchet` extension: registration, and the public API as one object.

``init_app`` only records a :class:`~flask_ratchet.runtime.Runtime` in
``app.extensions["ratchet"]`` and adds the CLI group and the console blueprint: nothing is
started and nothing is written. Every other method says what it does and hands the work to the
module of its noun in :mod:`flask_ratchet.api`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any, ParamSpec, TypeVar, Unpack, overload

from flask import Flask, current_app
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy.engine import Connection

from . import facts, migrate
from .api import bulk, handles, jobs, queues, resources, signals
from .api.batches import BatchBuilder, StreamingBatchBuilder, batch_progress
from .api.handles import JobHandle
from .api.jobs import JobFilters
from .api.submit import JobBuilder, make_builder, submit_jobs
from .api.tasks import TaskFunction, TaskOptions, task_decorator
from .config import RatchetConfig
from .database import database_for
from .extension_recurring import RecurringMethods
from .job import BatchProgress, Job, QueueSummary
from .options import due_time, seconds
from .paging import Page
from .recurring import RecurringDefinition
from .registry import TaskRegistry
from .resources import DEFAULT_RETRY_DELAY, ResourceLimit
from .runtime import Runtime
from .runtime import current as current_runtime
from .store.types import ClaimedJob, JobFilter
from .worker.inline import eager_hook

P = ParamSpec("P")
R = TypeVar("R")


class Ratchet(RecurringMethods):
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
        #: Masters declared with ``@ratchet.recurring``, by id; workers register them at start.
        self.recurring_definitions: dict[str, RecurringDefinition] = {}
        self._db = db
        if app is not None:
            self.init_app(app, db)

    def init_app(self, app: Flask, db: SQLAlchemy | None = None) -> None:
        """Register the extension on ``app``: config, CLI group and console. Starts nothing.

        ``db``: the app's Flask-SQLAlchemy (default: the one registered on ``app``), whose
        session operations join; with ``RATCHET_DATABASE_URL`` set, ratchet uses an engine of
        its own instead (see :mod:`flask_ratchet.database`).

        :raises RuntimeError: if ratchet is already registered on ``app`` or there is no db.
        :raises ConfigError: naming the first invalid ``RATCHET_*`` key.
        """
        if "ratchet" in app.extensions:
            raise RuntimeError(
                "flask-ratchet is already registered on this app; call init_app() once per app"
            )
        config = RatchetConfig.from_mapping(app.config)
        found = app.extensions.get("sqlalchemy")
        database = database_for(app, db or self._db, found, config)
        runtime = Runtime(database, config, self.registry, self.recurring_definitions)
        app.extensions["ratchet"] = runtime

        from .cli import ratchet_cli

        app.cli.add_command(ratchet_cli)
        # The app's own `flask db migrate` must never write a migration dropping these tables.
        migrate.guard_host_migrations(app)
        # Tables are created at first use; in a web app, before any handler can take the
        # write lock that creating them needs.
        app.before_request(_ensure_schema)
        app.teardown_request(_warn_uncommitted)
        if config.eager:  # tests only: jobs run in this process when their enqueue commits
            runtime.run_inline = eager_hook(app, raise_errors=config.eager_raise)
        if config.console_url_prefix is not None:
            from .console import blueprint

            app.register_blueprint(blueprint, url_prefix=config.console_url_prefix)

    @property
    def runtime(self) -> Runtime:
        """The current app's :class:`~flask_ratchet.runtime.Runtime` (needs an app context)."""
        return current_runtime(self.registry)

    # -- tasks ---------------------------------------------------------------------------------

    @overload
    def task(self, func: Callable[P, R], /) -> TaskFunction[P, R]: ...
    @overload
    def task(
        self, **options: Unpack[TaskOptions]
    ) -> Callable[[Callable[P, R]], TaskFunction[P, R]]: ...

    def task(self, func: Any = None, **options: Any) -> Any:
        """Register a function as a task; returns a :class:`~flask_ratchet.TaskFunction`,
        callable as the function and with typed ``enqueue``, ``schedule`` and ``builder``.

        ::

            @ratchet.task
            def send_welcome(user_id: int) -> None: ...

            @ratchet.task(name="billing.charge", priority=Priority.HIGH, max_retries=3)
            def charge(payment_id: int) -> dict: ...

            @ratchet.task(queue="mail")  # run by workers started with --queues mail
            def send_reset_link(user_id: int) -> None: ...

            send_welcome.enqueue(42)      # a job; a type checker checks the arguments

        The options are :class:`~flask_ratchet.api.tasks.TaskOptions` (job options, a circuit
        breaker, retry rules); those not given are the app's ``RATCHET_DEFAULT_*``.
        """
        register = task_decorator(self.registry, options)
        return register(func) if func is not None else register

    # -- submission ----------------------------------------------------------------------------

    def enqueue(self, fn: Callable[..., Any] | str, /, *args: Any, **kwargs: Any) -> JobBuilder:
        """Start building a job that runs ``fn(*args, **kwargs)`` as soon as a worker is free.

        ``fn`` is a registered task (or its name) or a function under ``RATCHET_ALLOWED_MODULES``.
        Nothing is written until :meth:`JobBuilder.submit`.
        """
        return make_builder(self.runtime, fn, args, kwargs)

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
        return make_builder(self.runtime, fn, args, kwargs, delay=seconds("delay", delay))

    def schedule_at(
        self, when: datetime, fn: Callable[..., Any] | str, /, *args: Any, **kwargs: Any
    ) -> JobBuilder:
        """Start building a job due at ``when`` (an aware datetime).

        :raises InvalidOption: for a naive datetime, or one before ``options.EARLIEST_DUE``
            (1970) or after ``options.LATEST_DUE`` (9999-01-01 UTC).
        """
        run_at = due_time("schedule_at()", when)
        return make_builder(self.runtime, fn, args, kwargs, run_at=run_at)

    def wait(
        self,
        job_id: uuid.UUID | str,
        timeout: timedelta | float | None = 30.0,
        *,
        raise_on_failure: bool = False,
    ) -> Job:
        """Wait up to ``timeout`` seconds (``None``: no limit) for a job to end, and return it
        with its ``result`` or ``error``. ``JobHandle.wait()`` does the same.

        Never inside an open transaction (``WaitInTransaction``): commit first.

        :raises WaitTimeout: if the job has not ended in time (it goes on).
        :raises JobNotFound: if there is no such job.
        :raises JobFailed: with ``raise_on_failure``, if it ended FAILED or CANCELED.
        :raises InvalidJobId: for an id that is no UUID.
        """
        return handles.wait(self.runtime, job_id, timeout, raise_on_failure=raise_on_failure)

    def enqueue_many(self, builders: Iterable[JobBuilder]) -> list[JobHandle]:
        """Submit many jobs in one transaction with multi-row inserts; all or nothing."""
        return submit_jobs(self.runtime, list(builders))

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """Group job operations in one transaction of their own, committed at the end.

        Inside a request you rarely need this: operations join the request's ``db.session``.
        """
        with self.runtime.transaction() as conn:
            yield conn

    # -- operations ----------------------------------------------------------------------------

    def cancel_job(self, job_id: uuid.UUID | str) -> bool:
        """PENDING, PAUSED or RUNNING → CANCELED (a running job's result is discarded)."""
        return jobs.cancel(self.runtime, job_id)

    def pause_job(self, job_id: uuid.UUID | str) -> bool:
        """PENDING or FAILED → PAUSED, remembering which. Pausing a paused job returns True."""
        return jobs.pause(self.runtime, job_id)

    def resume_job(self, job_id: uuid.UUID | str) -> bool:
        """PAUSED → the status it was paused from."""
        return jobs.resume(self.runtime, job_id)

    def retry_job(self, job_id: uuid.UUID | str) -> bool:
        """FAILED → PENDING, attempts reset, due now; re-reserves its business key."""
        return jobs.retry(self.runtime, job_id)

    def run_job_now(self, job_id: uuid.UUID | str) -> bool:
        """Make a PENDING job that is due later (scheduled, or a retry waiting out its backoff)
        due now, its attempts kept; False (nothing changed) if it is already due, waits on
        another job, is not PENDING, or the policy (operation ``run_now``) denies it."""
        return jobs.run_now(self.runtime, job_id)

    def delete_job(self, job_id: uuid.UUID | str) -> bool:
        """Delete a SUCCEEDED, FAILED or CANCELED job with its executions, log lines, alerts and
        tags; False (nothing deleted) if it is live or there is no such job."""
        return jobs.delete(self.runtime, job_id)

    def cancel_jobs(self, *, actor: str = "app", **filters: Unpack[JobFilters]) -> int:
        """Cancel every PENDING, PAUSED or RUNNING job matching ``filters`` (those of
        :meth:`find_jobs`); return how many.

        A chunk of jobs at a time, in one transaction (the request's, or one of its own), with
        one audit row naming ``actor`` and one :data:`~flask_ratchet.events.jobs_bulk_canceled`
        event after the commit::

            ratchet.cancel_jobs(tag="tenant-42", status="PENDING")

        :raises ValueError: without any filter (to cancel every live job, name the statuses),
            or for a filter that is not valid; nothing is written.
        """
        return self._bulk("cancel", actor, filters)

    def retry_jobs(self, *, actor: str = "app", **filters: Unpack[JobFilters]) -> int:
        """Retry every FAILED job matching ``filters`` (see :meth:`cancel_jobs`): PENDING,
        attempts reset, due now; return how many."""
        return self._bulk("retry", actor, filters)

    def delete_jobs(self, *, actor: str = "app", **filters: Unpack[JobFilters]) -> int:
        """Delete every SUCCEEDED, FAILED or CANCELED job matching ``filters`` (see
        :meth:`cancel_jobs`) with everything recorded about it; return how many."""
        return self._bulk("delete", actor, filters)

    def _bulk(self, action: str, actor: str, filters: JobFilters) -> int:
        where = self._filter_of(f"{action}_jobs", filters)
        return bulk.change_matching(self.runtime, action, where, actor=actor, role="app")

    def _filter_of(self, operation: str, filters: JobFilters) -> JobFilter:
        if all(value is None for value in filters.values()):
            raise ValueError(
                f"{operation}() needs at least one filter (task=, status=, tag=, …): "
                "it never acts on every job by default"
            )
        return jobs.job_filter(self.runtime, **filters)

    def deliver_signal(self, target: uuid.UUID | str, payload: Any = None) -> int:
        """Deliver a signal: the jobs WAITING on it (``.await_signal(key, timeout)``) are due
        now, and ``payload`` (JSON) is their ``JobContext.current().signal_payload``. A
        ``str`` is a signal key (every job waiting on it, in one statement); a
        :class:`uuid.UUID` is one job's id. Returns how many jobs it released: 0 if none was
        waiting (a second delivery finds none). Joins the request's transaction like the
        other operations::

            ratchet.deliver_signal(f"refund-approved:{refund.id}", {"by": current_user.id})

        :raises InvalidOption: for a bad key; :raises PayloadError: for a payload that is
            not JSON. Nothing is written then.
        """
        return signals.deliver(self.runtime, target, payload)

    def reject_signal(self, target: uuid.UUID | str, reason: str) -> int:
        """End the jobs WAITING on ``target`` (as :meth:`deliver_signal` reads it) FAILED
        without running them, with ``reason`` as their error and no retry (dead letters);
        return how many.

        :raises InvalidOption: for a bad key or an empty reason; nothing is written.
        """
        return signals.reject(self.runtime, target, reason)

    def deliver_signals(
        self, payload: Any = None, *, actor: str = "app", **filters: Unpack[JobFilters]
    ) -> int:
        """Deliver a signal, with ``payload`` (JSON), to every WAITING job matching
        ``filters`` (those of :meth:`find_jobs`), a chunk at a time with one audit row and one
        :data:`~flask_ratchet.events.jobs_bulk_signaled` event; return how many::

            ratchet.deliver_signals({"approved": True}, task=refund, tag="batch-7")

        :raises ValueError: without any filter, or for a filter that is not valid;
            :raises PayloadError: for a payload that is not JSON. Nothing is written then.
        """
        where = self._filter_of("deliver_signals", filters)
        return signals.deliver_matching(self.runtime, where, payload, actor=actor, role="app")

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
        return jobs.replace(self.runtime, job_id, delay, fn, args, kwargs)

    # -- reads ---------------------------------------------------------------------------------

    def get_job(self, job_id: uuid.UUID | str) -> Job | None:
        """A snapshot of one job, or ``None`` if there is no such job.

        :raises InvalidJobId: (a ``ValueError``) for an id that is no UUID: a caller's
            mistake, never a job that might exist.
        """
        return jobs.get(self.runtime, job_id)

    def find_jobs(
        self, *, limit: int = 50, cursor: str | None = None, **filters: Unpack[JobFilters]
    ) -> Page[Job]:
        """Jobs matching every given filter, newest first, a page at a time. The filters:
        ``status`` (one or several), ``task`` (the function or its name), ``tag``,
        ``business_key``, ``queue``, ``batch`` (its children), ``created_after``,
        ``created_before``, ``ended_after``, ``ended_before``, ``principal`` (who submitted
        them); ``None`` means any. With ``RATCHET_AUTHORIZE``, only the jobs the principal may
        read (a page is still full unless it is the last).

        ::

            page = ratchet.find_jobs(status="FAILED", tag="billing")
            while page.next_cursor:
                page = ratchet.find_jobs(status="FAILED", tag="billing", cursor=page.next_cursor)

        :raises ValueError: for a limit out of range or a filter that is not valid.
        """
        return jobs.find(self.runtime, limit=limit, cursor=cursor, **filters)

    def queue_health(self, queue: str | None = None) -> dict[str, Any]:
        """Counts per status, due jobs, oldest due job's wait and p95 queue wait (seconds), of
        every job, or of the jobs of ``queue``."""
        return jobs.queue_health(self.runtime, queue)

    def claim_due(
        self,
        limit: int,
        node_id: str,
        queues: Mapping[str, int] | Iterable[str] | None = None,
    ) -> list[ClaimedJob]:
        """Mark up to ``limit`` due jobs RUNNING for ``node_id`` and return them: the claim.
        ``queues``: only from these (a mapping gives the most to take from each), else from
        every queue; never from a paused queue.

        Always its own short transaction: a claim never joins a request.
        """
        return jobs.claim_due(self.runtime, limit, node_id, queues)

    # -- batches -------------------------------------------------------------------------------

    def enqueue_batch(self, name: str) -> BatchBuilder:
        """Start a batch: ``add()`` children, set options and follow-ups, then ``submit()``."""
        return BatchBuilder(self.runtime, name)

    def streaming_batch(self, name: str) -> StreamingBatchBuilder:
        """Start a batch whose children come from an iterable:
        ``.from_iterable(items).process(fn).with_chunk_size(500).start()``."""
        return StreamingBatchBuilder(self.runtime, name)

    def batch_progress(self, batch_id: uuid.UUID | str) -> BatchProgress | None:
        """A batch's counts and metrics (``batch_id`` is its parent job's id), or None."""
        return batch_progress(self.runtime, batch_id)

    def cancel_batch(self, batch_id: uuid.UUID | str, *, actor: str = "app") -> int:
        """Cancel a batch that has not settled: its parent ends CANCELED, with every child that
        has not ended and the follow-ups; one audit row naming ``actor``. Returns how many jobs
        it canceled, the parent included (0 for a settled batch). To retry a batch's failed
        children: ``retry_jobs(batch=batch_id)``."""
        return bulk.cancel_batch(self.runtime, batch_id, actor=actor, role="app")

    # -- queues --------------------------------------------------------------------------------

    def pause_queue(self, name: str) -> bool:
        """Stop every worker claiming jobs of queue ``name``, from its next claim on; jobs that
        are running finish, and the queue's PENDING jobs wait. False if it was paused already.

        :raises InvalidOption: for a name that is no queue name.
        """
        return queues.pause_queue(self.runtime, name)

    def resume_queue(self, name: str) -> bool:
        """Let workers claim jobs of queue ``name`` again (they are woken at once); False if it
        was not paused.

        :raises InvalidOption: for a name that is no queue name.
        """
        return queues.resume_queue(self.runtime, name)

    def queues(self) -> list[QueueSummary]:
        """Every known queue, by name (the default queue, every queue ever paused, and every
        queue a live or ended job names, as the console lists them): live jobs per status, due
        jobs, the oldest due job's wait, and whether it is paused."""
        return queues.queues(self.runtime)

    # -- resources -----------------------------------------------------------------------------

    def configure_resource(
        self,
        name: str,
        max_concurrent: int | None = None,
        retry_delay: timedelta | float = DEFAULT_RETRY_DELAY,
        *,
        rate: tuple[int, timedelta | float] | str | None = None,
    ) -> ResourceLimit:
        """Set (or change) the limit of the resource ``name``, effective for the next permit:
        at most ``max_concurrent`` of its jobs at once, at most ``rate`` starts per period
        (``(count, period)`` or ``"N/s"``, ``"N/m"``, ``"N/h"``), or both, across every worker
        on the database.

        ::

            ratchet.configure_resource("payment-api", max_concurrent=4,
                                       retry_delay=timedelta(seconds=2))
            ratchet.configure_resource("stripe", rate=(100, timedelta(minutes=1)))

        A job that finds no permit free is due again ``retry_delay`` later; one over the rate
        when the window has room again (the rate is a sliding window: no period holds more
        than ``count`` starts). Neither spends an attempt. Joins the request's transaction
        (or ``ratchet.transaction()``) like job operations do. Lowering a limit takes no permit
        back: jobs holding one finish, and new ones wait until the count is under the new
        limit.

        :raises InvalidOption: for a bad name, neither ``max_concurrent`` nor ``rate``,
            ``max_concurrent < 1``, a rate that is not one of its forms, or a delay that is not
            positive or longer than ``options.MAX_DURATION``; nothing is written.
        """
        return resources.configure_resource(self.runtime, name, max_concurrent, retry_delay, rate)


def _ensure_schema() -> None:
    # Only to create the tables before a handler can take the write lock that needs. A missing
    # schema is not the host app's pages' problem: ratchet's own calls raise SchemaNotReady.
    runtime = current_app.extensions["ratchet"]
    if runtime.auto_create:
        runtime.ensure_schema()


def _warn_uncommitted(exc: BaseException | None) -> None:
    # Before Flask-SQLAlchemy's teardown (an app context's) rolls the session back: a request
    # that never committed jobs it enqueued loses them without a word otherwise. Not after an
    # unhandled error, whose rollback is what the app asked for (and which is logged already).
    runtime = current_app.extensions["ratchet"]
    if exc is None and runtime.db is not None and runtime.db.session.registry.has():
        facts.warn_uncommitted(runtime.db.session())
