"""The recurring half of :class:`~flask_ratchet.Ratchet`: declaring, building, operating and
reading recurring masters, each method handing the work to :mod:`flask_ratchet.api.recurring`.

A mixin, so that ``extension.py`` keeps to one screenful per concern; it needs only
``registry``, ``recurring_definitions`` and ``runtime``, which ``Ratchet`` has.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any, ParamSpec, TypeVar

from .api import recurring
from .api.handles import JobHandle
from .api.recurring import RecurringJobBuilder, make_recurring_builder
from .api.tasks import TaskFunction, task_function
from .recurring import Misfire, RecurringDefinition, RecurringJob
from .registry import TaskRegistry
from .runtime import Runtime

P = ParamSpec("P")
R = TypeVar("R")


class RecurringMethods:
    """``Ratchet``'s recurring-job methods."""

    registry: TaskRegistry
    #: Masters declared with ``@ratchet.recurring``, by id; workers register them at start.
    recurring_definitions: dict[str, RecurringDefinition]

    @property
    def runtime(self) -> Runtime:
        """The current app's Runtime (``Ratchet`` gives it)."""
        raise NotImplementedError

    def recurring(
        self,
        cron: str | None = None,
        *,
        every: timedelta | float | None = None,
        zone: str = "UTC",
        name: str | None = None,
        id: str | None = None,
        misfire: Misfire | str = Misfire.FIRE_ONCE,
        **options: Any,
    ) -> Callable[[Callable[P, R]], TaskFunction[P, R]]:
        """Declare a recurring job: ``func`` runs at every occurrence of ``cron`` (Unix cron,
        5 fields or a macro, or Quartz cron, 6 or 7 fields), or ``every`` span of time.

        ::

            @ratchet.recurring("0 0 2 * * ?", zone="Europe/Berlin", name="Nightly cleanup",
                               priority=Priority.LOW, max_retries=2, misfire=Misfire.SKIP)
            def nightly_cleanup() -> None: ...

            @ratchet.recurring(every=timedelta(seconds=30))  # at :00 and :30 of each minute
            def poll_feeds() -> None: ...

        The function is also registered as a task (with ``options``: ``priority``,
        ``max_retries``, ``backoff``, ``backoff_base``, ``timeout``, ``resource``, ``tags``) and
        must take no arguments, or only a ``JobContext``. ``id`` (default ``module:qualname``)
        names the master: exactly one exists per id however many workers start. Workers
        register declared masters when they start; ``init_app`` writes nothing.

        :raises CronError: for a bad expression, interval or zone, naming the field.
        """
        expr = recurring.schedule_of(cron, every)
        declare = recurring.declare(
            self.registry, self.recurring_definitions, expr, zone, name, id, misfire, options
        )

        def register(f: Callable[P, R]) -> TaskFunction[P, R]:
            return task_function(self.registry, f, declare)

        return register

    def schedule_recurring(
        self,
        cron: str | timedelta,
        zone: str,
        fn: Callable[..., Any] | str,
        /,
        *args: Any,
        **kwargs: Any,
    ) -> RecurringJobBuilder:
        """Start building a recurring master that runs ``fn(*args, **kwargs)`` at every
        occurrence of ``cron`` in ``zone``, or every ``cron`` if it is a ``timedelta`` (an
        interval, in zone ``"UTC"``). Nothing is written until ``submit()``.

        :raises CronError: for a bad expression, interval or zone, naming the field.
        """
        return make_recurring_builder(self.runtime, cron, zone, fn, args, kwargs)

    def register_recurring(self) -> list[RecurringJob]:
        """Register every declared master now (workers do this when they start), e.g. from a
        deploy step."""
        return recurring.register_declared(self.runtime)

    def pause_recurring(self, recurring_id: str) -> bool:
        """ACTIVE → PAUSED: no children until resumed. Pausing a paused master returns True."""
        return recurring.pause(self.runtime, recurring_id)

    def resume_recurring(self, recurring_id: str) -> bool:
        """PAUSED → ACTIVE, next at the first occurrence after now (paused time is not made up)."""
        return recurring.resume(self.runtime, recurring_id)

    def cancel_recurring(self, recurring_id: str) -> bool:
        """End a master (ACTIVE or PAUSED → CANCELED); its id is free to be registered again.

        Children already created are not touched (cancel them with ``cancel_job``).
        """
        return recurring.cancel(self.runtime, recurring_id)

    def run_recurring_now(self, recurring_id: str) -> JobHandle | None:
        """Create one extra child of an ACTIVE or PAUSED master, due now; ``None`` if there is
        no such master. The schedule is not changed."""
        job_id = recurring.run_now(self.runtime, recurring_id)
        return None if job_id is None else JobHandle(job_id)

    def get_recurring(self, recurring_id: str) -> RecurringJob | None:
        """A snapshot of one master (also a canceled one), or ``None``."""
        return recurring.get(self.runtime, recurring_id)

    def list_recurring(self, *, include_canceled: bool = False) -> list[RecurringJob]:
        """Every master with its next fire time, by id."""
        return recurring.list_all(self.runtime, include_canceled)
