"""Builders that validate a submission and hand it to the store.

Everything that can be wrong with a job (an unregistered function, arguments that are not JSON, an
oversized payload, a bad option) is refused when the builder is made or an option is set: before
anything is written.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from . import payload
from .ids import uuid7
from .job import JobHandle
from .options import Backoff, JobOptions, Priority, validate_key
from .registry import Task
from .store.base import NewJob

if TYPE_CHECKING:
    from .extension import RatchetState

log = logging.getLogger("flask_ratchet")


class JobBuilder:
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
        self._state = state
        self._task = task
        self._payload = payload_text
        self._delay = delay
        self._run_at = run_at
        self._options = task.options
        self._idempotency_key: str | None = None
        self._business_key: str | None = None
        self._immediate = False
        self._submitted = False

    def __repr__(self) -> str:
        return f"<JobBuilder {self._task.name}>"

    def __del__(self) -> None:
        if not getattr(self, "_submitted", True):
            log.warning(
                "a job of task %s was built but never submitted: call .submit()", self._task.name
            )

    @property
    def task_name(self) -> str:
        """The name of the task this builder will enqueue."""
        return self._task.name

    def with_priority(self, priority: Priority | int) -> JobBuilder:
        """Claim order: ``Priority.LOWEST`` … ``Priority.CRITICAL`` (which also wakes workers)."""
        self._options = self._options.merged(priority=priority)
        return self

    def with_max_retries(self, max_retries: int) -> JobBuilder:
        """Retries after the first run: ``n`` allows ``n + 1`` runs in all."""
        self._options = self._options.merged(max_retries=max_retries)
        return self

    def with_backoff(
        self, backoff: Backoff | str, base: timedelta | float | None = None
    ) -> JobBuilder:
        """How long to wait between attempts; ``base`` is the first wait."""
        changes: dict[str, Any] = {"backoff": backoff}
        if base is not None:
            changes["backoff_base"] = base
        self._options = self._options.merged(**changes)
        return self

    def with_timeout(self, timeout: timedelta | float) -> JobBuilder:
        """Fail an attempt that runs longer than this."""
        self._options = self._options.merged(timeout=timeout)
        return self

    def with_tags(self, *tags: str) -> JobBuilder:
        """Add tags (searchable in ``find_jobs`` and the console)."""
        self._options = self._options.merged(tags=(*self._options.tags, *tags))
        return self

    def with_param(self, key: str, value: Any) -> JobBuilder:
        """Set one JobContext parameter (JSON)."""
        self._options = self._options.merged(params={**self._options.params, key: value})
        return self

    def with_resource(self, name: str) -> JobBuilder:
        """Take a permit of the named resource before running."""
        self._options = self._options.merged(resource=name)
        return self

    def with_idempotency_key(self, key: str) -> JobBuilder:
        """Globally unique forever: a repeat returns the original job's handle."""
        self._idempotency_key = validate_key("idempotency key", key)
        return self

    def with_business_key(self, key: str) -> JobBuilder:
        """Unique among active jobs: a repeat while one is active raises DuplicateBusinessKey."""
        self._business_key = validate_key("business key", key)
        return self

    def immediate(self) -> JobBuilder:
        """Wake workers as soon as the job is committed instead of at their next poll."""
        self._immediate = True
        return self

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
        )

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
