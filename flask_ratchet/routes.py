"""Routing jobs to queues by task name, without touching every task: ``RATCHET_ROUTES``. Pure.

::

    app.config["RATCHET_ROUTES"] = {"myapp.mail:*": "mail", "myapp.reports.*": "reports"}
    app.config["RATCHET_ROUTES"] = lambda task: "slow" if task.endswith("_export") else None
    app.config["RATCHET_ROUTES"] = [{"billing.*": "billing"}, route_by_tenant]  # tried in order

A rule is a mapping of task-name globs (``fnmatch``'s ``*``, ``?`` and ``[…]``, case-sensitive,
matched against the task's registered name, ``module:qualname`` unless it was given a
``name=``) to queue names, tried in their order, or a callable ``(task_name) -> queue | None``
(``None``: no opinion). Several rules in a list are tried in order; the first queue wins.

Routes apply at enqueue, to a job whose queue nothing chose: a queue set on the job
(``with_queue()``, a batch's or a chain's ``with_queue()``) or on its task (``@ratchet.task(
queue="mail")``) always wins, as Celery's explicit ``queue=`` wins over its routes; routes win
over ``RATCHET_DEFAULT_QUEUE``, which is for the jobs no route names.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fnmatch import translate
from typing import Any

from .errors import ConfigError, InvalidOption
from .options import JobOptions, shown, validate_queue

Router = Callable[[str], str | None]


@dataclass(frozen=True, slots=True)
class GlobRoutes:
    """One mapping of globs to queues, compiled: the first pattern that matches wins."""

    patterns: tuple[tuple[str, re.Pattern[str], str], ...]

    def __call__(self, task: str) -> str | None:
        for _, pattern, queue in self.patterns:
            if pattern.match(task):
                return queue
        return None


@dataclass(frozen=True, slots=True)
class Routes:
    """The rules of ``RATCHET_ROUTES``, in the order they are tried."""

    rules: tuple[GlobRoutes | Router, ...]

    def queue_for(self, task: str) -> str | None:
        """The queue the first rule with an opinion gives ``task``, or ``None``.

        :raises InvalidOption: if a callable rule gives something that is not a queue name.
        """
        for rule in self.rules:
            queue = rule(task)
            if queue is None:
                continue
            if isinstance(rule, GlobRoutes):
                return queue  # checked when the config was read
            try:
                return validate_queue(queue)
            except InvalidOption as exc:
                raise InvalidOption(
                    f"RATCHET_ROUTES: {_name(rule)} gave task {task!r} {shown(queue)}, which is "
                    f"no queue name ({exc}); return a queue name or None"
                ) from None
        return None


def routed(routes: Routes | None, task: str, options: JobOptions) -> JobOptions:
    """``options`` with the queue ``routes`` give ``task``, if they give one.

    For a job whose queue nothing chose: the caller knows whether the job (``with_queue``, its
    batch's or chain's) or its task (``queue=`` in its decorator, ``Task.explicit``) did, and
    then does not call this. Routes take precedence over ``RATCHET_DEFAULT_QUEUE``.
    """
    if routes is None:
        return options
    queue = routes.queue_for(task)
    if queue is None or queue == options.queue:
        return options
    return dataclasses.replace(options, queue=queue)


def routes_setting(key: str, value: Any) -> Routes | None:
    """Read ``RATCHET_ROUTES``: a mapping of globs to queues, a callable, or a list of them.

    :raises ConfigError: naming ``key`` and the bad part.
    """
    if value is None:
        return None
    items = list(value) if isinstance(value, list | tuple) else [value]
    rules: list[GlobRoutes | Router] = []
    for item in items:
        if isinstance(item, Mapping):
            if item:  # an empty table routes nothing: no rule, and no cost per enqueue
                rules.append(_globs(key, item))
        elif callable(item):
            rules.append(item)
        else:
            raise ConfigError(
                f"{key} must be a dict of task-name globs to queues ({{'myapp.mail:*': "
                f"'mail'}}), a callable (task_name) -> queue or None, or a list of them; got "
                f"{item!r}"
            )
    return Routes(tuple(rules)) if rules else None


def _globs(key: str, mapping: Mapping[Any, Any]) -> GlobRoutes:
    patterns = []
    for glob, queue in mapping.items():
        if not isinstance(glob, str) or not glob:
            raise ConfigError(
                f"{key} keys must be task-name globs like 'myapp.mail:*', got {glob!r}"
            )
        try:
            name = validate_queue(queue)
        except InvalidOption as exc:
            raise ConfigError(f"{key}[{glob!r}]: {exc}") from None
        patterns.append((glob, re.compile(translate(glob)), name))
    return GlobRoutes(tuple(patterns))


def _name(rule: Router) -> str:
    """How an error names a callable rule."""
    return getattr(rule, "__qualname__", None) or repr(rule)
