"""A worker's parts, built from its settings before it runs: :func:`assemble` makes the engines,
the threads (not started) and the supervision a :class:`~flask_ratchet.worker.runner.Worker`
drives, so that nothing is set up halfway once it runs."""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import version
from typing import TYPE_CHECKING, Protocol, TypedDict, Unpack

from flask import Flask
from sqlalchemy.engine import Engine

from ..config import RatchetConfig
from ..forks import fresh_pool_after_fork
from ..maintenance import Heartbeat, Maintenance, orphan_recovery, retention, signal_timeouts
from ..store.types import Finished, NodeInfo
from ..wakeups.notices import WakeListener
from .announcer import Announcer, predicate_evaluator
from .completer import Completer
from .deadline import ClaimDeadline
from .executor import Executor
from .metrics import WorkerMetrics
from .supervision import Supervision
from .watchdog import Watchdog

if TYPE_CHECKING:
    from ..runtime import Runtime
    from ..store import Store


def default_node_id() -> str:
    return f"{socket.gethostname()[:48]}:{os.getpid()}"


class WorkerOptions(TypedDict, total=False):
    """What ``flask ratchet worker``'s options ask for (``None``: the configuration's)."""

    concurrency: int | None
    node_id: str | None
    burst: bool
    drain_timeout: float | None
    #: The queues to take, with each one's thread limit (``None``: no limit).
    queues: Mapping[str, int | None] | None
    prefetch: int | None
    #: Where to serve Prometheus metrics, ``(host, port)``.
    metrics_port: tuple[str, int] | None


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """What a worker was asked for, over the app's ``RATCHET_*`` configuration."""

    concurrency: int
    node_id: str
    burst: bool
    drain_timeout: float
    #: The queues this worker takes, with each one's thread limit; ``None``: every queue.
    queues: dict[str, int | None] | None
    prefetch: int | None
    #: Where this worker serves Prometheus metrics; ``None``: it has none.
    metrics_port: tuple[str, int] | None

    @classmethod
    def of(cls, config: RatchetConfig, **asked: Unpack[WorkerOptions]) -> WorkerSettings:
        """The settings ``asked`` for, the configuration's where one is not."""
        chosen = asked.get("queues")
        if chosen is None:
            chosen = config.queues
        drain_timeout = asked.get("drain_timeout")
        prefetch = asked.get("prefetch")
        metrics_port = asked.get("metrics_port")
        return cls(
            concurrency=asked.get("concurrency") or config.concurrency,
            node_id=asked.get("node_id") or config.node_id or default_node_id(),
            burst=asked.get("burst", False),
            drain_timeout=config.drain_timeout if drain_timeout is None else drain_timeout,
            queues=None if chosen is None else dict(chosen),
            prefetch=config.prefetch if prefetch is None else prefetch,
            metrics_port=config.metrics_port if metrics_port is None else metrics_port,
        )


class WorkerHooks(Protocol):
    """What the parts tell the worker that drives them."""

    def wake(self) -> None:
        """Another process committed due jobs (or paused or resumed a queue)."""

    def freed(self) -> None:
        """A job thread became free."""

    def written(self) -> None:
        """Outcomes were written."""

    def counted(self, batch: list[Finished], applied: set[uuid.UUID]) -> None:
        """Outcomes were written: which were applied (for the metrics)."""

    def recovered(self, tasks: list[str]) -> None:
        """Orphan recovery took back jobs of these tasks (for the metrics)."""


