"""Runs claimed jobs on a pool of threads, each in a fresh Flask app context.

A job runs outside any transaction. What it returns or raises becomes a :class:`Finished`
outcome for the completer (:mod:`.attempts` runs each attempt). The pool takes more jobs than it
has threads when jobs are short (prefetch), so that the next ones are claimed while threads are
busy. The watchdog ends attempts that run past their timeout (through the normal failure path)
and stops jobs that were canceled while running; a late return of such a job is discarded.
"""

from __future__ import annotations

import ctypes
import logging
import queue
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from flask import Flask

from .. import tracing
from ..context import JobContext
from ..store.types import ClaimedJob, Finished
from .attempts import Attempts
from .permits import WorkerSide
from .runs import JobTimeout, Run, error_reports, failed

if TYPE_CHECKING:
    from ..runtime import Runtime

log = logging.getLogger("flask_ratchet.worker")

#: Claimed jobs wait for a thread about this long at most (at the recent mean run time): enough
#: to keep threads busy while the next claim is on its way, short enough not to hoard work that
#: other workers could run.
PREFETCH_HORIZON = 0.05
#: The most jobs that may wait, however short the jobs are: this many per thread, but never
#: fewer than ``MAX_WAITING_FLOOR`` in all (so that one or two threads still claim in batches
#: large enough to spread each claim's fixed cost).
MAX_WAITING_PER_THREAD = 20
MAX_WAITING_FLOOR = 200


