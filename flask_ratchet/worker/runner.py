"""``flask ratchet worker``: one process that claims, runs and finishes jobs.

Threads: the poller (this process's main thread, so that signals reach it), a pool of executor
threads, the completer, a watchdog (timeouts, cancellations), the heartbeat, maintenance, and a
wake-up listener. Worker internals use an engine of their own, so jobs using ``db.session`` never
compete with them for connections.

The first SIGTERM or SIGINT drains: no more claims, running jobs get ``drain_timeout`` seconds to
finish, the rest go back to PENDING without spending an attempt, and the process exits 0. A second
signal exits at once; orphan recovery (or this node's own reclaim at its next start) picks the
jobs up.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Mapping
from importlib.metadata import version
from types import FrameType
from typing import TYPE_CHECKING

from flask import Flask
from sqlalchemy.exc import OperationalError, SQLAlchemyError

from .. import facts
from ..config import RatchetConfig, describe_queues
from ..context import CaptureHandler, job_logger
from ..facts import Event
from ..forks import fresh_pool_after_fork
from ..maintenance import Heartbeat, Maintenance, orphan_recovery, retention
from ..maintenance.recurring import start_recurring
from ..store.types import Finished, NodeInfo, Outcome
from .announcer import Announcer, predicate_evaluator
from .completer import Completer
from .executor import Executor
from .logs import claimed_fields
from .metrics import WorkerMetrics
from .polling import PollingStrategy
from .runs import Run
from .supervision import Supervision

if TYPE_CHECKING:
    from ..runtime import Runtime
    from ..store import Store

log = logging.getLogger("flask_ratchet.worker")

#: How often the watchdog looks for timeouts, and for jobs canceled while running.
WATCH_EVERY = 0.2
CANCEL_SWEEP_EVERY = 1.0


def default_node_id() -> str:
    return f"{socket.gethostname()[:48]}:{os.getpid()}"


class Worker(Supervision):
    """A worker process for ``app``. :meth:`run` blocks until it is told to stop."""

    def __init__(
        self,
        app: Flask,
        *,
        concurrency: int | None = None,
        node_id: str | None = None,
        burst: bool = False,
        drain_timeout: float | None = None,
        queues: Mapping[str, int | None] | None = None,
        prefetch: int | None = None,
        metrics_port: tuple[str, int] | None = None,
    ) -> None:
        super().__init__()
        self.app = app
        self.state: Runtime = app.extensions["ratchet"]
        config: RatchetConfig = self.state.config
        self.config = config
        self.concurrency = concurrency or config.concurrency
        self.node_id = node_id or config.node_id or default_node_id()
        self.burst = burst
        #: The queues this worker takes, with each one's thread limit; ``None``: every queue.
        chosen = config.queues if queues is None else queues
        self.queues = None if chosen is None else dict(chosen)
        self.prefetch = config.prefetch if prefetch is None else prefetch
        #: Where this worker serves Prometheus metrics; ``None``: it has none.
        self.metrics_port = config.metrics_port if metrics_port is None else metrics_port
        self.metrics: WorkerMetrics | None = None
        self.drain_timeout = config.drain_timeout if drain_timeout is None else drain_timeout
        self.stop_event = threading.Event()  # every helper thread ends when this is set
        self._wake = threading.Event()
        self._draining = threading.Event()
        self._signals = 0
        self._last_claim_full = False
        self.polling = PollingStrategy(
            minimum=config.poll_interval,
            maximum=config.poll_max_interval,
            burst=config.burst_interval,
            deep=config.deep_idle_interval,
            deep_after=config.deep_idle_after,
        )

    # -- wake-ups and signals ------------------------------------------------------------------

    def wake(self) -> None:
        """New work was announced (or a queue paused or resumed): poll now, then fast for a
        while."""
        store: Store | None = getattr(self, "store", None)  # None until run() has begun
        if store is not None:
            store.queues.forget_paused()
        self.polling.wake()
        self._wake.set()

    def request_stop(self) -> None:
        """Start draining (what the first SIGTERM does)."""
        self._draining.set()
        self._wake.set()

    def send(self, events: list[Event]) -> None:
        """Events of a job thread's own write (an expired job's cancel), sent by the
        announcer thread as the completer's are."""
        self.announcer.put(events)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1
        if self._signals > 1:
            log.warning("second signal: stopping at once; running jobs will be recovered")
            os._exit(1)
        log.info("signal %s: draining (a second signal stops at once)", signal.Signals(signum).name)
        self.request_stop()

    # -- running -------------------------------------------------------------------------------

    def run(self) -> int:
        """Work until stopped (or, with ``burst``, until nothing is due); return the exit code."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)
        with self.app.app_context():
            self.state.ensure_schema()
            self.store = self.state.store
            url = self.state.engine.url
            self.wakeups = self.state.wakeups
            # The app's own: a job that cancels another tells waiters through the same one.
            self._tell_ended = self.state.ended_notifier()
        self.engine = self.store.dialect.worker_engine(url, self.concurrency)
        self.claim_engine = self.store.claim_engine(self.engine)
        for engine in (self.engine, self.claim_engine):
            fresh_pool_after_fork(engine)  # a job may fork (multiprocessing, subprocess helpers)
        capture = CaptureHandler()
        logging.getLogger().addHandler(capture)
        if job_logger.level == logging.NOTSET:
            job_logger.setLevel(logging.INFO)
        self.announcer = Announcer(self.app, self.state.wake)
        self.completer = Completer(
            self.store,
            self.engine,
            self.node_id,
            on_written=self._written,
            predicate=predicate_evaluator(self.app),
            on_events=self.announcer.put,
            # The job whose outcome is being written may still count as busy: more than one.
            more_coming=lambda: self.executor.busy > 1,
            on_counted=self._counted,
        )
        self.executor = Executor(
            self.app,
            self.state,
            self,
            self.completer.put,
            self.concurrency,
            self._freed,
            prefetch=self.prefetch,
        )
        if self.metrics_port is not None:
            self.metrics = WorkerMetrics(
                running=lambda: self.executor.busy,
                capacity=lambda: self.executor.capacity,
                threads_busy=lambda: self.executor.utilization,
            )
        info = NodeInfo(
            self.node_id,
            socket.gethostname()[:255],
            os.getpid(),
            version("flask-ratchet"),
            self.concurrency,
        )
        self.heartbeat = Heartbeat(
            self.store,
            self.engine,
            info,
            self.config.heartbeat_interval,
            self.stop_event,
            breakers=self.executor.breakers,
        )
        try:
            self._start()
            self._poll()
            return self._drain()
        finally:
            self.stop_event.set()
            logging.getLogger().removeHandler(capture)
            self.state.wake_listeners[:] = [w for w in self.state.wake_listeners if w != self.wake]
            self.claim_engine.dispose()
            self.engine.dispose()

    def _start(self) -> None:
        self._introduce()
        self.announcer.start()
        self.completer.start()
        self.heartbeat.start()
        if self.metrics is not None and self.metrics_port is not None:
            host, port = self.metrics_port
            self.metrics.serve(port, host)
            log.info("metrics served on %s:%d/metrics", host, port)
        recovery = orphan_recovery(self.config, self.announcer.put, self._recovered)
        tasks = [recovery, retention(self.config)]
        self.maintenance = Maintenance(
            self.store, self.engine, self.node_id, tasks, self.stop_event
        )
        self.maintenance.start()
        # Declared masters are registered before "started" is logged; then the firer starts.
        self.recurring = start_recurring(
            self.app,
            self.store,
            self.engine,
            self.stop_event,
            draining=self._draining,
            burst=self.burst,
        )
        threading.Thread(target=self._watch, name="ratchet-watchdog", daemon=True).start()
        self.listener = self.wakeups.listener(self.wake, self.stop_event)
        self.listener.start()
        self.state.wake_listeners.append(self.wake)
        log.info(
            "worker %s started: concurrency %d, queues %s",
            self.node_id,
            self.concurrency,
            "all" if self.queues is None else describe_queues(self.queues),
        )

    def _introduce(self) -> None:
        """The worker's first writes: take back what an earlier process of this node left
        running, write the configured resource limits, beat once. Tried again, with a growing
        pause, while the database does not answer (a deploy that starts workers as the database
        restarts): a worker reconnects by itself, at its start as later. A stop ends the wait."""
        pause = 0.5
        while True:
            try:
                with self.store.begin(self.engine) as conn:
                    mine = self.store.cluster.reclaim_own(conn, self.node_id)
                    recorded = facts.take(conn)
                self._write_resource_limits()
                self.heartbeat.beat()
                break
            except OperationalError as exc:
                if self._draining.is_set():
                    raise
                log.warning("the database did not answer at start (%s); again in %.1fs", exc, pause)
                self._draining.wait(pause)
                pause = min(pause * 2, 10.0)
        self.announcer.put(recorded)  # sent once the announcer starts
        if mine.requeued or mine.failed:
            log.warning(
                "took back %d jobs an earlier process of node %s left running",
                len(mine.requeued) + len(mine.failed),
                self.node_id,
            )

    def _write_resource_limits(self) -> None:
        """Write ``RATCHET_RESOURCES`` before the first claim, so that no job of a configured
        resource runs unlimited (a limit set with ``configure_resource`` since is overwritten)."""
        limits = list(self.config.resources.values())
        if not limits:
            return
        with self.store.begin(self.engine) as conn:
            for limit in limits:
                self.store.resources.set_resource_limit(conn, limit)
        log.info(
            "resource limits: %s",
            ", ".join(f"{x.name} {x.max_concurrent} at once" for x in limits),
        )

    def _poll(self) -> None:
        boost = self.config.priority_boost_minutes
        while not self._draining.is_set():
            # Clear before looking: a wake-up that arrives from here on makes the wait below
            # return at once, so none is lost between a claim and the sleep.
            self._wake.clear()
            free = self._free()
            quotas = self._quotas(free)
            claimed = []
            if free > 0 and quotas != {}:
                try:
                    with self.store.single_statement(self.claim_engine) as conn:
                        taken = self.store.jobs.claim_due(
                            conn,
                            free,
                            self.node_id,
                            boost,
                            quotas,
                            self._refusing(),
                        )
                    # Only once the claim has committed: a claim of several statements
                    # (MariaDB) whose commit failed was rolled back, and its jobs are others' to
                    # take. Run here, they would run twice.
                    claimed = taken
                except SQLAlchemyError as exc:
                    if self.store.dialect.transient(exc):
                        # Given up to break a deadlock with another claimer: claim again now.
                        log.debug("claim given up by the database; claiming again")
                        continue
                    log.warning("claim failed; polling again later", exc_info=True)
                except Exception:
                    # Not the database: most likely a row holding what ratchet never writes.
                    # The worker must go on polling, not end with it.
                    log.exception("claim failed on what it read; polling again later")
                else:
                    if self.metrics is not None:
                        self.metrics.polled(claimed)
                if claimed:
                    self.executor.submit(claimed)
                    # Hand the GIL to a job thread now: the jobs start before this thread's
                    # bookkeeping and its next query, not after them (about a millisecond).
                    time.sleep(0)
                self.polling.record(len(claimed), free)
                self._last_claim_full = len(claimed) == free
            if self.burst and not claimed and self._nothing_left():
                return
            delay = self.polling.delay(self.executor.utilization)
            # Not while it leaves a task's jobs to others: those are due, and would have it poll
            # without pause.
            if free > 0 and len(claimed) < free and not self._refusing():
                delay = min(delay, self._until_next_due())
            self._wake.wait(delay)

    def _quotas(self, free: int) -> dict[str, int] | None:
        """The most jobs to claim now from each of this worker's queues (``None``: every
        queue): ``free``, or less for a queue whose thread limit its jobs nearly fill; queues
        whose limit they fill are left out."""
        if self.queues is None:
            return None
        quotas = {}
        for name, limit in self.queues.items():
            quota = free if limit is None else min(free, limit - self.executor.busy_in(name))
            if quota > 0:
                quotas[name] = quota
        return quotas

    def _until_next_due(self) -> float:
        """Seconds until the earliest pending job this worker may claim is due (the poller
        never sleeps past it). Paused queues are left out: their due jobs must not keep the
        poller from sleeping."""
        try:
            with self.engine.connect() as conn:
                queues = self.store.queues.claimable(conn, self.queues)
                due, now = self.store.cluster.next_due_and_now(conn, queues)
        except SQLAlchemyError:
            return self.config.poll_interval
        except Exception:
            # Not the database's answer: a driver that broke on a connection the server dropped
            # mid-reply, or a row holding what ratchet never writes. The poller goes on.
            log.exception("reading the next due time failed; polling again later")
            return self.config.poll_interval
        return float("inf") if due is None else max(0.0, float((due - now).total_seconds()))

    def _nothing_left(self) -> bool:
        """Burst mode is done: nothing running, nothing to write, nothing due."""
        return (
            not self.executor.in_flight()
            and not self.completer.pending()
            and self._until_next_due() > 0
        )

    def _free(self) -> int:
        """Jobs to claim now. Outcomes waiting to be written beyond one capacity's worth count
        as taken: a completer that falls behind must not let RUNNING rows pile up without bound
        (at most two capacities' worth are claimed and unwritten at any time)."""
        unwritten = max(0, self.completer.backlog - self.executor.capacity)
        return max(0, self.executor.free - unwritten)

    def _counted(self, batch: list[Finished], applied: set[uuid.UUID]) -> None:
        if self.metrics is not None:
            self.metrics.written(batch, applied)

    def _recovered(self, tasks: list[str]) -> None:
        if self.metrics is not None:
            self.metrics.recovered(tasks)

    def _written(self) -> None:
        """Outcomes were written: room was made, and whoever waits for a job's end may look."""
        self._freed()
        if self._tell_ended is not None:
            self._tell_ended()

    def _freed(self) -> None:
        """Room was made (a job ended, or outcomes were written). After a full claim there is
        probably more work waiting: claim again once half the capacity is free, so that claims
        come in batches, not one by one."""
        if (self._last_claim_full or self.burst) and self._free() * 2 >= self.executor.capacity:
            self._wake.set()

    def _watch(self) -> None:
        next_sweep = time.monotonic()
        while not self.stop_event.wait(WATCH_EVERY):
            try:
                for run in self.executor.expire(time.monotonic()):
                    log.warning(
                        "job %s (%s) timed out after %ss",
                        run.claimed.job_id,
                        run.claimed.task,
                        run.claimed.timeout,
                        extra=claimed_fields(run.claimed, self.node_id),
                    )
                if time.monotonic() >= next_sweep:
                    next_sweep = time.monotonic() + CANCEL_SWEEP_EVERY
                    self._sweep_canceled()
            except Exception:
                # The thread that enforces timeouts and stops canceled jobs must live on.
                log.exception("watchdog pass failed; next in %.1fs", WATCH_EVERY)

    def _sweep_canceled(self) -> None:
        runs = [r for r in self.executor.running() if r.started]
        if not runs:
            return
        try:
            with self.engine.connect() as conn:
                mine = self.store.executions.still_running(
                    conn, self.node_id, [r.claimed.job_id for r in runs]
                )
        except SQLAlchemyError:
            return
        for run in self.executor.stop_canceled(runs, mine):
            log.info(
                "job %s was canceled while running; its result will be discarded",
                run.claimed.job_id,
                extra=claimed_fields(run.claimed, self.node_id),
            )

    def _release(self, runs: list[Run]) -> None:
        """Hand jobs back to PENDING without spending their attempt."""
        for run in runs:
            self.completer.put(_release_outcome(run))

    def _drain(self) -> int:
        # Claimed jobs that never started go back at once; running ones get the drain timeout.
        self._release(self.executor.take_waiting())
        finished = self.executor.wait_idle(self.drain_timeout)
        if not finished:
            left = self.executor.abandon()
            log.warning("drain timeout: releasing %d unfinished jobs to PENDING", len(left))
            self._release(left)
        self.completer.stop()
        self.announcer.stop()
        self.stop_event.set()
        if self.recurring is not None:
            self.recurring.join(5)  # it stopped firing when the drain began
        try:
            with self.store.begin(self.engine) as conn:
                self.store.cluster.remove_node(conn, self.node_id)
        except SQLAlchemyError:
            log.warning("could not remove node %s; it will be cleaned up", self.node_id)
        self.executor.shutdown()
        log.info(
            "worker %s stopped: %d outcomes written, %d discarded",
            self.node_id,
            self.completer.written,
            self.completer.discarded,
        )
        return 0


def _release_outcome(run: Run) -> Finished:
    return Finished(run.claimed.job_id, Outcome.RELEASE, run.claimed.task, run.claimed.attempt)
