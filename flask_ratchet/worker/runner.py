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
import threading
import time
import uuid
from typing import TYPE_CHECKING, Unpack

from flask import Flask
from sqlalchemy.exc import OperationalError, SQLAlchemyError

from .. import facts
from ..config import RatchetConfig
from ..context import CaptureHandler, job_logger
from ..maintenance.recurring import start_recurring
from ..resources import DEFAULT_RETRY_DELAY, ResourceLimit
from ..services import Signal
from ..store.types import Finished, Outcome
from ..worker_options import describe_queues
from .assembly import WorkerOptions, WorkerSettings, assemble
from .burst import burst_ends
from .polling import PollingStrategy
from .runs import Run

if TYPE_CHECKING:
    from ..runtime import Runtime

log = logging.getLogger("flask_ratchet.worker")


class Worker:
    """A worker for ``app``, its parts built (see :mod:`~flask_ratchet.worker.assembly`).
    :meth:`run` blocks until :meth:`request_stop` (or, with ``burst``, until nothing is due);
    the ``flask ratchet worker`` command calls that on SIGTERM and SIGINT."""

    def __init__(self, app: Flask, **options: Unpack[WorkerOptions]) -> None:
        self.app = app
        self.runtime: Runtime = app.extensions["ratchet"]
        config: RatchetConfig = self.runtime.config
        self.config = config
        self.settings = WorkerSettings.of(config, **options)
        self.node_id = self.settings.node_id
        self.queues = self.settings.queues
        self.burst = self.settings.burst
        self._wake = threading.Event()
        self._draining = threading.Event()
        self._last_claim_full = False
        #: A claim failed in a way that leaves unknown whether it committed.
        self._claim_unconfirmed = False
        self.polling = PollingStrategy(
            minimum=config.poll_interval,
            maximum=config.poll_max_interval,
            burst=config.burst_interval,
            deep=config.deep_idle_interval,
            deep_after=config.deep_idle_after,
        )
        self.parts = parts = assemble(app, self.settings, self)
        self.store = parts.store
        self.engine = parts.engine
        self.supervision = parts.supervision
        self.executor = parts.executor
        self.completer = parts.completer
        self.announcer = parts.announcer
        self.metrics = parts.metrics
        self.stop_event = parts.stop_event
        self.recurring: threading.Thread | None = None
        #: Test hooks (see :class:`~flask_ratchet.services.Signal`): the worker has started,
        #: jobs were claimed (a count of jobs), outcomes were written (a count of outcomes).
        self.started = Signal()
        self.claimed = Signal()
        self.finished = Signal()

    # -- wake-ups and signals ------------------------------------------------------------------

    def wake(self) -> None:
        """New work was announced (or a queue paused or resumed): poll now, then fast for a
        while. The paused queues are not read again for it: the claim reads them itself, and
        the read that picks its indexes is at most ``PAUSED_MAX_AGE`` old (reading them at
        every wake-up was a second round trip before each pickup's claim)."""
        self.polling.wake()
        self._wake.set()

    def request_stop(self) -> None:
        """Start draining (what the first SIGTERM does)."""
        self._draining.set()
        self._wake.set()

    # -- running -------------------------------------------------------------------------------

    def run(self) -> int:
        """Work until stopped (or, with ``burst``, until nothing is due); return the exit code."""
        capture = CaptureHandler()
        logging.getLogger().addHandler(capture)
        if job_logger.level == logging.NOTSET:
            job_logger.setLevel(logging.INFO)
        try:
            with self.app.app_context():
                self.runtime.ensure_schema()
            self._start()
            self._poll()
            return self._drain()
        finally:
            self.stop_event.set()
            logging.getLogger().removeHandler(capture)
            listeners = self.runtime.wake_listeners
            listeners[:] = [w for w in listeners if w != self.wake]
            self.parts.dispose()

    def _start(self) -> None:
        self._introduce()
        self.announcer.start()
        self.completer.start()
        self.executor.start()
        self.parts.heartbeat.start()
        port = self.settings.metrics_port
        if self.metrics is not None and port is not None:
            host, number = port
            self.metrics.serve(number, host)
            log.info("metrics served on %s:%d/metrics", host, number)
        self.parts.maintenance.start()
        # Declared masters are registered before "started" is logged; then the firer starts.
        self.recurring = start_recurring(
            self.app,
            self.store,
            self.engine,
            self.stop_event,
            draining=self._draining,
            burst=self.burst,
        )
        self.parts.watchdog.start()
        self.parts.listener.start()
        self.runtime.wake_listeners.append(self.wake)
        log.info(
            "worker %s started: concurrency %d, queues %s",
            self.node_id,
            self.settings.concurrency,
            "all" if self.queues is None else describe_queues(self.queues),
        )
        self.started.fire()

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
                self.parts.heartbeat.beat()
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
        """Write ``RATCHET_RESOURCES`` and the rates of rate-limited tasks before the first
        claim, so that no job of a configured resource runs unlimited (a limit set with
        ``configure_resource`` since is overwritten)."""
        # The rates of rate-limited tasks first: RATCHET_RESOURCES, written after, has the last
        # word on a resource both name.
        rated = [
            ResourceLimit(task.name, None, DEFAULT_RETRY_DELAY, task.rate)
            for task in self.runtime.registry
            if task.rate is not None
        ]
        limits = rated + list(self.config.resources.values())
        if not limits:
            return
        with self.store.begin(self.engine) as conn:
            for limit in limits:
                self.store.resources.set_resource_limit(conn, limit)
        log.info(
            "resource limits: %s",
            ", ".join(f"{x.name} {x.summary}" for x in limits),
        )

    def _poll(self) -> None:
        boost = self.config.priority_boost_minutes
        while not self._draining.is_set():
            # Clear before looking: a wake-up that arrives from here on makes the wait below
            # return at once, so none is lost between a claim and the sleep.
            self._wake.clear()
            if self._claim_unconfirmed:
                self._take_back_unconfirmed()
            free = self._free()
            quotas = self._quotas(free)
            claimed = []
            if free > 0 and quotas != {}:
                started = time.perf_counter()
                try:
                    with (
                        self.parts.claim_deadline as deadline,
                        self.store.single_statement(self.parts.claim_engine) as conn,
                    ):
                        deadline.watch(conn)
                        taken = self.store.jobs.claim_due(
                            conn,
                            free,
                            self.node_id,
                            boost,
                            quotas,
                            self.supervision.refusing(),
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
                    # It may have committed all the same (the connection broke as it did).
                    self._claim_unconfirmed = True
                except Exception:
                    # Not the database: most likely a row holding what ratchet never writes.
                    # The worker must go on polling, not end with it.
                    log.exception("claim failed on what it read; polling again later")
                else:
                    if self.metrics is not None:
                        self.metrics.polled(claimed, time.perf_counter() - started)
                if claimed:
                    self.executor.submit(claimed)
                    self.claimed.fire(len(claimed))
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
            if free > 0 and len(claimed) < free and not self.supervision.refusing():
                delay = min(delay, self._until_next_due())
            self._wake.wait(delay)

    def _take_back_unconfirmed(self) -> None:
        """After a claim whose commit is unknown: the jobs RUNNING under this node that it
        does not hold (its claim did commit, and it never got them) go back, as orphans do;
        else they would wait for this process to end."""
        # What it holds, before the statement: a job leaves the executor only once its outcome
        # is with the completer, and leaves the completer once its row is no longer RUNNING.
        held = self.executor.held() | self.completer.unwritten()
        try:
            with self.store.begin(self.engine) as conn:
                taken = self.store.cluster.reclaim_unheld(conn, self.node_id, held)
                recorded = facts.take(conn)
        except SQLAlchemyError:
            return  # the database is still away: again at the next poll
        self._claim_unconfirmed = False
        self.announcer.put(recorded)
        if taken.requeued or taken.failed:
            log.warning(
                "took back %d jobs a claim this worker could not confirm had left RUNNING",
                len(taken.requeued) + len(taken.failed),
            )

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

    def _until_next_due(self, refused: list[str] | None = None) -> float:
        """Seconds until the earliest pending job this worker may claim is due (the poller
        never sleeps past it). Paused queues are left out: their due jobs must not keep the
        poller from sleeping; and so are the jobs of the ``refused`` tasks, if given."""
        try:
            with self.engine.connect() as conn:
                queues = self.store.queues.claimable(conn, self.queues)
                due, now = self.store.cluster.next_due_and_now(conn, queues, refused or ())
        except SQLAlchemyError:
            return self.config.poll_interval
        except Exception:
            # Not the database's answer: a driver that broke on a connection the server dropped
            # mid-reply, or a row holding what ratchet never writes. The poller goes on.
            log.exception("reading the next due time failed; polling again later")
            return self.config.poll_interval
        return float("inf") if due is None else max(0.0, float((due - now).total_seconds()))

    def _nothing_left(self) -> bool:
        """Burst mode is done: nothing running, nothing to write, nothing due that this worker
        can run. Jobs it hands back (their task unknown to it) do not count, nor do those of
        paused queues and of queues it does not take: they wait for another worker, or an
        operator; the line it logs says which are left."""
        if self.executor.in_flight() or self.completer.pending():
            return False
        until = self._until_next_due(self.supervision.refusing())
        if until <= 0:
            return False
        handed_back = self.supervision.handed_back()
        log.info(burst_ends(self.store, self.engine, self.queues, handed_back, until))
        return True

    def _free(self, capacity: int | None = None) -> int:
        """Jobs to claim now (``capacity``: the executor's, if the caller has it already).
        Outcomes waiting to be written beyond one capacity's worth count as taken: a completer
        that falls behind must not let RUNNING rows pile up without bound (at most two
        capacities' worth are claimed and unwritten at any time)."""
        if capacity is None:
            capacity = self.executor.capacity
        unwritten = max(0, self.completer.backlog - capacity)
        return max(0, capacity - self.executor.busy - unwritten)

    # -- what the parts tell it (see WorkerHooks) ------------------------------------------------

    def counted(self, batch: list[Finished], applied: set[uuid.UUID]) -> None:
        if self.metrics is not None:
            self.metrics.written(batch, applied)
        self.finished.fire(len(batch))

    def recovered(self, tasks: list[str]) -> None:
        if self.metrics is not None:
            self.metrics.recovered(tasks)

    def written(self) -> None:
        """Outcomes were written: room was made, and whoever waits for a job's end may look."""
        self.freed()
        tell_ended = self.parts.tell_ended
        if tell_ended is not None:
            tell_ended()

    def freed(self) -> None:
        """Room was made (a job ended, or outcomes were written). After a full claim there is
        probably more work waiting: claim again once half the capacity is free, so that claims
        come in batches, not one by one."""
        if not (self._last_claim_full or self.burst) or self._wake.is_set():
            return  # nothing to hasten, or the poller is woken already (once per job: cheap)
        capacity = self.executor.capacity
        if self._free(capacity) * 2 >= capacity:
            self._wake.set()

    def _release(self, runs: list[Run]) -> None:
        """Hand jobs back to PENDING without spending their attempt."""
        for run in runs:
            self.completer.put(_release_outcome(run))

    def _drain(self) -> int:
        # Claimed jobs that never started go back at once; running ones get the drain timeout.
        self._release(self.executor.take_waiting())
        finished = self.executor.wait_idle(self.settings.drain_timeout)
        if not finished:
            left = self.executor.abandon()
            log.warning("drain timeout: releasing %d unfinished jobs to PENDING", len(left))
            self._release(left)
        self.completer.stop()
        self.announcer.stop(10)
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
