"""Builders that validate a submission and hand it to the store.

Everything that can be wrong with a job (an unregistered function, arguments that are not JSON, an
oversized payload, a bad option) is refused when the builder is made or an option is set: before
anything is written.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Self

from .. import payload
from ..errors import ConfigError, InvalidOption
from ..ids import uuid7
from ..job import Job
from ..options import Backoff, JobOptions, Priority, due_time, seconds, validate_key
from ..registry import Task
from ..routes import routed
from ..runtime import Runtime
from ..states import JobStatus
from ..store.types import NewJob
from . import policy
from .handles import JobHandle

if TYPE_CHECKING:
    from .chains import FlowBuilder

log = logging.getLogger("flask_ratchet")


class OptionSetters:
    """The option setters every builder shares (a job, a recurring master for each child, a
    batch for every child); each goes through ``_merge``, which validates."""

    def _merge(self, **changes: Any) -> Self:
        raise NotImplementedError

    def _tags(self) -> tuple[str, ...]:
        """The tags set so far."""
        raise NotImplementedError

    def _params(self) -> dict[str, Any]:
        """The params set so far."""
        raise NotImplementedError

    def with_queue(self, name: str) -> Self:
        """The queue the job goes to (default: its task's, or ``"default"``): only workers
        taking that queue run it (``flask ratchet worker --queues``)."""
        return self._merge(queue=name)

    def with_priority(self, priority: Priority | int) -> Self:
        """Claim order: ``Priority.LOWEST`` … ``Priority.CRITICAL`` (which also wakes workers)."""
        return self._merge(priority=priority)

    def with_max_retries(self, max_retries: int) -> Self:
        """Retries after the first run: ``n`` allows ``n + 1`` runs in all."""
        return self._merge(max_retries=max_retries)

    def with_backoff(self, backoff: Backoff | str, base: timedelta | float | None = None) -> Self:
        """How long to wait between attempts; ``base`` is the first wait."""
        if base is None:
            return self._merge(backoff=backoff)
        return self._merge(backoff=backoff, backoff_base=base)

    def with_timeout(self, timeout: timedelta | float) -> Self:
        """Fail an attempt that runs longer than this."""
        return self._merge(timeout=timeout)

    def with_expires(self, expires: timedelta | float | datetime) -> Self:
        """A deadline: a job not started by then ends CANCELED (error ``"expired"``) instead
        of running late. A ``timedelta`` (or seconds) counts from the job's due time; a
        recurring master's or a batch's children each count from their own.

        :raises InvalidOption: for a duration that is not positive, or a ``datetime`` here (a
            time is one job's deadline: ``ratchet.enqueue(...).with_expires(when)``).
        """
        if isinstance(expires, datetime):
            raise InvalidOption(
                "a deadline given as a datetime belongs to one job (ratchet.enqueue(...)"
                ".with_expires(when)); give these jobs a timedelta from their due time"
            )
        return self._merge(expires=expires)

    def with_tags(self, *tags: str) -> Self:
        """Add tags (searchable in ``find_jobs`` and the console)."""
        return self._merge(tags=(*self._tags(), *tags))

    def with_param(self, key: str, value: Any) -> Self:
        """Set one JobContext parameter (JSON)."""
        return self._merge(params={**self._params(), key: value})

    def with_resource(self, name: str) -> Self:
        """Take a permit of the named resource before running."""
        return self._merge(resource=name)


class OptionsBuilder(OptionSetters):
    """Options of a job (or of a recurring master's children) over its task's defaults, and the
    warning for a builder that was never submitted."""

    def __init__(self, runtime: Runtime, task: Task, payload_text: str) -> None:
        self._runtime = runtime
        self._task = task
        self._payload = payload_text
        self._options = task.options_over(runtime.config.job_defaults)
        self._submitted = False
        #: ``with_queue`` was called: a chain's ``with_queue`` leaves this job where it is.
        self.queue_chosen = False
        #: Seal the arguments, params and result (:mod:`flask_ratchet.sealing`).
        self._encrypt = task.encrypt or runtime.config.encrypt_all

    def _unsubmitted(self) -> str:
        """What was built and never submitted, for the warning."""
        raise NotImplementedError

    def _routed_options(self) -> JobOptions:
        """The options to write: ``RATCHET_ROUTES`` give the queue, unless the job chose one
        (``with_queue``) or its task did (see :mod:`flask_ratchet.routes`)."""
        if self.queue_chosen or "queue" in self._task.explicit:
            return self._options
        return routed(self._runtime.config.routes, self._task.name, self._options)

    def __del__(self) -> None:
        if not getattr(self, "_submitted", True):
            log.warning("%s was built but never submitted: call .submit()", self._unsubmitted())

    def _merge(self, **changes: Any) -> Self:
        self._options = self._options.merged(**changes)
        self.queue_chosen = self.queue_chosen or "queue" in changes
        return self

    def with_encrypted_payload(self) -> Self:
        """Encrypt the job's arguments, params and result in the database (a recurring
        master's: its arguments and each child's), with AES-256-GCM and
        ``RATCHET_ENCRYPTION_CURRENT_KEY``, bound to the job and the column: what a task's
        ``encrypt=True`` or ``RATCHET_ENCRYPT_ALL`` do for every job.

        :raises ConfigError: if no encryption key is configured.
        """
        if not self._runtime.keyring.can_seal:
            raise ConfigError(
                "with_encrypted_payload() needs RATCHET_ENCRYPTION_KEYS and "
                "RATCHET_ENCRYPTION_CURRENT_KEY"
            )
        self._encrypt = True
        return self

    def _tags(self) -> tuple[str, ...]:
        return self._options.tags

    def _params(self) -> dict[str, Any]:
        return self._options.params


class JobBuilder(OptionsBuilder):
    """Options for one job, then :meth:`submit`. Returned by ``ratchet.enqueue()`` and friends.

    >>> ratchet.enqueue(charge, 42).with_priority(Priority.HIGH).with_max_retries(5).submit()
    """

    def __init__(
        self,
        runtime: Runtime,
        task: Task,
        payload_text: str,
        *,
        delay: float = 0.0,
        run_at: datetime | None = None,
    ) -> None:
        super().__init__(runtime, task, payload_text)
        self._delay = delay
        self._run_at = run_at
        self._idempotency_key: str | None = None
        self._business_key: str | None = None
        self._immediate = False
        self._callbacks: dict[str, list[str]] = {}
        #: A deadline given as a time (``with_expires(datetime)``), over ``expires``.
        self._expires_at: datetime | None = None
        #: The signal key the job awaits, and how long each wait lasts (seconds).
        self._signal: tuple[str, float] | None = None

    def __repr__(self) -> str:
        return f"<JobBuilder {self._task.name}>"

    def _unsubmitted(self) -> str:
        return f"a job of task {self._task.name}"

    @property
    def task_name(self) -> str:
        """The name of the task this builder will enqueue."""
        return self._task.name

    def await_signal(self, key: str, timeout: timedelta | float) -> Self:
        """Write the job WAITING for the signal ``key``: it runs only once
        ``ratchet.deliver_signal(key)`` (or its id) makes it due, with the delivered payload in
        ``JobContext.current().signal_payload``. A wait longer than ``timeout`` counts as a
        failed attempt: with retries left it waits again, else it ends FAILED.

        :raises InvalidOption: for a bad key (as a business key) or a ``timeout`` that is not
            positive.
        """
        checked = validate_key("signal key", key)
        wait = seconds("timeout", timeout)
        if not wait > 0:
            raise InvalidOption(f"timeout of await_signal() must be positive, got {timeout!r}")
        self._signal = (checked, wait)
        return self

    def with_expires(self, expires: timedelta | float | datetime) -> Self:
        """A deadline: the job not started by then ends CANCELED (error ``"expired"``) instead
        of running late. A ``datetime`` (aware) is the deadline itself; a ``timedelta`` (or
        seconds) counts from the job's due time, so a job scheduled for later is not expired
        before it was due. A chain step's or branch's due time is not known when it is written:
        only a ``datetime`` gives it a deadline.

        :raises InvalidOption: for a naive or out-of-range ``datetime``, or a duration that is
            not positive.
        """
        if isinstance(expires, datetime):
            self._expires_at = due_time("with_expires()", expires)
            return self
        self._expires_at = None
        return super().with_expires(expires)

    def with_idempotency_key(self, key: str) -> Self:
        """Globally unique forever: a repeat returns the original job's handle."""
        self._idempotency_key = validate_key("idempotency key", key)
        return self

    def with_business_key(self, key: str) -> Self:
        """Unique among active jobs: a repeat while one is active raises DuplicateBusinessKey."""
        self._business_key = validate_key("business key", key)
        return self

    def immediate(self) -> Self:
        """Wake workers as soon as the job is committed instead of at their next poll."""
        self._immediate = True
        return self

    def on_success(self, fn: Callable[..., Any] | str) -> Self:
        """Call ``fn(job)`` (a registered task, with the :class:`~flask_ratchet.job.Job`) in
        the worker once this job SUCCEEDED. A callback that raises is logged and changes
        nothing."""
        return self._callback("success", fn)

    def on_failure(self, fn: Callable[..., Any] | str) -> Self:
        """Call ``fn(job)`` in the worker once this job FAILED for good (retries spent or
        ``DoNotRetry``; not on cancel)."""
        return self._callback("failure", fn)

    def _callback(self, when: str, fn: Callable[..., Any] | str) -> Self:
        task = self._runtime.registry.for_submit(fn, self._runtime.config.allowed_modules)
        self._callbacks.setdefault(when, []).append(task.name)
        return self

    # -- chains and workflow branches (see flask_ratchet.api.chains) ------------------------

    def then(
        self, fn: Callable[..., Any] | str | JobBuilder, /, *args: Any, **kwargs: Any
    ) -> FlowBuilder:
        """Start a chain: ``fn(*args, **kwargs)`` runs once this job SUCCEEDED."""
        return self._flow().then(fn, *args, **kwargs)

    def then_on_success(
        self, fn: Callable[..., Any] | str | JobBuilder, /, *args: Any, **kwargs: Any
    ) -> FlowBuilder:
        """A branch that runs if this job SUCCEEDED (and is canceled otherwise)."""
        return self._flow().then_on_success(fn, *args, **kwargs)

    def then_on_failure(
        self, fn: Callable[..., Any] | str | JobBuilder, /, *args: Any, **kwargs: Any
    ) -> FlowBuilder:
        """A branch that runs if this job FAILED for good (and is canceled otherwise)."""
        return self._flow().then_on_failure(fn, *args, **kwargs)

    def when(
        self,
        predicate: Callable[[Any], bool] | str,
        fn: Callable[..., Any] | str | JobBuilder,
        /,
        *args: Any,
        **kwargs: Any,
    ) -> FlowBuilder:
        """A branch that runs if this job SUCCEEDED and ``predicate(result)`` is true."""
        return self._flow().when(predicate, fn, *args, **kwargs)

    def _flow(self) -> FlowBuilder:
        from .chains import FlowBuilder

        return FlowBuilder(self._runtime, self)

    def build(self) -> NewJob:
        """Return the validated job this builder describes, and mark the builder used."""
        limit = self._runtime.config.max_payload_bytes
        options = self._routed_options()
        params = options.params
        params_text = (
            payload.encode_value(f"the params of {self._task.name}", params, limit)
            if params
            else None
        )
        job_id = uuid7()
        text = self._payload
        if self._encrypt:  # the size limit was the clear text's
            keyring = self._runtime.keyring
            text = keyring.seal(text, job_id, "payload")
            if params_text is not None:
                params_text = keyring.seal(params_text, job_id, "params")
        self._submitted = True
        callbacks = json.dumps(self._callbacks) if self._callbacks else None
        return NewJob(
            job_id=job_id,
            task=self._task.name,
            payload=text,
            params=params_text,
            options=options,
            idempotency_key=self._idempotency_key,
            business_key=self._business_key,
            delay=self._delay,
            run_at=self._run_at,
            follow_up=callbacks is not None,
            callbacks=callbacks,
            expires_at=self._expires_at,
            signal=self._signal,
        )

    def build_linked(self, **links: Any) -> NewJob:
        """:meth:`build`, with the job linked to others (``job_type``, ``batch_id``, …) and
        marked so that its end is followed up."""
        return replace(self.build(), follow_up=True, **links)

    @property
    def scheduled(self) -> bool:
        """Whether the job was given a delay or a time to run at."""
        return self._delay != 0 or self._run_at is not None

    @property
    def idempotency_key(self) -> str | None:
        """The idempotency key set on this builder, if any."""
        return self._idempotency_key

    @property
    def wakes_workers(self) -> bool:
        """Whether submitting this job wakes workers: it is due now, urgent, or asked to."""
        due_now = self._delay == 0 and self._run_at is None
        return due_now or self._immediate or self._options.priority == Priority.CRITICAL

    def submit(self) -> JobHandle:
        """Write the job (joining the current transaction, see ``Ratchet.transaction``)."""
        return submit_jobs(self._runtime, [self])[0]


def make_builder(
    runtime: Runtime,
    target: Callable[..., Any] | str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    delay: float = 0.0,
    run_at: datetime | None = None,
) -> JobBuilder:
    """Check the task and encode its arguments; raise before anything is built if either is bad."""
    task = runtime.registry.for_submit(target, runtime.config.allowed_modules)
    text = payload.encode_arguments(task.name, args, kwargs, runtime.config.max_payload_bytes)
    return JobBuilder(runtime, task, text, delay=delay, run_at=run_at)


def replacement_builder(
    runtime: Runtime,
    old: Job,
    target: Callable[..., Any] | str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    delay: float,
    *,
    encrypt: bool = False,
) -> JobBuilder:
    """A builder for the job that replaces ``old`` (a :class:`~flask_ratchet.job.Job`, its
    columns opened).

    The new job keeps every option of the old one (:attr:`~flask_ratchet.job.Job.options`, its
    queue included), its deadline and its business key: it takes the old job's place; and it
    is encrypted if the old one was (``encrypt``).
    """
    builder = make_builder(runtime, target, args, kwargs, delay=delay)
    if encrypt:
        builder.with_encrypted_payload()
    builder._options = old.options
    builder.queue_chosen = True  # the old job's queue, not the routes'
    builder._expires_at = old.expires_at
    builder._business_key = old.business_key
    if old.status == JobStatus.WAITING and old.signal_key and old.signal_wait:
        builder.await_signal(old.signal_key, timeout=old.signal_wait)  # it waits in its place
    return builder


def submit_jobs(runtime: Runtime, builders: Sequence[JobBuilder]) -> list[JobHandle]:
    """Insert the builders' jobs atomically; return their handles in order."""
    jobs = [b.build() for b in builders]
    policy.stamp(runtime, jobs)
    urgent = any(b.wakes_workers for b in builders)
    outcome = runtime.write_jobs(
        lambda conn: runtime.store.jobs.insert_jobs(conn, jobs),
        wake=lambda _: urgent,
        own=lambda: runtime.store.single_statement(runtime.engine),
    )
    return [JobHandle(o.job_id, o.created) for o in outcome]
