"""Runs claimed jobs on a pool of threads, each in a fresh Flask app context.

A job runs outside any transaction. What it returns or raises becomes a :class:`Finished`
outcome for the completer. The watchdog ends attempts that run past their timeout (through the
normal failure path) and stops jobs that were canceled while running; a late return of such a job
is discarded.

Before a job's code runs it passes two gates, in this order (after the "canceled?" check):

1. its service's circuit breaker (:mod:`flask_ratchet.breaker`, state per worker process), if
   its task has one: while the breaker is open the job is deferred by the rest of the open window;
2. a permit of its resource (:mod:`flask_ratchet.store.resources`), if it names one: with every
   permit out the job is deferred by the resource's ``retry_delay``.

A deferred job goes back to PENDING without spending an attempt (``Outcome.RELEASE``) and
without an execution row. The permit is given back as soon as the job's code has returned or
raised; then the breaker learns the outcome. Jobs with neither pay nothing for the gates.
"""

from __future__ import annotations

import asyncio
import ctypes
import importlib
import inspect
import logging
import queue
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

from flask import Flask

from .. import events, payload, tracing
from ..breaker import Breakers, BreakerState, CircuitBreaker
from ..context import JobContext
from ..context import context_parameter as _context_parameter
from ..errors import PayloadError, PayloadTooLarge, TaskNotAllowed, UnknownTask, UnreadableJob
from ..registry import Task
from ..retry import Decision, describe, format_traceback
from ..runtime import send
from ..store.types import ClaimedJob, Finished, Outcome, Permit
from .claimed import read_claimed, retry_decision
from .coroutines import run_coroutine
from .logs import claimed_fields
from .permits import PERMIT_ERROR_DELAY, PermitGate, WorkerSide

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

    from ..runtime import Runtime

log = logging.getLogger("flask_ratchet.worker")

#: :mod:`.sentry` once a job found ``sentry_sdk`` imported; ``False`` when that module could not
#: be imported (sentry-sdk older than 2.0, a broken install); ``None`` until then.
_sentry: ModuleType | Literal[False] | None = None


def error_reports() -> ModuleType | None:
    """The Sentry hooks (:mod:`.sentry`) where the app imported ``sentry_sdk`` and they can
    work with it, else ``None``: one dictionary lookup a job in a process without Sentry."""
    global _sentry
    if "sentry_sdk" not in sys.modules:
        return None
    if _sentry is None:
        try:
            sentry = importlib.import_module(".sentry", __package__)
        except Exception:  # never a failed job over it: the reports are off, said once
            log.warning(
                "sentry_sdk is imported but job errors are not reported to it: flask-ratchet "
                "needs sentry-sdk 2.0 or later",
                exc_info=True,
            )
            _sentry = False
        else:
            _sentry = sentry
    return _sentry or None


#: Claimed jobs wait for a thread about this long at most (at the recent mean run time): enough
#: to keep threads busy while the next claim is on its way, short enough not to hoard work that
#: other workers could run.
PREFETCH_HORIZON = 0.05
#: The most jobs that may wait, however short the jobs are: this many per thread, but never
#: fewer than ``MAX_WAITING_FLOOR`` in all (so that one or two threads still claim in batches
#: large enough to spread each claim's fixed cost).
MAX_WAITING_PER_THREAD = 20
MAX_WAITING_FLOOR = 200


class JobTimeout(BaseException):
    """Raised inside a job's thread when its attempt runs past its timeout.

    A ``BaseException`` so that a task's ``except Exception`` does not swallow it.
    """


@dataclass
class Run:
    """One attempt in flight."""

    claimed: ClaimedJob
    ctx: JobContext
    received: float  # monotonic time the claim arrived
    started: float = 0.0
    started_at: datetime | None = None
    thread_id: int | None = None
    in_user_code: bool = False
    #: Running an ``async def`` task's coroutine: stopped by cancelling it, never by raising
    #: into the thread (which would land inside the event loop's own code).
    on_loop: bool = False
    reported: bool = False  # an outcome was handed to the completer: later ones are discarded
    expired: bool = False  # ended by the watchdog (timeout, drain): its thread may still be busy
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: What the attempt raised, if it failed (for the testing kit, which may raise it again).
    failure: BaseException | None = None
    #: The breaker that let this attempt through and has not heard how it went.
    breaker: CircuitBreaker | None = None
    breaker_epoch: int | None = None  # the breaker state that let the attempt through
    #: The attempt's Sentry scope, when Sentry is set up (see :mod:`.sentry`).
    sentry_scope: object = None

    @property
    def deadline(self) -> float | None:
        timeout = self.claimed.timeout
        # ``not timeout > 0`` also holds for NaN: a stored timeout that is not a positive
        # number never expires an attempt (the job fails as unreadable instead).
        if timeout is None or not self.started or not timeout > 0:
            return None
        return self.started + timeout


