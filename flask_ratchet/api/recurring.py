"""Recurring masters: declaring them (``@ratchet.recurring``), building them
(``ratchet.schedule_recurring()``), operating and reading them.

Declared masters are only remembered here; workers register them when they start (``init_app``
writes nothing and opens no connection). :func:`register_declared` does the same on demand, e.g.
from a deploy step. What a master is and when it fires: :mod:`flask_ratchet.recurring`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any, Self

from .. import payload
from ..context import required_arguments
from ..cron import CronError, interval_expression
from ..cron import normalize as cron_normalize
from ..cron import validate as cron_validate
from ..errors import ConfigError, InvalidOption
from ..ids import uuid7
from ..options import JobOptions, validate_key, validate_options
from ..payload import Unreadable
from ..recurring import Misfire, RecurringDefinition, RecurringJob, misfire_policy, opened
from ..registry import Task, TaskRegistry, check_registrable, default_name, has_top_level_name
from ..retry import retry_rules
from ..routes import routed
from ..runtime import Runtime
from ..store import Recurring
from ..store.types import NewJob
from . import policy
from .submit import OptionsBuilder


def schedule_of(cron: str | timedelta | None, every: timedelta | float | None = None) -> str:
    """The expression a master stores for a schedule given as ``cron`` (an expression, or a
    ``timedelta`` for an interval) or as ``every`` (an interval): exactly one of them.

    An interval is stored as ``@every 5s`` in the master's ``cron`` column, so that one firing
    path (and one schema) serves both kinds (see :mod:`flask_ratchet.cron.intervals`).

    :raises CronError: for both or neither, or for a bad interval.
    """
    if cron is None or every is not None:
        if cron is not None or every is None:
            raise CronError(
                "give a recurring job one schedule: a cron expression, or every=timedelta(...)"
            )
        return interval_expression(every)
    if isinstance(cron, timedelta):
        return interval_expression(cron)
    return cron


def declare(
    registry: TaskRegistry,
    definitions: dict[str, RecurringDefinition],
    cron: str,
    zone: str,
    name: str | None,
    master_id: str | None,
    misfire: Misfire | str,
    options: dict[str, Any],
) -> Callable[[Callable[..., Any]], Task]:
    """What ``@ratchet.recurring(...)`` registers a function with: it registers the function as a
    task, remembers its master in ``definitions`` and returns the task. Validates everything
    before it returns.

    :raises CronError: for a bad expression or zone, naming the field.
    """
    cron_validate(cron, zone)
    policy = misfire_policy(misfire)
    rules = retry_rules(options)
    defaults = JobOptions(**validate_options(**options))
    if master_id is not None:
        validate_key("recurring id", master_id)
    if name is not None:
        validate_key("recurring name", name)

    def decorate(func: Callable[..., Any]) -> Task:
        check_registrable(func, None)  # before its name is asked for
        _refuse_arguments(func)
        key = master_id or default_name(func)
        existing = definitions.get(key)
        if existing is not None and existing.task != default_name(func):
            raise ValueError(
                f"recurring id {key!r} is already declared for {existing.task}; "
                "give one of them another id="
            )
        task = registry.register(func, None, defaults, explicit=frozenset(options), retry=rules)
        definitions[key] = RecurringDefinition(
            id=key,
            name=name or key,
            task=task.name,
            cron=cron_normalize(cron),
            zone=zone,
            payload=payload.NO_ARGUMENTS,
            options=defaults,
            misfire=policy,
        )
        return task

    return decorate


def _refuse_arguments(func: Callable[..., Any]) -> None:
    """A declared recurring job is called with nothing (a ``JobContext`` is filled in)."""
    required = required_arguments(func)
    if required:
        raise TypeError(
            f"{default_name(func)} takes argument {required[0]!r}, but a declared recurring "
            "job is called with none; use ratchet.schedule_recurring(cron, zone, fn, *args) "
            "to pass arguments"
        )


def declared_masters(runtime: Runtime) -> list[RecurringDefinition]:
    """The declared masters as this app registers them: their children's options are their
    task's over this app's ``RATCHET_DEFAULT_*``, their queue routed by ``RATCHET_ROUTES``
    unless the task chose one, encrypted if the task or ``RATCHET_ENCRYPT_ALL`` says so
    (declaring them needed no app)."""
    config = runtime.config
    masters = []
    for definition in runtime.recurring_definitions.values():
        task = runtime.registry.get(definition.task)
        options = definition.options if task is None else task.options_over(config.job_defaults)
        if task is None or "queue" not in task.explicit:  # RATCHET_ROUTES, as at enqueue
            options = routed(config.routes, definition.task, options)
        sealed = config.encrypt_all or (task is not None and task.encrypt)
        if sealed and options.params:
            raise ConfigError(
                f"recurring job {definition.id} is encrypted, and its params would be stored "
                "in the clear with its options: remove params= from @ratchet.recurring"
            )
        masters.append(replace(definition, options=options, encrypt=sealed))
    return masters


def register_declared(runtime: Runtime) -> list[RecurringJob]:
    """Register every declared master now, all or nothing; ``RATCHET_ROUTES`` give the queue of
    the children of those that name none (they are declared before any app's config exists)."""
    store, keyring = runtime.store.recurring, runtime.keyring
    definitions = declared_masters(runtime)
    return runtime.run(
        lambda conn: [store.register(conn, d, keyring)[0] for d in definitions], atomic=True
    )


def pause(runtime: Runtime, recurring_id: str) -> bool:
    """ACTIVE → PAUSED. Pausing a paused master returns True."""
    return _change(runtime, recurring_id, Recurring.pause)


def resume(runtime: Runtime, recurring_id: str) -> bool:
    """PAUSED → ACTIVE, next at the first occurrence after now."""
    return _change(
        runtime, recurring_id, lambda store, conn, key: store.resume(conn, key, runtime.keyring)
    )


def cancel(runtime: Runtime, recurring_id: str) -> bool:
    """ACTIVE or PAUSED → CANCELED."""
    return _change(runtime, recurring_id, Recurring.cancel)


def run_now(runtime: Runtime, recurring_id: str) -> uuid.UUID | None:
    """Create one extra child of an ACTIVE or PAUSED master, due now: its id, or ``None`` if
    there is no such master."""
    key = validate_key("id", recurring_id)
    store = runtime.store.recurring
    who = None
    if policy.active(runtime) or runtime.config.principal is not None:
        master = get(runtime, key)
        if master is None or isinstance(master.options, Unreadable):
            return None  # no such master, or one that cannot be fired
        if isinstance(master.args, Unreadable) or isinstance(master.kwargs, Unreadable):
            return None
        call = payload.dumps({"args": master.args, "kwargs": master.kwargs})
        who = _may_create(runtime, master.task, call, master.options)
    return runtime.write_jobs(
        lambda conn: store.run_now(conn, key, runtime.keyring, principal=who),
        wake=lambda made: made is not None,
    )


def get(runtime: Runtime, recurring_id: str, *, decrypt: bool = True) -> RecurringJob | None:
    """A snapshot of one master (also a canceled one), or ``None``; its sealed arguments
    opened unless ``decrypt`` is false (the console's reads: it never shows them)."""
    key = validate_key("id", recurring_id)
    found = runtime.run(lambda conn: runtime.store.recurring.get(conn, key))
    return found if found is None or not decrypt else opened(found, runtime.keyring)


def list_all(
    runtime: Runtime, include_canceled: bool, *, decrypt: bool = True
) -> list[RecurringJob]:
    """Every master with its next fire time, by id (see :func:`get` for ``decrypt``)."""
    masters = runtime.run(lambda conn: runtime.store.recurring.list_all(conn, include_canceled))
    return [opened(m, runtime.keyring) for m in masters] if decrypt else masters


def _change(runtime: Runtime, recurring_id: str, op: Callable[[Recurring, Any, str], bool]) -> bool:
    key = validate_key("id", recurring_id)
    return runtime.run(lambda conn: op(runtime.store.recurring, conn, key))


class RecurringJobBuilder(OptionsBuilder):
    """A recurring schedule for one task, then :meth:`submit`. Returned by
    ``ratchet.schedule_recurring()``.

    >>> (ratchet.schedule_recurring("0 0 * * * ?", "UTC", hourly_report)
    ...     .with_max_retries(3).with_tags("reports").with_business_key("hourly-report")
    ...     .submit())
    """

    def __init__(
        self, runtime: Runtime, task: Task, payload_text: str, cron: str, zone: str
    ) -> None:
        super().__init__(runtime, task, payload_text)
        self._cron = cron
        self._zone = zone
        # A task registered under a name of its own (a closure, a callable object) is known by
        # that name: its qualified name is no name another process would agree on.
        self._id = default_name(task.func) if has_top_level_name(task.func) else task.name
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
            if self._encrypt:
                raise InvalidOption(
                    f"recurring job {self._id} is encrypted, and its params would be stored "
                    "in the clear: pass the values as arguments instead"
                )
            payload.encode_value(
                f"the params of {self._task.name}",
                self._options.params,
                self._runtime.config.max_payload_bytes,
            )
        self._submitted = True
        return RecurringDefinition(
            id=self._id,
            name=self._name or self._id,
            task=self._task.name,
            cron=self._cron,
            zone=self._zone,
            payload=self._payload,
            options=self._routed_options(),
            misfire=self._misfire,
            encrypt=self._encrypt,
        )

    def submit(self) -> RecurringJob:
        """Create or update the master (joining the current transaction, like a job) and
        return it. The same definition again changes nothing (see
        ``flask_ratchet.store.recurring.Recurring.register``)."""
        definition = self.build()
        _may_create(self._runtime, definition.task, definition.payload, definition.options)
        store, keyring = self._runtime.store.recurring, self._runtime.keyring
        return self._runtime.run(
            lambda conn: store.register(conn, definition, keyring)[0], atomic=True
        )


def make_recurring_builder(
    runtime: Runtime,
    cron: str | timedelta,
    zone: str,
    target: Callable[..., Any] | str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> RecurringJobBuilder:
    """Check the schedule (a cron expression, or a ``timedelta`` for an interval), the task and
    its arguments; raise before anything is built."""
    expr = schedule_of(cron)
    cron_validate(expr, zone)
    task = runtime.registry.for_submit(target, runtime.config.allowed_modules)
    text = payload.encode_arguments(task.name, args, kwargs, runtime.config.max_payload_bytes)
    return RecurringJobBuilder(runtime, task, text, cron_normalize(expr), zone)


def _may_create(runtime: Runtime, task: str, call: str, options: JobOptions) -> str | None:
    """Ask the policy (:mod:`.policy`) whether the principal may create a child of a master
    that runs ``task`` with the clear arguments ``call`` and ``options``; who is asking.

    :raises JobNotAuthorized: if not; nothing is written.
    """
    params = payload.dumps(options.params) if options.params else None
    child = NewJob(uuid7(), task, call, params, options)
    policy.stamp(runtime, [child])
    return child.principal
