"""What ``@ratchet.task`` returns: the function, still callable as itself, with typed ways to
enqueue it.

::

    @ratchet.task(queue="mail")
    def send_welcome(user_id: int, *, locale: str = "en") -> None: ...

    send_welcome(3)                                  # a plain call, in this process
    send_welcome.enqueue(3, locale="de")             # -> JobHandle: submitted
    send_welcome.delay(3)                            # the same, under Celery's name
    send_welcome.schedule(timedelta(hours=1), 3)     # -> JobHandle: due in an hour
    send_welcome.builder(3).with_priority(Priority.HIGH).submit()   # options first

The methods take the function's own parameters (``ParamSpec``), so a type checker refuses
``send_welcome.enqueue("three")`` or a missing argument at the call site, as it would a call.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, Generic, ParamSpec, TypedDict, TypeVar

from ..breaker import BreakerSettings
from ..errors import InvalidOption
from ..options import Backoff, JobOptions, Priority, due_time, seconds, validate_options
from ..registry import Task, TaskRegistry
from ..resources import checked_rate
from ..retry import retry_rules
from ..runtime import Runtime
from ..runtime import current as current_runtime
from .handles import JobHandle
from .submit import JobBuilder, make_builder

P = ParamSpec("P")
R = TypeVar("R")


class TaskFunction(Generic[P, R]):
    """A registered task: call it as the function, or enqueue it as a job.

    ``enqueue`` and ``schedule`` submit at once (joining the current transaction, like
    :meth:`JobBuilder.submit`); ``builder`` returns the :class:`JobBuilder` to set options on
    first. ``ratchet.enqueue(task, ...)`` still works and is the same job.
    """

    __wrapped__: Callable[P, R]
    #: Marks a task object standing for ``__wrapped__`` (read by the registry, a layer below).
    __ratchet_task__ = True

    def __init__(self, func: Callable[P, R], task: Task, registry: TaskRegistry) -> None:
        functools.update_wrapper(self, func)
        self._task = task
        self._registry = registry
        registry.register_handle(self, task)

    @property
    def name(self) -> str:
        """The name jobs of this task are stored under (default ``module:qualname``)."""
        return self._task.name

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.__wrapped__(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<task {self._task.name}>"

    def builder(self, *args: P.args, **kwargs: P.kwargs) -> JobBuilder:
        """A job of this task with these arguments, to set options on; nothing is written
        until ``submit()``."""
        return make_builder(self._runtime(), self._task.name, args, kwargs)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle:
        """Submit a job of this task, due now, with the task's default options."""
        return self.builder(*args, **kwargs).submit()

    def delay(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle:
        """:meth:`enqueue` under Celery's name (``task.delay(x)``), so that code moved from
        Celery keeps its calls: a job due now, with the task's default options."""
        return self.enqueue(*args, **kwargs)

    def schedule(self, delay: timedelta | float, /, *args: P.args, **kwargs: P.kwargs) -> JobHandle:
        """Submit a job of this task due ``delay`` (a ``timedelta`` or seconds) after now.

        :raises InvalidOption: for a negative or too long ``delay``.
        """
        wait = seconds("delay", delay)
        return make_builder(self._runtime(), self._task.name, args, kwargs, delay=wait).submit()

    def schedule_at(self, when: datetime, /, *args: P.args, **kwargs: P.kwargs) -> JobHandle:
        """Submit a job of this task due at ``when`` (an aware datetime).

        :raises InvalidOption: for a naive datetime or one out of range.
        """
        run_at = due_time("schedule_at()", when)
        return make_builder(self._runtime(), self._task.name, args, kwargs, run_at=run_at).submit()

    def _runtime(self) -> Runtime:
        return current_runtime(self._registry, f"task {self._task.name!r}")


class TaskOptions(TypedDict, total=False):
    """What ``@ratchet.task(...)`` takes. Job options (``queue`` … ``tags``) are each job's
    defaults, over the app's ``RATCHET_DEFAULT_*``; ``service`` and ``circuit_breaker`` give
    the task a breaker (shared by the tasks of one ``service``, default: the task's name); the
    retry rules (``retry_on``, ``dont_retry_on``, ``max_backoff``, ``jitter``: see
    :class:`~flask_ratchet.retry.RetryRules`) stay with the task in each process's registry::

        @ratchet.task(retry_on=(ConnectionError, TimeoutError), max_backoff=300, jitter=True)
        def sync(account_id: int) -> None: ...
    """

    name: str | None
    queue: str
    priority: Priority | int
    max_retries: int
    backoff: Backoff | str
    backoff_base: timedelta | float
    timeout: timedelta | float | None
    expires: timedelta | float | None
    resource: str | None
    tags: Iterable[str]
    service: str | None
    circuit_breaker: BreakerSettings | str | Mapping[str, Any] | None
    retry_on: type[BaseException] | tuple[type[BaseException], ...] | None
    dont_retry_on: type[BaseException] | tuple[type[BaseException], ...]
    max_backoff: timedelta | float | None
    jitter: bool
    #: At most so many of its jobs start per period across the cluster (``"10/s"``, ``"100/m"``,
    #: ``(count, period)``): a resource named after the task, with that rate.
    rate_limit: str | tuple[int, timedelta | float] | None
    #: Its jobs' arguments, params and results are encrypted in the database (needs
    #: ``RATCHET_ENCRYPTION_KEYS``; see :mod:`flask_ratchet.sealing`).
    encrypt: bool


def task_decorator(
    registry: TaskRegistry, given: Mapping[str, Any]
) -> Callable[[Callable[P, R]], TaskFunction[P, R]]:
    """What ``@ratchet.task(**given)`` applies: every option checked now, before a function is
    seen (:class:`TaskOptions`).

    :raises InvalidOption: naming the option and what it takes.
    """
    options = dict(given)
    name = options.pop("name", None)
    service = options.pop("service", None)
    breaker = options.pop("circuit_breaker", None)
    encrypt = options.pop("encrypt", False)
    if not isinstance(encrypt, bool):
        raise InvalidOption(f"encrypt must be True or False, got {encrypt!r}")
    given_rate = options.pop("rate_limit", None)
    rate = None if given_rate is None else checked_rate(name or "of the task", given_rate)
    rules = retry_rules(options)
    defaults = JobOptions(**validate_options(**options))
    explicit = frozenset(options)  # the rest: the app's RATCHET_DEFAULT_* when a job is made

    def register(func: Callable[P, R]) -> TaskFunction[P, R]:
        return task_function(
            registry,
            func,
            lambda plain: registry.register(
                plain,
                name,
                defaults,
                explicit=explicit,
                retry=rules,
                service=service,
                circuit_breaker=breaker,
                rate=rate,
                encrypt=encrypt,
            ),
        )

    return register


def task_function(
    registry: TaskRegistry, func: Callable[P, R], register: Callable[[Callable[..., Any]], Task]
) -> TaskFunction[P, R]:
    """What a task decorator returns: ``register`` is given the plain function (the one behind
    ``func`` if ``func`` is already a task object, when decorators are stacked or another
    ``Ratchet`` object registered it first, which then stands for the task here too)."""
    plain = func.__wrapped__ if isinstance(func, TaskFunction) else func
    task = register(plain)
    if func is not plain:
        registry.register_handle(func, task)
    return TaskFunction(plain, task, registry)