class Executor:
    """A fixed pool of job threads that reports every outcome through ``report``."""

    def __init__(
        self,
        app: Flask,
        state: Runtime,
        supervisor: WorkerSide,
        report: Callable[[Finished], None],
        concurrency: int,
        on_free: Callable[[], None],
        prefetch: int | None = None,
    ) -> None:
        self._app = app
        self._state = state
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
        for thread in self._threads:
            thread.start()
        self._runs: dict[uuid.UUID, Run] = {}
        # Jobs taken and not finished: waiting, running, or timed out and not returned yet.
        self._busy = 0
        self._busy_in: Counter[str] = Counter()  # the same, by queue
        # Moving average of attempts' run time, in seconds; None until one has ended.
        self._mean_run: float | None = None
        self._prefetch = prefetch
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        #: This process's circuit breakers, by service.
        self.breakers = Breakers(state.config.circuit_breakers)
        self._permits = PermitGate(supervisor)

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
            while any(not r.expired for r in self._runs.values()):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

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
                tracer = tracing.tracer()  # None unless OpenTelemetry is set up: no span
                outcome = self._attempt(run) if tracer is None else self._traced(run, tracer)
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
                self._idle.notify_all()
            self._on_free()

    def _attempt(self, run: Run) -> Finished | None:
        claimed = run.claimed
        run.started_at = datetime.now(UTC)
        run.started = time.monotonic()
        run.thread_id = threading.get_ident()
        if run.ctx.is_canceled():  # canceled between the claim and now
            _not_mine(claimed, "not run")
            return None
        try:
            args, kwargs, params = read_claimed(run.claimed)
            if params is not None:
                run.ctx.params = params
            task = self._state.registry.for_run(claimed.task, self._state.config.allowed_modules)
        except UnknownTask as exc:
            return self._refuse(run, exc)
        except (UnreadableJob, TaskNotAllowed) as exc:
            return self._failed(run, exc, permanent=True)
        breaker = self.breakers.get(task.service_name, task.circuit_breaker)
        if breaker is not None:
            was = breaker.state
            wait, run.breaker_epoch = breaker.admit()
            if wait is not None:
                why = f"the circuit breaker of {breaker.name!r} is {breaker.state}"
                return self._defer(run, wait, why)
            if was is BreakerState.OPEN:
                log.info(
                    "circuit breaker of %r is half-open: job %s is a trial call",
                    breaker.name,
                    claimed.job_id,
                )
            run.breaker = breaker
        held = False
        if claimed.resource is not None:
            answer = self._permits.acquire(claimed)
            if answer is None or answer.permit in (Permit.FULL, Permit.GONE, Permit.UNREADABLE):
                self._settle_breaker(run, None)  # it did not run: free its trial place
                if answer is None:
                    why = f"no permit of {claimed.resource!r} could be asked for"
                    return self._defer(run, PERMIT_ERROR_DELAY, why)
                if answer.permit is Permit.GONE:
                    _not_mine(claimed, "not run")
                    return None
                why = (
                    answer.reason
                    or f"all {answer.in_use} permits of {claimed.resource!r} are in use"
                )
                return self._defer(run, answer.retry_delay, why)
            held = answer.permit is Permit.GRANTED
        failure: BaseException | None = None
        try:
            value = self._call(run, task, args, kwargs)
        except BaseException as exc:
            failure = exc
        finally:
            if held:
                self._permits.release(claimed)
        self._settle_breaker(run, failure is None)
        if failure is not None:
            if isinstance(failure, KeyboardInterrupt | SystemExit):
                raise failure
            if isinstance(failure, asyncio.CancelledError) and run.ctx.is_canceled():
                # Stopped from outside: a timeout was reported already, a cancel has no outcome.
                _not_mine(claimed, "its coroutine was cancelled")
                return None
            return self._failed(run, failure)
        if run.ctx.is_canceled():
            _not_mine(claimed, "its result is discarded")
            return None
        try:
            result = payload.encode_value(
                f"the result of {claimed.task}", value, self._state.config.max_payload_bytes
            )
        except (PayloadError, PayloadTooLarge) as exc:
            return self._failed(run, exc, permanent=True)
        return self._outcome(run, Outcome.SUCCEEDED, result=result)

    def _traced(self, run: Run, tracer: Tracer) -> Finished | None:
        """:meth:`_attempt` inside the run's CONSUMER span (see :mod:`flask_ratchet.tracing`),
        which records the outcome and, for a failure, the error as the job stores it."""
        claimed = run.claimed
        with tracing.processing(
            tracer,
            queue=claimed.queue,
            job_id=str(claimed.job_id),
            task=claimed.task,
            attempt=claimed.attempt,
            node=self._supervisor.node_id,
            stored=claimed.trace_context,
        ) as span:
            outcome = self._attempt(run)
            if outcome is not None:  # None: canceled or handed back, nothing is written
                failure = run.failure if outcome.error is not None else None
                tracing.ran(span, outcome.outcome.value, failure, outcome.error, outcome.traceback)
            return outcome

    def _call(self, run: Run, task: Task, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """Run the job's own code and return what it returns (or raise what it raises)."""
        kwargs = dict(kwargs)
        name = _context_parameter(task.func)
        if name is not None and name not in kwargs:
            kwargs[name] = run.ctx
        if events.wanted(events.job_started):  # past the gates: the attempt really starts
            claimed = run.claimed
            data = {"job_id": claimed.job_id, "task": claimed.task, "attempt": claimed.attempt}
            send(self._app, events.job_started, data)
        with run.lock:
            run.in_user_code = True
        try:
            value = task.func(*args, **kwargs)
            if inspect.iscoroutine(value):  # an async def task: run it on this thread's loop
                with run.lock:
                    run.on_loop = True
                return run_coroutine(value, run.ctx)
            return value
        finally:
            self._leave_user_code(run)

    def _refuse(self, run: Run, exc: UnknownTask) -> Finished | None:
        """Hand back a job whose task this worker does not know, for a worker that does; or,
        once no worker has run it for the grace, fail it for good saying who refused it."""
        run.ctx.take_lines()
        refused = self._supervisor.refuse(run.claimed, str(exc))
        if refused is None:  # the database did not answer: hand it back as a deferral would
            return self._defer(run, PERMIT_ERROR_DELAY, f"could not hand it back: {exc}")
        if refused.dead_letter is not None:
            return self._failed(run, UnknownTask(refused.dead_letter), permanent=True)
        return None  # handed back (or no longer this worker's): nothing more to write

    def _defer(self, run: Run, delay: float, why: str) -> Finished:
        """Hand the job back to PENDING, due in ``delay`` seconds, its attempt not spent."""
        log.info(
            "job %s (%s) deferred by %.2fs without spending an attempt: %s",
            run.claimed.job_id,
            run.claimed.task,
            delay,
            why,
            extra=claimed_fields(run.claimed, self._supervisor.node_id),
        )
        # Not stored with the job (the context captures the line): a job may be deferred many
        # times over, and the worker's own log has it.
        run.ctx.take_lines()
        return self._outcome(run, Outcome.RELEASE, delay=delay)

    def _settle_breaker(self, run: Run, success: bool | None) -> None:
        """Tell the breaker that let the attempt through how it went (``None``: it never ran).
        Once only: the watchdog may have reported a timeout while the job's code still runs."""
        with run.lock:
            breaker, run.breaker = run.breaker, None
        if breaker is None:
            return
        if success is None:
            breaker.abandon(run.breaker_epoch)
            return
        changed = breaker.record(success, run.breaker_epoch)
        if changed is BreakerState.OPEN:
            log.warning(
                "circuit breaker of %r opened: its jobs are deferred for %gs",
                breaker.name,
                breaker.settings.open_for,
            )
        elif changed is BreakerState.CLOSED:
            log.info("circuit breaker of %r closed: its trial calls succeeded", breaker.name)

    def _leave_user_code(self, run: Run) -> None:
        with run.lock:
            run.in_user_code = False
            if run.expired and run.thread_id is not None:
                # Drop a timeout that was raised into the thread but not delivered yet (the
                # watchdog marks the run expired, under this lock, before it raises one).
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(run.thread_id), None)

    def _failed(self, run: Run, exc: BaseException, *, permanent: bool = False) -> Finished:
        claimed = run.claimed
        run.failure = exc
        error, trace = describe(exc), format_traceback(exc)
        if isinstance(exc, JobTimeout):
            error = f"JobTimeout: ran longer than its timeout of {claimed.timeout:g}s"
        decision = Decision(retry=False) if permanent else retry_decision(claimed, exc)
        if not decision.retry:
            return self._outcome(run, Outcome.FAILED, error=error, traceback=trace)
        return self._outcome(run, Outcome.RETRY, error=error, traceback=trace, delay=decision.delay)

    def _outcome(self, run: Run, outcome: Outcome, **fields: Any) -> Finished:
        claimed = run.claimed
        now = time.monotonic()
        waited = (claimed.picked_at - claimed.scheduled_time).total_seconds()
        return Finished(
            job_id=claimed.job_id,
            outcome=outcome,
            task=claimed.task,
            attempt=claimed.attempt,
            started_at=run.started_at,
            duration_ms=(now - run.started) * 1000 if run.started else None,
            queue_wait_ms=(max(waited, 0.0) + (run.started - run.received)) * 1000,
            logs=run.ctx.take_lines(),
            follow_up=claimed.follow_up,
            batch_id=claimed.batch_id,
            queue=claimed.queue,
            **fields,
        )

    def _fail_unexpectedly(self, run: Run, exc: Exception) -> None:
        """End a job whose attempt broke in ratchet's own handling, for good: the row it was
        claimed from is the likely cause, and would break the next attempt the same way."""
        try:
            self._finish(run, self._failed(run, exc, permanent=True))
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
            self._hand_over(run, self._failed(run, timeout), timeout)
            # A timeout is a failed call, and a thread stuck for good must not hold a
            # half-open breaker's trial place for ever.
            self._settle_breaker(run, False)
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


def _not_mine(claimed: ClaimedJob, what: str) -> None:
    """Log that the job was canceled or recovered elsewhere, and what became of this attempt;
    there is no outcome to write."""
    log.info(
        "job %s is no longer this worker's (canceled or recovered elsewhere): %s",
        claimed.job_id,
        what,
        extra=claimed_fields(claimed, None),
    )
