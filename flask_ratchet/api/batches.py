"""Batches: many children under one parent job, counted as they end, with follow-ups.

::

    batch = ratchet.enqueue_batch("import-users").with_max_retries(5)
    for row in rows:
        batch.add(import_user, row)
    handle = batch.on_success(report, "import-users").on_failure(alert).submit()
    handle.progress()     # BatchProgress(total=…, succeeded=…, failed=…)

    ratchet.streaming_batch("reindex").from_iterable(ids).process(reindex_one) \\
        .with_chunk_size(500).start()

The parent does no work: it waits until its last child has ended, then SUCCEEDED (every child
succeeded) or FAILED ("N of M children failed"; a canceled child counts as failed). Then the
follow-ups whose condition holds run and the others are canceled (see :mod:`flask_ratchet.flows`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from itertools import islice
from typing import TYPE_CHECKING, Any, Self

from .. import payload
from ..errors import InvalidOption
from ..flows import NOT_YET, Condition, JobType
from ..ids import job_id_of, uuid7
from ..job import BatchProgress
from ..options import KEY_MAX_LENGTH, JobOptions, shown, validate_options, validate_text
from ..routes import routed
from ..runtime import Runtime
from ..store.types import Link, NewBatch, NewJob
from . import policy
from .submit import JobBuilder, OptionSetters, make_builder

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

#: The largest failure count a follow-up may wait for (stored as a float: exact up to here).
MAX_COUNT = 1_000_000_000
#: The task name a batch's parent job carries (it never runs).
BATCH_TASK = "flask_ratchet:batch"


@dataclass(frozen=True, slots=True)
class BatchHandle:
    """A submitted batch: ``id`` is its parent job's id."""

    id: uuid.UUID
    total: int
    _runtime: Runtime

    def progress(self) -> BatchProgress:
        """The batch's counts and metrics now."""
        found = batch_progress(self._runtime, self.id)
        if found is None:  # archived or deleted since
            raise LookupError(f"batch {self.id} no longer exists")
        return found


@dataclass(frozen=True, slots=True)
class _FollowUp:
    builder: JobBuilder
    kind: Condition
    threshold: float | None = None


