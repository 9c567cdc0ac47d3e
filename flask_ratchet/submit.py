"""Builders that validate a submission and hand it to the store.

Everything that can be wrong with a job (an unregistered function, arguments that are not JSON, an
oversized payload, a bad option) is refused when the builder is made or an option is set: before
anything is written.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Self

from . import payload
from .cron import normalize as cron_normalize
from .cron import validate as cron_validate
from .ids import uuid7
from .job import JobHandle
from .options import Backoff, JobOptions, Priority, validate_key
from .recurring import Misfire, RecurringDefinition, RecurringJob, misfire_policy
from .registry import Task, default_name
from .store.base import NewJob
from .store.recurring import RecurringStore

if TYPE_CHECKING:
    from .chain import FlowBuilder
    from .extension import RatchetState

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

    def with_tags(self, *tags: str) -> Self:
        """Add tags (searchable in ``find_jobs`` and the console)."""
        return self._merge(tags=(*self._tags(), *tags))

    def with_param(self, key: str, value: Any) -> Self:
        """Set one JobContext parameter (JSON)."""
        return self._merge(params={**self._params(), key: value})

    def with_resource(self, name: str) -> Self:
        """Take a permit of the named resource before running."""
        return self._merge(resource=name)


class _OptionsBuilder(OptionSetters):
    """Options of a job (or of a recurring master's children) over its task's defaults, and the
    warning for a builder that was never submitted."""

    def __init__(self, state: RatchetState, task: Task, payload_text: str) -> None:
        self._state = state
        self._task = task
        self._payload = payload_text
        self._options = task.options
        self._submitted = False

    def _unsubmitted(self) -> str:
        """What was built and never submitted, for the warning."""
        raise NotImplementedError

    def __del__(self) -> None:
        if not getattr(self, "_submitted", True):
            log.warning("%s was built but never submitted: call .submit()", self._unsubmitted())

    def _merge(self, **changes: Any) -> Self:
        self._options = self._options.merged(**changes)
        return self

    def _tags(self) -> tuple[str, ...]:
        return self._options.tags

    def _params(self) -> dict[str, Any]:
        return self._options.params


class JobBuilder(_OptionsBuilder):
    """Options for one job, then :meth:`submit`. Returned by ``ratchet.enqueue()`` and friends.

    >>> ratchet.enqueue(charge, 42).with_priority(Priority.HIGH).with_max_retries(5).submit()
    """

    def __init__(
        self,
        state: RatchetState,
        task: Task,
        payload_text: str,
        *,
        delay: float = 0.0,
        run_at: datetime | None = None,
    ) -> None:
        super().__init__(state, task, payload_text)
        self._delay = delay
        self._run_at = run_at
        self._idempotency_key: str | None = None
        self._business_key: str | None = None
        self._immediate = False
        self._callbacks: dict[str, list[str]] = {}

    def __repr__(self) -> str:
        return f"<JobBuilder {self._task.name}>"

    def _unsubmitted(self) -> str:
        return f"a job of task {self._task.name}"

    @property
    def task_name(self) -> str:
        """The name of the task this builder will enqueue."""
        return self._task.name

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
        task = self._state.ratchet.registry.for_submit(fn, self._state.config.allowed_modules)
        self._callbacks.setdefault(when, []).append(task.name)
        return self

    # -- chains and workflow branches (see flask_ratchet.chain) --------------------------------

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
        from .chain import FlowBuilder

        return FlowBuilder(self._state, self)

    def build(self) -> NewJob:
        """Return the validated job this builder describes, and mark the builder used."""
        limit = self._state.config.max_payload_bytes
        params = self._options.params
        params_text = (
            payload.encode_value(f"the params of {self._task.name}", params, limit)
            if params
            else None
        )
        self._submitted = True
        callbacks = json.dumps(self._callbacks) if self._callbacks else None
        return NewJob(
            job_id=uuid7(),
            task=self._task.name,
            payload=self._payload,
            params=params_text,
            options=self._options,
            idempotency_key=self._idempotency_key,
            business_key=self._business_key,
            delay=self._delay,
            run_at=self._run_at,
            follow_up=callbacks is not None,
            callbacks=callbacks,
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
        return self._state.submit([self])[0]


def make_builder(
    state: RatchetState,
    target: Callable[..., Any] | str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    delay: float = 0.0,
    run_at: datetime | None = None,
) -> JobBuilder:
    """Check the task and encode its arguments; raise before anything is built if either is bad."""
    task = state.ratchet.registry.for_submit(target, state.config.allowed_modules)
    text = payload.encode_arguments(task.name, args, kwargs, state.config.max_payload_bytes)
    return JobBuilder(state, task, text, delay=delay, run_at=run_at)


def replacement_builder(
    state: RatchetState,
    old: Any,
    target: Callable[..., Any] | str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    delay: float,
) -> JobBuilder:
    """A builder for the job that replaces ``old`` (a :class:`~flask_ratchet.job.Job`).

    The new job keeps the old one's options and business key: it takes the old job's place.
    """
    builder = make_builder(state, target, args, kwargs, delay=delay)
    builder._options = JobOptions(
        priority=old.priority,
        max_retries=old.max_retries,
        backoff=old.backoff,
        backoff_base=old.backoff_base,
        timeout=old.timeout,
        resource=old.resource,
        tags=old.tags,
        params=old.params,
    )
    builder._business_key = old.business_key
    return builder


class RecurringJobBuilder(_OptionsBuilder):
    """A recurring schedule for one task, then :meth:`submit`. Returned by
    ``ratchet.schedule_recurring()``.

    >>> (ratchet.schedule_recurring("0 0 * * * ?", "UTC", hourly_report)
    ...     .with_max_retries(3).with_tags("reports").with_business_key("hourly-report")
    ...     .submit())
    """

    def __init__(
        self, state: RatchetState, task: Task, payload_text: str, cron: str, zone: str
    ) -> None:
        super().__init__(state, task, payload_text)
        self._cron = cron
        self._zone = zone
        self._id = default_name(task.func)
        self._name: str | None = None
        self._misfire = Misfire.FIRE_ONCE

    def __repr__(self) -> str:
        return f"<RecurringJobBuilder {self._id} {self._cron!r} {self._zone}>"

    def _unsubmitted(self) -> str:
        return f"recurring job {self._id}"

    def with_options(self, **options: Any) -> Self:
        """Set several child-job options at once: ``priority``, ``max_retries``, ``backoff``,
        ``backoff_base``, ``timeout``, ``resource``, ``tags``, ``params``."""
        return self._merge(**options)

    def with_business_key(self, key: str) -> Self:
        """The master's id (default ``module:qualname``): exactly one master exists per id, and
        submitting the same id again updates it."""
        self._id = validate_key("recurring id", key)
        return self

    def with_name(self, name: str) -> Self:
        """A display name (default: the id)."""
        self._name = validate_key("recurring name", name)
        return self

    def with_misfire_policy(self, policy: Misfire | str) -> Self:
        """What to do with occurrences missed while no worker ran (default FIRE_ONCE)."""
        self._misfire = misfire_policy(policy)
        return self

    def build(self) -> RecurringDefinition:
        """Return the validated master this builder describes, and mark the builder used."""
        if self._options.params:
            payload.encode_value(
                f"the params of {self._task.name}",
                self._options.params,
                self._state.config.max_payload_bytes,
            )
        self._submitted = True
        return RecurringDefinition(
            id=self._id,
            name=self._name or self._id,
            task=self._task.name,
            cron=self._cron,
            zone=self._zone,
            payload=self._payload,
            options=self._options,
            misfire=self._misfire,
        )

    def submit(self) -> RecurringJob:
        """Create or update the master (joining the current transaction, like a job) and
        return it. The same definition again changes nothing; see ``RecurringStore.register``."""
        definition = self.build()
        with self._state.connection(atomic=True) as conn:
            master, _ = RecurringStore(self._state.store).register(conn, definition)
        return master


def make_recurring_builder(
    state: RatchetState,
    cron: str,
    zone: str,
    target: Callable[..., Any] | str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> RecurringJobBuilder:
    """Check the schedule, the task and its arguments; raise before anything is built."""
    cron_validate(cron, zone)
    task = state.ratchet.registry.for_submit(target, state.config.allowed_modules)
    text = payload.encode_arguments(task.name, args, kwargs, state.config.max_payload_bytes)
    return RecurringJobBuilder(state, task, text, cron_normalize(cron), zone)