class Executor:
    """A fixed pool of job threads that reports every outcome through ``report``."""

    def __init__(
        self,
        app: Flask,
        runtime: Runtime,
        supervisor: WorkerSide,
        report: Callable[[Finished], None],
        concurrency: int,
        on_free: Callable[[], None],
        prefetch: int | None = None,
    ) -> None:
        self._app = app
        self._runtime = runtime
        self._supervisor = supervisor
        self._report = report
        self._on_free = on_free
        self.concurrency = concurrency
        # Daemon threads: a job abandoned at the end of a drain must not keep the process alive
        # (a ThreadPoolExecutor's threads are joined at exit).
        self._inbox: queue.SimpleQueue[Run | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._serve, name=f"ratchet-job-{i}", daemon=True)
            for i in range(concurrency)
        ]
        self._runs: dict[uuid.UUID, Run] = {}
        # Jobs taken and not finished: waiting, running, or timed out and not returned yet.
        self._busy = 0
        self._busy_in: Counter[str] = Counter()  # the same, by queue
        # Moving average of attempts' run time, in seconds; None until one has ended.
        self._mean_run: float | None = None
        self._prefetch = prefetch
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        #: Threads in :meth:`wait_idle` (a drain): only then is the end of each job told.
        self._idle_waiters = 0
        self._attempts = Attempts(app, runtime, supervisor)
        #: This process's circuit breakers, by service.
        self.breakers = self._attempts.breakers

    # -- capacity ------------------------------------------------------------------------------

    @property
    def capacity(self) -> int:
        """Jobs this executor takes at once: one per thread, and the next ones waiting, so that
        they are already claimed when threads come free (claims overlap execution).

        How many wait is the worker's ``prefetch`` if it has one. Otherwise it depends on how
        long jobs run: as many as the threads finish within ``PREFETCH_HORIZON``, at most
        ``MAX_WAITING_PER_THREAD`` per thread or ``MAX_WAITING_FLOOR``, whichever is more; none
        before a job has ended. Short jobs are claimed in large batches; long ones only for free
        threads, so that a job never waits here while another worker could start it.
        """
        n = self.concurrency
        if self._prefetch is not None:
            return n + self._prefetch
        if self._mean_run is None:
            return n
        waiting = n * PREFETCH_HORIZON / max(self._mean_run, 1e-6)
        most = max(MAX_WAITING_PER_THREAD * n, MAX_WAITING_FLOOR)
        return n + int(min(waiting, most))

    # ``free`` and ``utilization`` read one counter without the lock: a read of an int is atomic,
    # they only steer claiming, and every job thread would otherwise contend for the lock once
    # more per job.

    @property
    def free(self) -> int:
        """Jobs the executor can take now."""
        return self.capacity - self._busy

    def busy_in(self, queue: str) -> int:
        """Jobs of ``queue`` taken and not finished."""
        return self._busy_in[queue]

    @property
    def busy(self) -> int:
        """Jobs taken and not finished (waiting, running, or timed out and not returned)."""
        return self._busy

    @property
    def utilization(self) -> float:
        """The busy share of threads (0 to 1)."""
        return min(1.0, self._busy / self.concurrency)

    def held(self) -> set[uuid.UUID]:
        """The jobs taken and not finished: waiting, running, or timed out and not returned."""
        with self._lock:
            return set(self._runs)

    def running(self) -> list[Run]:
        """Attempts that have not reported an outcome yet."""
        with self._lock:
            return [r for r in self._runs.values() if not r.reported]

    def in_flight(self) -> int:
        """Attempts whose outcome is not yet in the completer's hands.

        A run stays in flight until its thread has handed its outcome over; only runs the
        watchdog ended (their outcome is already handed over) no longer count.
        """
        with self._lock:
            return sum(1 for r in self._runs.values() if not r.expired)

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no attempt is in flight; False if ``timeout`` passed first."""
        deadline = time.monotonic() + timeout
        with self._idle:
            self._idle_waiters += 1
            try:
                while any(not r.expired for r in self._runs.values()):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self._idle.wait(left)
            finally:
                self._idle_waiters -= 1
        return True

    def start(self) -> None:
        """Start the job threads."""
        for thread in self._threads:
            thread.start()

    def shutdown(self) -> None:
        """Let idle job threads end (busy ones are daemons and die with the process)."""
        for _ in self._threads:
            self._inbox.put(None)

    def _serve(self) -> None:
        while (run := self._inbox.get()) is not None:
            self._execute(run)

    # -- running -------------------------------------------------------------------------------

    def submit(self, claimed: Sequence[ClaimedJob]) -> None:
        """Queue a claimed batch for the job threads (one lock for the batch, not one a job)."""
        for run in self._take(claimed):
            self._inbox.put(run)

    def run_here(self, claimed: ClaimedJob) -> Run:
        """Run one claimed job in the calling thread (the testing kit's in-process runs) and
        return its attempt; the outcome goes to ``report`` as from a job thread."""
        (run,) = self._take([claimed])
        self._execute(run, in_caller=True)
        return run

    def _take(self, claimed: Sequence[ClaimedJob]) -> list[Run]:
        """Count claimed jobs as taken and make their runs."""
        now = time.monotonic()
        tracer = tracing.tracer()  # once for the batch: None unless OpenTelemetry is set up
        runs = [
            Run(
                job,
                JobContext(
                    job_id=job.job_id,
                    task=job.task,
                    attempt=job.attempt,
                    # Decoded on the job's thread (``read_claimed``): nothing a row holds may
                    # fail the poller, which has the rest of the claim in hand.
                    params={},
                    depends_on=job.depends_on,
                    queue=job.queue,
                    node=self._supervisor.node_id,
                    _supervisor=self._supervisor,
                    # The claim a moment ago was the first "still mine?" check; the next is due
                    # in a second (so a job that waited long for a thread is checked first).
                    _last_check=now,
                ),
                now,
                tracer=tracer,
            )
            for job in claimed
        ]
        with self._lock:
            self._busy += len(runs)
            for run in runs:
                self._busy_in[run.claimed.queue] += 1
                self._runs[run.claimed.job_id] = run
        return runs

    def _execute(self, run: Run, *, in_caller: bool = False) -> None:
        sentry = error_reports()
        if sentry is None or not sentry.active():
            self._execute_here(run, in_caller)
            return
        scope = sentry.attempt_scope(run.claimed, run.ctx.node, new_trace=not in_caller)
        with scope as run.sentry_scope:  # never raises: a scope it cannot open is no scope
            self._execute_here(run, in_caller)

    def _execute_here(self, run: Run, in_caller: bool) -> None:
        began = time.monotonic()
        try:
            with self._app.app_context(), run.ctx.bound():
                attempts = self._attempts
                tracer = run.tracer  # no span without one
                outcome = attempts.run(run) if tracer is None else attempts.traced(run, tracer)
            self._finish(run, outcome)
        except Exception as exc:
            log.exception("ratchet worker failed while running job %s", run.claimed.job_id)
            self._fail_unexpectedly(run, exc)
        except BaseException:  # never let a pool thread die silently
            log.exception("ratchet worker failed while running job %s", run.claimed.job_id)
            if in_caller:  # Ctrl-C or exit() in the caller's own thread: theirs to handle
                raise
        finally:
            took = time.monotonic() - began
            with self._lock:
                mean = took if self._mean_run is None else self._mean_run
                self._mean_run = mean + (took - mean) * 0.1
                self._busy -= 1
                self._busy_in[run.claimed.queue] -= 1
                if self._runs.get(run.claimed.job_id) is run:
                    del self._runs[run.claimed.job_id]
                if self._idle_waiters:
                    self._idle.notify_all()
            self._on_free()

    def _fail_unexpectedly(self, run: Run, exc: Exception) -> None:
        """End a job whose attempt broke in ratchet's own handling, for good: the row it was
        claimed from is the likely cause, and would break the next attempt the same way."""
        try:
            self._finish(run, failed(run, exc, permanent=True))
        except Exception:
            log.exception("job %s could not be reported as failed", run.claimed.job_id)

    def _finish(self, run: Run, outcome: Finished | None) -> None:
        with run.lock:
            if run.reported or outcome is None:
                return  # timed out (already reported) or canceled: nothing to write
            run.reported = True
        self._hand_over(run, outcome, run.failure)

    def _hand_over(self, run: Run, outcome: Finished, failure: BaseException | None) -> None:
        """Give the completer an attempt's outcome, the one time it is reported; the error of a
        failed attempt goes to Sentry first, where the app set it up."""
        if failure is not None and (sentry := error_reports()) is not None:
            sentry.report_failure(failure, run.claimed, outcome, run.ctx.node, run.sentry_scope)
        self._report(outcome)

    # -- the watchdog --------------------------------------------------------------------------

    def expire(self, now: float) -> list[Run]:
        """End attempts past their deadline: report a timeout failure, stop the thread."""
        expired = []
        for run in self.running():
            deadline = run.deadline
            if deadline is None or now < deadline:
                continue
            with run.lock:
                if run.reported:
                    continue
                run.reported = run.expired = True
                run.ctx.stop()
                if run.in_user_code and run.thread_id is not None and not run.on_loop:
                    # Only while the job's own code runs: never inside ratchet's bookkeeping.
                    # (ctx.stop() above has cancelled a coroutine instead.)
                    ctypes.pythonapi.PyThreadState_SetAsyncExc(
                        ctypes.c_ulong(run.thread_id), ctypes.py_object(JobTimeout)
                    )
            timeout = JobTimeout(f"ran longer than its timeout of {run.claimed.timeout:g}s")
            self._hand_over(run, failed(run, timeout), timeout)
            # A timeout is a failed call, and a thread stuck for good must not hold a
            # half-open breaker's trial place for ever.
            self._attempts.settle_breaker(run, False)
            expired.append(run)
        with self._idle:
            self._idle.notify_all()
        return expired

    def stop_canceled(self, checked: list[Run], still_mine: set[uuid.UUID]) -> list[Run]:
        """Ask the ``checked`` runs the database no longer lists as this node's to stop.

        Only runs that were part of the check are judged: one that started after it was not
        asked about, and is not known to be canceled.
        """
        stopped = []
        for run in checked:
            if not run.reported and run.claimed.job_id not in still_mine:
                run.ctx.stop()
                stopped.append(run)
        return stopped

    def take_waiting(self) -> list[Run]:
        """Take back the jobs that were claimed but have not started (for a drain)."""
        waiting = []
        while True:
            try:
                run = self._inbox.get_nowait()
            except queue.Empty:
                break
            if run is None:
                continue
            with run.lock:
                run.reported = run.expired = True
            with self._lock:
                self._busy -= 1
                self._busy_in[run.claimed.queue] -= 1
                self._runs.pop(run.claimed.job_id, None)
            waiting.append(run)
        with self._idle:
            self._idle.notify_all()
        return waiting

    def abandon(self) -> list[Run]:
        """Drain timed out: mark every unfinished attempt reported and return them."""
        left = []
        for run in self.running():
            with run.lock:
                if not run.reported:
                    run.reported = run.expired = True
                    run.ctx.stop()
                    left.append(run)
        with self._idle:
            self._idle.notify_all()
        return left