@dataclass(frozen=True, slots=True)
class WorkerParts:
    """A worker's engines, threads and supervision, made and not started."""

    store: Store
    #: The worker's own engine: jobs using ``db.session`` never compete with it.
    engine: Engine
    claim_engine: Engine
    #: The bound on each claim, which the watchdog enforces.
    claim_deadline: ClaimDeadline
    supervision: Supervision
    announcer: Announcer
    completer: Completer
    executor: Executor
    heartbeat: Heartbeat
    maintenance: Maintenance
    watchdog: Watchdog
    listener: WakeListener
    metrics: WorkerMetrics | None
    #: The app's notifier of ends: a job that cancels another tells waiters through it too.
    tell_ended: Callable[[], None] | None
    #: Every helper thread ends when this is set.
    stop_event: threading.Event

    def dispose(self, within: float = 5.0) -> None:
        """Once the stop event is set: wait up to ``within`` seconds for the services to end,
        then close the worker's own connections (a service still in a pass would open a new
        connection on a disposed engine, and leave it open)."""
        deadline = time.monotonic() + within
        for service in (self.heartbeat, self.maintenance, self.watchdog):
            if service.is_alive():
                service.join(max(0.0, deadline - time.monotonic()))
        self.claim_engine.dispose()
        self.engine.dispose()


def assemble(app: Flask, settings: WorkerSettings, hooks: WorkerHooks) -> WorkerParts:
    """The parts of a worker of ``app`` with ``settings``, reporting to ``hooks``."""
    runtime: Runtime = app.extensions["ratchet"]
    config = runtime.config
    with app.app_context():
        store = runtime.store
        url = runtime.engine.url
        wakeups = runtime.wakeups
        tell_ended = runtime.ended_notifier()
    engine = store.dialect.worker_engine(url, settings.concurrency, config.orphan_grace)
    claim_engine = store.claim_engine(engine, config.claim_timeout)
    claim_deadline = ClaimDeadline(config.claim_timeout)
    for made in (engine, claim_engine):
        fresh_pool_after_fork(made)  # a job may fork (multiprocessing, subprocess helpers)
    stop_event = threading.Event()
    announcer = Announcer(app, runtime.wake)
    supervision = Supervision(
        store, engine, settings.node_id, config, announcer.put, keyring=runtime.keyring
    )
    executor: Executor | None = None  # the completer asks it, once both exist

    def more_coming() -> bool:
        # The job whose outcome is being written may still count as busy: more than one.
        return executor is not None and executor.busy > 1

    completer = Completer(
        store,
        engine,
        settings.node_id,
        on_written=hooks.written,
        predicate=predicate_evaluator(app),
        on_events=announcer.put,
        more_coming=more_coming,
        on_counted=hooks.counted,
    )
    executor = Executor(
        app,
        runtime,
        supervision,
        completer.put,
        settings.concurrency,
        hooks.freed,
        prefetch=settings.prefetch,
    )
    metrics = None
    if settings.metrics_port is not None:
        metrics = WorkerMetrics(
            running=lambda: executor.busy,
            capacity=lambda: executor.capacity,
            threads_busy=lambda: executor.utilization,
        )
    info = NodeInfo(
        settings.node_id,
        socket.gethostname()[:255],
        os.getpid(),
        version("flask-ratchet"),
        settings.concurrency,
    )
    heartbeat = Heartbeat(
        store,
        engine,
        info,
        config.heartbeat_interval,
        stop_event,
        breakers=executor.breakers,
        queues=None if settings.queues is None else list(settings.queues),
    )
    recovery = orphan_recovery(config, announcer.put, hooks.recovered)
    maintenance = Maintenance(
        store,
        engine,
        settings.node_id,
        [recovery, signal_timeouts(config, announcer.put), retention(config)],
        stop_event,
    )
    return WorkerParts(
        store=store,
        engine=engine,
        claim_engine=claim_engine,
        claim_deadline=claim_deadline,
        supervision=supervision,
        announcer=announcer,
        completer=completer,
        executor=executor,
        heartbeat=heartbeat,
        maintenance=maintenance,
        watchdog=Watchdog(
            executor, store, engine, settings.node_id, stop_event, claims=claim_deadline
        ),
        listener=wakeups.listener(hooks.wake, stop_event),
        metrics=metrics,
        tell_ended=tell_ended,
        stop_event=stop_event,
    )
