"""Chains and workflow branches: jobs that run after another job ends, written all at once.

::

    ratchet.enqueue(fetch, url).then(parse).then(store, "s3").submit()
    ratchet.enqueue(charge, 1).then_on_success(ship, 1).then_on_failure(refund, 1).submit()

``then`` appends a step to the chain; the branches (``then_on_success``, ``then_on_failure``,
``when``) hang off the chain's last step so far. Every job is written at :meth:`submit`, in one
transaction; a dependent waits PENDING until its parent ends (see :mod:`flask_ratchet.flows`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..flows import NOT_YET, Condition, JobType
from ..options import validate_queue
from ..runtime import Runtime
from ..store.types import Link, NewJob
from . import policy
from .submit import JobBuilder, make_builder


@dataclass(frozen=True, slots=True)
class FlowHandle:
    """The jobs a chain or workflow submitted: ``id`` is the first, ``ids`` all in order."""

    id: Any
    ids: tuple[Any, ...]

    @property
    def last(self) -> Any:
        """The id of the last job added (a chain's last step)."""
        return self.ids[-1]


@dataclass(frozen=True, slots=True)
class _Dependent:
    builder: JobBuilder
    parent: JobBuilder
    kind: Condition
    predicate: str | None = None


class FlowBuilder:
    """A first job and the jobs that follow it; :meth:`submit` writes them all."""

    def __init__(self, runtime: Runtime, root: JobBuilder) -> None:
        self._runtime = runtime
        self._root = root
        self._last = root
        self._dependents: list[_Dependent] = []
        self._queue: str | None = None

    def __repr__(self) -> str:
        return f"<FlowBuilder {self._root.task_name} +{len(self._dependents)}>"

    def then(
        self, fn: Callable[..., Any] | str | JobBuilder, /, *args: Any, **kwargs: Any
    ) -> FlowBuilder:
        """The next step: ``fn(*args, **kwargs)`` runs once the previous step SUCCEEDED, and is
        canceled if it fails for good or is canceled. Its ``JobContext.previous_result`` is the
        previous step's result."""
        step = self._add(Condition.THEN, fn, args, kwargs)
        self._last = step
        return self

    def then_on_success(
        self, fn: Callable[..., Any] | str | JobBuilder, /, *args: Any, **kwargs: Any
    ) -> FlowBuilder:
        """A branch of the last step: runs if it SUCCEEDED, canceled otherwise."""
        self._add(Condition.ON_SUCCESS, fn, args, kwargs)
        return self

    def then_on_failure(
        self, fn: Callable[..., Any] | str | JobBuilder, /, *args: Any, **kwargs: Any
    ) -> FlowBuilder:
        """A branch of the last step: runs if it FAILED for good, canceled otherwise."""
        self._add(Condition.ON_FAILURE, fn, args, kwargs)
        return self

    def when(
        self,
        predicate: Callable[[Any], bool] | str,
        fn: Callable[..., Any] | str | JobBuilder,
        /,
        *args: Any,
        **kwargs: Any,
    ) -> FlowBuilder:
        """A branch of the last step: runs if it SUCCEEDED and ``predicate(result)`` is true.

        ``predicate`` must be a registered task (or allow-listed function), called by the
        worker with the step's result. If it raises, routing fails: every branch of that step
        is canceled and the error is kept with them.
        """
        config = self._runtime.config
        name = self._runtime.registry.for_submit(predicate, config.allowed_modules).name
        self._add(Condition.WHEN, fn, args, kwargs, predicate=name)
        return self

    def with_queue(self, name: str) -> FlowBuilder:
        """The queue of every step that does not choose its own with ``with_queue``."""
        self._queue = validate_queue(name)
        return self

    def _add(
        self,
        kind: Condition,
        fn: Callable[..., Any] | str | JobBuilder,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        predicate: str | None = None,
    ) -> JobBuilder:
        if isinstance(fn, JobBuilder):
            if args or kwargs:
                raise TypeError("pass a builder's arguments to ratchet.enqueue(), not here")
            if fn.scheduled:
                raise ValueError(
                    f"{fn.task_name}: a step runs as soon as the job before it ends; build it "
                    "with ratchet.enqueue(), not schedule() or schedule_at()"
                )
            builder = fn
        else:
            builder = make_builder(self._runtime, fn, args, kwargs)
        self._dependents.append(_Dependent(builder, self._last, kind, predicate))
        return builder

    def build(self) -> tuple[list[NewJob], list[Link]]:
        """The jobs and their links, validated; marks every builder used."""
        for builder in (self._root, *(d.builder for d in self._dependents)):
            if builder.idempotency_key is not None:
                raise ValueError(
                    f"{builder.task_name}: idempotency keys are not supported on the jobs of a "
                    "chain or workflow; guard the code that submits the chain instead"
                )
        if self._queue is not None:
            for builder in (self._root, *(d.builder for d in self._dependents)):
                if not builder.queue_chosen:
                    builder.with_queue(self._queue)
        root = self._root.build_linked()
        jobs = [root]
        ids = {id(self._root): root.job_id}
        links = []
        for dep in self._dependents:
            parent_id = ids[id(dep.parent)]
            new = dep.builder.build_linked(
                job_type=JobType.STEP, depends_on=parent_id, run_at=NOT_YET, delay=0.0
            )
            ids[id(dep.builder)] = new.job_id
            jobs.append(new)
            links.append(Link(new.job_id, parent_id, dep.kind, predicate=dep.predicate))
        return jobs, links

    def submit(self) -> FlowHandle:
        """Write every job of the flow (joining the current transaction, like ``submit()``)."""
        jobs, links = self.build()
        runtime = self._runtime
        policy.stamp(runtime, jobs)
        wake = self._root.wakes_workers

        def write(conn: Any) -> Sequence[Any]:
            inserted = runtime.store.jobs.insert_jobs(conn, jobs)
            runtime.store.flows.insert_links(conn, links)
            return inserted

        inserted = runtime.write_jobs(write, wake=lambda _: wake)
        return FlowHandle(inserted[0].job_id, tuple(i.job_id for i in inserted))