class BatchBuilder(OptionSetters):
    """Children, options for all of them, and follow-ups; then :meth:`submit`."""

    def __init__(self, runtime: Runtime, name: str) -> None:
        validate_text("a batch name", name, KEY_MAX_LENGTH)
        self._runtime = runtime
        self._name = name
        self._children: list[JobBuilder] = []
        self._changes: dict[str, Any] = {}
        self._follow_ups: list[_FollowUp] = []
        self._progress_task: str | None = None

    def __repr__(self) -> str:
        return f"<BatchBuilder {self._name!r} {len(self._children)} children>"

    # -- children and their options ------------------------------------------------------------

    def add(self, fn: Callable[..., Any] | str, /, *args: Any, **kwargs: Any) -> Self:
        """Add the child ``fn(*args, **kwargs)`` (checked now, like ``enqueue``)."""
        self._children.append(make_builder(self._runtime, fn, args, kwargs))
        return self

    def with_options(self, **options: Any) -> Self:
        """Options for every child (``priority``, ``max_retries``, ``backoff``,
        ``backoff_base``, ``timeout``, ``resource``, ``tags``, ``params``), over each task's
        own defaults; tags and params are added to the task's. The ``with_*`` setters do the
        same one option at a time (priority and tags also go to the parent)."""
        return self._merge(**options)

    def _merge(self, **changes: Any) -> Self:
        self._changes |= validate_options(**changes)
        return self

    def _tags(self) -> tuple[str, ...]:
        return tuple(self._changes.get("tags", ()))

    def _params(self) -> dict[str, Any]:
        return dict(self._changes.get("params", {}))

    def _child_options(self, own: JobOptions) -> JobOptions:
        changes = dict(self._changes)
        if "tags" in changes:
            changes["tags"] = (*own.tags, *changes["tags"])
        if "params" in changes:
            changes["params"] = {**own.params, **changes["params"]}
        return own.merged(**changes) if changes else own

    # -- follow-ups ----------------------------------------------------------------------------

    def on_progress(self, fn: Callable[..., Any] | str) -> Self:
        """Call ``fn(progress)`` (a registered task, with a
        :class:`~flask_ratchet.job.BatchProgress`) in the worker as children end."""
        config = self._runtime.config
        self._progress_task = self._runtime.registry.for_submit(fn, config.allowed_modules).name
        return self

    def on_success(self, fn: Callable[..., Any] | str, /, *args: Any, **kwargs: Any) -> Self:
        """Run ``fn(*args, **kwargs)`` once every child SUCCEEDED."""
        return self._follow_up(Condition.BATCH_SUCCESS, None, fn, args, kwargs)

    def on_failure(self, fn: Callable[..., Any] | str, /, *args: Any, **kwargs: Any) -> Self:
        """Run ``fn(*args, **kwargs)`` once the batch ended with a child failed or canceled."""
        return self._follow_up(Condition.BATCH_FAILURE, None, fn, args, kwargs)

    def when_success_rate(
        self, rate: float, fn: Callable[..., Any] | str, /, *args: Any, **kwargs: Any
    ) -> Self:
        """Run ``fn(*args, **kwargs)`` once the batch ended with at least ``rate`` (0 to 1) of
        its children SUCCEEDED."""
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
            raise InvalidOption(f"a success rate must be a number from 0 to 1, got {shown(rate)}")
        return self._follow_up(Condition.SUCCESS_RATE, float(rate), fn, args, kwargs)

    def when_failure_count(
        self, count: int, fn: Callable[..., Any] | str, /, *args: Any, **kwargs: Any
    ) -> Self:
        """Run ``fn(*args, **kwargs)`` once the batch ended with at least ``count`` children
        failed or canceled."""
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_COUNT:
            raise InvalidOption(
                f"a failure count must be a whole number from 1 to {MAX_COUNT}, got {shown(count)}"
            )
        return self._follow_up(Condition.FAILURE_COUNT, float(count), fn, args, kwargs)

    def _follow_up(
        self,
        kind: Condition,
        threshold: float | None,
        fn: Callable[..., Any] | str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Self:
        builder = make_builder(self._runtime, fn, args, kwargs)
        self._follow_ups.append(_FollowUp(builder, kind, threshold))
        return self

    # -- writing -------------------------------------------------------------------------------

    def _parent(self) -> NewJob:
        # Never run, never retried; in the app's default queue and priority unless set.
        options = replace(self._runtime.config.job_defaults, max_retries=0).merged(
            **{k: v for k, v in self._changes.items() if k in ("queue", "priority", "tags")}
        )
        return NewJob(
            job_id=uuid7(),
            task=BATCH_TASK,
            payload=payload.NO_ARGUMENTS,
            params=None,
            options=options,
            run_at=NOT_YET,
            job_type=JobType.BATCH,
            follow_up=True,
        )

    def _child(self, builder: JobBuilder, batch_id: uuid.UUID) -> NewJob:
        builder._options = self._child_options(builder._options)
        builder.queue_chosen = builder.queue_chosen or "queue" in self._changes
        return builder.build_linked(job_type=JobType.BATCH_CHILD, batch_id=batch_id)

    def _follow_up_jobs(self, batch_id: uuid.UUID) -> tuple[list[NewJob], list[Link]]:
        jobs, links = [], []
        for f in self._follow_ups:
            new = f.builder.build_linked(
                job_type=JobType.STEP, depends_on=batch_id, run_at=NOT_YET, delay=0.0
            )
            jobs.append(new)
            links.append(Link(new.job_id, batch_id, f.kind, threshold=f.threshold))
        return jobs, links

    def submit(self) -> BatchHandle:
        """Write the parent, every child and the follow-ups in one transaction (joining the
        current one, like ``submit()``)."""
        parent = self._parent()
        children = [self._child(b, parent.job_id) for b in self._children]
        follow_ups, links = self._follow_up_jobs(parent.job_id)
        policy.stamp(self._runtime, [parent, *children, *follow_ups])
        store = self._runtime.store
        new_batch = NewBatch(parent.job_id, self._name, len(children), self._progress_task)

        def write(conn: Connection) -> None:
            store.jobs.insert_jobs(conn, [parent, *children, *follow_ups])
            store.flows.batches.insert_batch(conn, new_batch)
            store.flows.insert_links(conn, links)
            if not children:
                store.flows.settle(conn, parent.job_id, self._name)  # no children: ended already

        self._runtime.write_jobs(write, wake=lambda _: True)
        return BatchHandle(parent.job_id, len(children), self._runtime)


class StreamingBatchBuilder(BatchBuilder):
    """A batch whose children come from an iterable, inserted chunk by chunk as it is read, all
    in one transaction: memory stays flat however many items there are, and if the iterable
    raises, nothing at all is written."""

    def __init__(self, runtime: Runtime, name: str) -> None:
        super().__init__(runtime, name)
        self._items: Iterable[Any] | None = None
        self._process: Callable[..., Any] | str | None = None
        self._chunk_size = 500

    def from_iterable(self, items: Iterable[Any]) -> Self:
        """The items: each becomes one child, ``process(item)``."""
        self._items = items
        return self

    def process(self, fn: Callable[..., Any] | str) -> Self:
        """The task each item is passed to."""
        self._runtime.registry.for_submit(fn, self._runtime.config.allowed_modules)
        self._process = fn
        return self

    def with_chunk_size(self, size: int) -> Self:
        """Children inserted per statement (default 500)."""
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= 10_000:
            raise InvalidOption(
                f"a chunk size must be a whole number from 1 to 10000, got {shown(size)}"
            )
        self._chunk_size = size
        return self

    def add(self, fn: Callable[..., Any] | str, /, *args: Any, **kwargs: Any) -> Self:
        """Refused: a streaming batch's children come from its iterable."""
        raise TypeError("a streaming batch takes its children from from_iterable()/process()")

    def start(self) -> BatchHandle:
        """Read the iterable to its end, writing children as it goes, in one transaction."""
        if self._items is None or self._process is None:
            raise ValueError("call from_iterable(items) and process(fn) before start()")
        runtime, store = self._runtime, self._runtime.store
        config = runtime.config
        task = runtime.registry.for_submit(self._process, config.allowed_modules)
        options = self._child_options(task.options_over(config.job_defaults))
        if "queue" not in self._changes and "queue" not in task.explicit:
            options = routed(config.routes, task.name, options)
        parent = self._parent()
        follow_ups, links = self._follow_up_jobs(parent.job_id)
        items = iter(self._items)
        params = (
            payload.encode_value("params", options.params, config.max_payload_bytes)
            if options.params
            else None
        )

        encrypt, keyring = task.encrypt or config.encrypt_all, runtime.keyring

        def child(item: Any) -> NewJob:
            job_id = uuid7()
            text = payload.encode_arguments(task.name, (item,), {}, config.max_payload_bytes)
            own_params = params
            if encrypt:  # sealed for this child: bound to its id
                text = keyring.seal(text, job_id, "payload")
                own_params = None if params is None else keyring.seal(params, job_id, "params")
            return NewJob(
                job_id=job_id,
                task=task.name,
                payload=text,
                params=own_params,
                options=options,
                job_type=JobType.BATCH_CHILD,
                batch_id=parent.job_id,
                follow_up=True,
            )

        def next_chunk() -> list[NewJob]:
            chunk = [child(item) for item in islice(items, self._chunk_size)]
            policy.stamp(self._runtime, chunk)
            return chunk

        # The first chunk is read and encoded before anything is written: a batch that fits in
        # one chunk is refused whole, before its first statement.
        policy.stamp(self._runtime, [parent, *follow_ups])
        first = next_chunk()

        def stream(conn: Connection) -> int:
            jobs = first
            store.jobs.insert_jobs(conn, [parent, *follow_ups])
            store.flows.batches.insert_batch(
                conn, NewBatch(parent.job_id, self._name, 0, self._progress_task)
            )
            store.flows.insert_links(conn, links)
            total = 0
            while jobs:
                store.jobs.insert_jobs(conn, jobs)
                total += len(jobs)
                jobs = next_chunk()
            store.flows.batches.set_batch_total(conn, parent.job_id, total)
            if not total:
                store.flows.settle(conn, parent.job_id, self._name)  # no children: ended already
            return total

        # write_jobs takes back everything written here if the iterable or the database
        # raises, also inside a caller's transaction (a savepoint).
        total = runtime.write_jobs(stream, wake=lambda _: True)
        return BatchHandle(parent.job_id, total, runtime)


def batch_progress(runtime: Runtime, batch_id: uuid.UUID | str) -> BatchProgress | None:
    """A batch's counts and metrics (``batch_id`` is its parent job's id), or ``None`` (also
    for a batch whose parent the principal may not read: :mod:`.policy`)."""
    key = job_id_of(batch_id)

    def read(conn: Connection) -> BatchProgress | None:
        if not policy.may(runtime, conn, "read", key):
            return None
        return runtime.store.flows.batches.batch_progress(conn, key)

    return runtime.run(read)
