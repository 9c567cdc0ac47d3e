"""The task registry and the allow-list: which functions may be enqueued and run.

A function runs only if it was registered with ``@ratchet.task`` or is a function defined at the
top level of a module under a ``RATCHET_ALLOWED_MODULES`` prefix (not one such a module imported).
Jobs store the task's name, never code, and the worker resolves the name through this registry
again before running anything.

Registering is an explicit allow, so ``@ratchet.task`` takes any callable: a function wrapped by
the app's own decorator (a closure over the original, ``functools.wraps``), a ``partial``, a
callable object. The worker finds it by its registered name, never by importing a path, so what
it needs is a name that is the same in every process: ``module:qualname`` when the qualified
name is a top-level name, else one given with ``name=``. The allow-list keeps its stricter rules
for what was never registered (:func:`check_importable`).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from .breaker import BreakerSettings, breaker_settings
from .errors import InvalidOption, TaskNotAllowed, UnknownTask
from .options import RESOURCE_MAX_LENGTH, STANDARD_OPTIONS, JobOptions, validate_text
from .resources import Rate
from .retry import NO_RULES, RetryRules

NAME_MAX_LENGTH = 255


@dataclass(frozen=True, slots=True)
class Task:
    """A function that may run as a job, under a stable name, with its default options.

    ``service`` names the circuit breaker the task shares with others (default: its own name);
    ``circuit_breaker`` gives it one (see ``flask_ratchet.breaker``). ``explicit`` names the
    options the task's decorator set: the others come from the app's ``RATCHET_DEFAULT_*``
    (``options_over``). ``retry`` holds its retry rules (``retry_on``, ``dont_retry_on``,
    ``max_backoff``, ``jitter``): code, kept here in every process that imports the task, never
    in a job's row.
    """

    name: str
    func: Callable[..., Any]
    options: JobOptions
    service: str | None = None
    circuit_breaker: BreakerSettings | None = None
    explicit: frozenset[str] = frozenset()
    retry: RetryRules = NO_RULES
    #: ``rate_limit``: the rate of the resource named after the task, which its jobs name.
    rate: Rate | None = None
    #: ``encrypt=True``: its jobs' arguments, params and results are sealed.
    encrypt: bool = False

    def options_over(self, defaults: JobOptions) -> JobOptions:
        """The options a job of this task starts from, in an app whose defaults are
        ``defaults`` (``RatchetConfig.job_defaults``): what the task set, over them."""
        if defaults is STANDARD_OPTIONS:  # nothing configured: the task's options as they are
            return self.options
        return replace(defaults, **{name: getattr(self.options, name) for name in self.explicit})

    @property
    def service_name(self) -> str:
        """The service whose circuit breaker guards this task: ``service``, or its name."""
        return self.service or self.name


@functools.lru_cache(maxsize=1024)
def positional_names(func: Callable[..., Any]) -> tuple[str, ...]:
    """The names of ``func``'s positional parameters, in order: what a job's ``args`` bind to
    (empty for a function whose signature cannot be read)."""
    try:
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return ()
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return tuple(p.name for p in parameters if p.kind in kinds)


def default_name(func: Callable[..., Any]) -> str:
    """Return ``module:qualname``, the name a task gets unless it is given one."""
    return f"{func.__module__}:{func.__qualname__}"


def _origin(func: Callable[..., Any]) -> str:
    """Where a registered callable comes from, for telling two of them apart (a callable object
    or a ``partial`` has no qualified name of its own)."""
    module = getattr(func, "__module__", None)
    qualname = getattr(func, "__qualname__", None)
    if isinstance(module, str) and isinstance(qualname, str):
        return f"{module}:{qualname}"
    return repr(func)


def has_top_level_name(func: Callable[..., Any]) -> bool:
    """Whether ``func`` names itself as a top-level object of its module (``send_welcome``, not
    ``make.<locals>.inner``, ``<lambda>`` or ``Service.method``): then ``module:qualname`` is a
    name every process that imports the module agrees on. A function wrapped with
    ``functools.wraps`` carries the name of the function it wraps."""
    module = getattr(func, "__module__", None)
    qualname = getattr(func, "__qualname__", None)
    return isinstance(module, str) and isinstance(qualname, str) and qualname.isidentifier()


def check_registrable(func: Callable[..., Any], name: str | None) -> None:
    """Refuse what ``@ratchet.task`` cannot register: what is not callable, or hashable (the
    registry looks tasks up by their function), or has no stable name and was given none.

    :raises TaskNotAllowed: saying what to do.
    """
    if not callable(func):
        raise TaskNotAllowed(f"{func!r} is not callable; @ratchet.task registers functions")
    try:
        hash(func)
    except TypeError:
        raise TaskNotAllowed(
            f"{func!r} cannot be registered: it is not hashable (register a function)"
        ) from None
    if name is None and not has_top_level_name(func):
        what = getattr(func, "__qualname__", None) or repr(func)
        raise TaskNotAllowed(
            f"{what} has no top-level name (a lambda, nested function, closure, method or "
            "callable object), so a worker could not tell it from another by "
            "module:qualname; give it a name that is the same in every process: "
            "@ratchet.task(name='billing.charge')"
        )


def module_allowed(module: str, prefixes: tuple[str, ...]) -> bool:
    """Return whether ``module`` is one of ``prefixes`` or inside one of them."""
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def check_importable(func: Callable[..., Any]) -> None:
    """Refuse, for a function that was never registered, what a worker could never find again
    by importing its name: lambdas, closures, methods."""
    what = getattr(func, "__qualname__", repr(func))
    if not inspect.isfunction(func):
        raise TaskNotAllowed(
            f"{what!r} is not a plain function; enqueue a module-level function "
            "decorated with @ratchet.task"
        )
    if func.__name__ == "<lambda>":
        raise TaskNotAllowed(
            "lambdas cannot be enqueued: a worker cannot import them by name. Define a "
            "module-level function and decorate it with @ratchet.task"
        )
    if "<locals>" in func.__qualname__ or func.__closure__:
        raise TaskNotAllowed(
            f"{func.__qualname__} is a nested function or closure: a worker cannot import it "
            "by name. Move it to module level and decorate it with @ratchet.task"
        )


class TaskRegistry:
    """Maps task names and functions to :class:`Task` entries. Thread-safe."""

    def __init__(self) -> None:
        self._by_name: dict[str, Task] = {}
        self._by_func: dict[object, Task] = {}  # functions, and the handles standing for them
        self._lock = threading.Lock()

    def register(
        self,
        func: Callable[..., Any],
        name: str | None,
        options: JobOptions,
        *,
        explicit: frozenset[str] = frozenset(),
        retry: RetryRules = NO_RULES,
        service: str | None = None,
        circuit_breaker: BreakerSettings | str | Mapping[str, Any] | None = None,
        rate: Rate | None = None,
        encrypt: bool = False,
    ) -> Task:
        """Register ``func`` under ``name`` (default ``module:qualname``), with ``options``, of
        which the decorator set those ``explicit`` names (the others are the app's defaults).

        ``circuit_breaker`` is a preset name (``"default"``, ``"fast"``, ``"critical"``,
        ``"external-api"``), a :class:`~flask_ratchet.breaker.BreakerSettings` or a dict of its
        fields; ``service`` lets tasks share one breaker.

        :raises TaskNotAllowed: for what cannot be registered (see :func:`check_registrable`).
        :raises InvalidOption: for a bad name or service (see ``options.validate_text``).
        :raises ValueError: for a bad breaker (naming the presets).
        """
        check_registrable(func, name)
        name = validate_text("task name", name or default_name(func), NAME_MAX_LENGTH)
        if service is not None:
            validate_text("service", service, NAME_MAX_LENGTH)
        breaker = None if circuit_breaker is None else breaker_settings(circuit_breaker)
        if rate is not None:
            if options.resource is not None:
                raise InvalidOption(
                    f"task {name!r} takes resource= or rate_limit=, not both: give the rate to "
                    f"the resource (configure_resource({options.resource!r}, rate=...))"
                )
            validate_text("a rate-limited task's name", name, RESOURCE_MAX_LENGTH)
            options = replace(options, resource=name)
            explicit |= {"resource"}
        with self._lock:
            existing = self._by_name.get(name)
            # The same origin again is the same task (a module imported twice, a reload).
            if existing is not None and _origin(existing.func) != _origin(func):
                raise ValueError(
                    f"task name {name!r} is already used by {_origin(existing.func)}; "
                    "give one of them another name="
                )
            task = Task(name, func, options, service, breaker, explicit, retry, rate, encrypt)
            self._by_name[name] = task
            self._by_func[func] = task
        return task

    def register_handle(self, handle: object, task: Task) -> None:
        """Let ``handle`` (what ``@ratchet.task`` returned for ``task``) stand for the task
        wherever a function is accepted (``ratchet.enqueue(handle, ...)``, ``on_success``)."""
        with self._lock:
            self._by_func[handle] = task

    def __iter__(self) -> Iterator[Task]:
        return iter(list(self._by_name.values()))

    def get(self, name: str) -> Task | None:
        """Return the registered task called ``name``, if any."""
        return self._by_name.get(name)

    def parameter_names(self, name: object) -> tuple[str, ...]:
        """What a job of the task called ``name`` binds its ``args`` to (empty for a task not
        registered in this process, or a stored name that is not text)."""
        task = self._by_name.get(name) if isinstance(name, str) else None
        return () if task is None else positional_names(task.func)

    def for_submit(self, target: Callable[..., Any] | str, allowed: tuple[str, ...]) -> Task:
        """Return the task to enqueue for a function or a registered name.

        :raises TaskNotAllowed: with what to do about it.
        """
        if isinstance(target, str):
            task = self._by_name.get(target)
            if task is None:
                raise TaskNotAllowed(
                    f"no task is registered as {target!r}; decorate the function with "
                    "@ratchet.task (and import its module before enqueueing)"
                )
            return task
        task = self._by_func.get(target)
        if task is not None:
            return task
        func: Callable[..., Any] = _plain(target)  # another Ratchet's task: its function
        check_importable(func)
        module, qualname = func.__module__, func.__qualname__
        if not module_allowed(module, allowed):
            raise TaskNotAllowed(
                f"{module}:{qualname} is not a registered task; decorate it with @ratchet.task "
                f"or add {module!r} to RATCHET_ALLOWED_MODULES"
            )
        name = default_name(func)
        if _allowed_function(module, qualname, allowed) is not func:
            raise TaskNotAllowed(
                f"{name} cannot be found again by name in its module; enqueue a function "
                "defined at the top level of its module"
            )
        return Task(validate_text("task name", name, NAME_MAX_LENGTH), func, JobOptions())

    def for_run(self, name: str, allowed: tuple[str, ...]) -> Task:
        """Return the task a stored job names, re-checking the allow-list.

        :raises UnknownTask: if this worker does not know the name: not registered, and no
            function of that name is defined in an allowed module it can import.
        :raises TaskNotAllowed: if the name reaches something that must not run (what an
            allowed module imports, a path through an object).
        """
        task = self._by_name.get(name)
        if task is not None:
            return task
        module, _, qualname = name.partition(":")
        if not qualname or not module_allowed(module, allowed):
            raise UnknownTask(
                f"task {name!r} is not registered in this worker and its module is not in "
                "RATCHET_ALLOWED_MODULES; import the module that defines it in the worker's app"
            )
        func = _allowed_function(module, qualname, allowed)
        task = self._by_name.get(name)  # importing the module may have registered it
        if task is not None:
            return task
        if func is None:
            raise TaskNotAllowed(
                f"task {name!r} names no function defined at the top level of module "
                f"{module!r}; only such functions run from RATCHET_ALLOWED_MODULES"
            )
        return Task(name, func, JobOptions())


def _allowed_function(module: str, name: str, allowed: tuple[str, ...]) -> Any:
    """The function ``module.name`` if it may run under the allow-list, else ``None``.

    Only a plain function *defined* in an allowed module runs: a top-level attribute (never a
    path through another module, class or object, such as ``jobs:os.system``), whose own
    ``__module__`` is allowed too, so that what a module merely imported (``from subprocess
    import run``) stays out of reach of whoever can write a job row.

    :raises UnknownTask: if the module cannot be imported, or defines nothing of that name.
    """
    if not name.isidentifier():
        return None
    try:
        namespace = importlib.import_module(module)
    except Exception as exc:  # whatever an import raises, nothing of the module may run
        raise UnknownTask(f"module {module!r} cannot be imported here: {exc}") from None
    if name not in vars(namespace):
        raise UnknownTask(f"module {module!r} has no {name!r} here")
    func = _plain(vars(namespace).get(name))
    if (
        not inspect.isfunction(func)
        or func.__qualname__ != name  # an alias, or a function made elsewhere and bound here
        or not module_allowed(func.__module__, allowed)
    ):
        return None
    return func


def _plain(candidate: Any) -> Any:
    """The function behind a task object (what ``@ratchet.task`` leaves in a module), else
    ``candidate`` itself."""
    if getattr(type(candidate), "__ratchet_task__", False):
        return candidate.__wrapped__
    return candidate
