"""The recurring-job part of the :class:`~flask_ratchet.Ratchet` facade. No SQL, no threads.

Declared masters (``@ratchet.recurring``) are only remembered here; workers register them when
they start (``init_app`` writes nothing and opens no connection). ``ratchet.register_recurring()``
does the same on demand, e.g. from a deploy step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from . import payload
from .context import required_arguments
from .cron import normalize as cron_normalize
from .cron import validate as cron_validate
from .options import JobOptions, validate_key, validate_options
from .recurring import Misfire, RecurringDefinition, RecurringJob, misfire_policy
from .registry import TaskRegistry, default_name
from .store.recurring import RecurringStore
from .submit import RecurringJobBuilder, make_recurring_builder

if TYPE_CHECKING:
    from .extension import RatchetState
    from .job import JobHandle

F = TypeVar("F", bound=Callable[..., Any])


class RecurringFacade:
    """Recurring masters: declare, schedule, operate and list them."""

    registry: TaskRegistry
    #: Masters declared with ``@ratchet.recurring``, by id; workers register them at start.
    recurring_definitions: dict[str, RecurringDefinition]

    @property
    def state(self) -> RatchetState:
        raise NotImplementedError

    def recurring(
        self,
        cron: str,
        *,
        zone: str = "UTC",
        name: str | None = None,
        id: str | None = None,
        misfire: Misfire | str = Misfire.FIRE_ONCE,
        **options: Any,
    ) -> Callable[[F], F]:
        """Declare a recurring job: ``func`` runs at every occurrence of the Quartz ``cron``.

        ::

            @ratchet.recurring("0 0 2 * * ?", zone="Europe/Berlin", name="Nightly cleanup",
                               priority=Priority.LOW, max_retries=2, misfire=Misfire.SKIP)
            def nightly_cleanup() -> None: ...

        The function is also registered as a task (with ``options``: ``priority``,
        ``max_retries``, ``backoff``, ``backoff_base``, ``timeout``, ``resource``, ``tags``) and
        must take no arguments, or only a ``JobContext``. ``id`` (default ``module:qualname``)
        names the master: exactly one exists per id however many workers start.

        :raises CronError: for a bad expression or zone, naming the field.
        """
        cron_validate(cron, zone)
        policy = misfire_policy(misfire)
        defaults = JobOptions(**validate_options(**options))
        if id is not None:
            validate_key("recurring id", id)
        if name is not None:
            validate_key("recurring name", name)

        def declare(func: F) -> F:
            _refuse_arguments(func)
            master_id = id or default_name(func)
            existing = self.recurring_definitions.get(master_id)
            if existing is not None and existing.task != default_name(func):
                raise ValueError(
                    f"recurring id {master_id!r} is already declared for {existing.task}; "
                    "give one of them another id="
                )
            task = self.registry.register(func, None, defaults)
            self.recurring_definitions[master_id] = RecurringDefinition(
                id=master_id,
                name=name or master_id,
                task=task.name,
                cron=cron_normalize(cron),
                zone=zone,
                payload=payload.NO_ARGUMENTS,
                options=defaults,
                misfire=policy,
            )
            return func

        return declare

    def schedule_recurring(
        self, cron: str, zone: str, fn: Callable[..., Any] | str, /, *args: Any, **kwargs: Any
    ) -> RecurringJobBuilder:
        """Start building a recurring master that runs ``fn(*args, **kwargs)`` at every
        occurrence of ``cron`` in ``zone``. Nothing is written until ``submit()``.

        :raises CronError: for a bad expression or zone, naming the field.
        """
        return make_recurring_builder(self.state, cron, zone, fn, args, kwargs)

    def register_recurring(self) -> list[RecurringJob]:
        """Register every declared master now (workers do this when they start)."""
        state = self.state
        store = RecurringStore(state.store)
        with state.connection(atomic=True) as conn:
            return [store.register(conn, d)[0] for d in self.recurring_definitions.values()]

    def pause_recurring(self, recurring_id: str) -> bool:
        """ACTIVE → PAUSED: no children until resumed. Pausing a paused master returns True."""
        return self._recurring_change(recurring_id, RecurringStore.pause)

    def resume_recurring(self, recurring_id: str) -> bool:
        """PAUSED → ACTIVE, next at the first occurrence after now (paused time is not made up)."""
        return self._recurring_change(recurring_id, RecurringStore.resume)

    def cancel_recurring(self, recurring_id: str) -> bool:
        """End a master (ACTIVE or PAUSED → CANCELED); its id is free to be registered again.

        Children already created are not touched (cancel them with ``cancel_job``).
        """
        return self._recurring_change(recurring_id, RecurringStore.cancel)

    def run_recurring_now(self, recurring_id: str) -> JobHandle | None:
        """Create one extra child of an ACTIVE or PAUSED master, due now; ``None`` if there is
        no such master. The schedule is not changed."""
        from .job import JobHandle

        key = validate_key("id", recurring_id)
        store = RecurringStore(self.state.store)
        job_id = self.state.write_jobs(
            lambda conn: store.run_now(conn, key), wake=lambda made: made is not None
        )
        return None if job_id is None else JobHandle(job_id)

    def get_recurring(self, recurring_id: str) -> RecurringJob | None:
        """A snapshot of one master (also a canceled one), or ``None``."""
        state = self.state
        with state.connection() as conn:
            return RecurringStore(state.store).get(conn, validate_key("id", recurring_id))

    def list_recurring(self, *, include_canceled: bool = False) -> list[RecurringJob]:
        """Every master with its next fire time, by id."""
        state = self.state
        with state.connection() as conn:
            return RecurringStore(state.store).list_all(conn, include_canceled)

    def _recurring_change(
        self, recurring_id: str, op: Callable[[RecurringStore, Any, str], bool]
    ) -> bool:
        key = validate_key("id", recurring_id)
        state = self.state
        with state.connection() as conn:
            return op(RecurringStore(state.store), conn, key)


def _refuse_arguments(func: Callable[..., Any]) -> None:
    """A declared recurring job is called with nothing (a ``JobContext`` is filled in)."""
    required = required_arguments(func)
    if required:
        raise TypeError(
            f"{default_name(func)} takes argument {required[0]!r}, but a declared recurring "
            "job is called with none; use ratchet.schedule_recurring(cron, zone, fn, *args) "
            "to pass arguments"
        )
