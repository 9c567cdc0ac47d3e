"""One claimed job's attempt, in the thread that runs it: its row read as untrusted, the gates
it passes before its code runs, the task called, and what that makes of it.

The gates, in this order (after the "canceled?" check):

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
import inspect
import logging
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from flask import Flask

from .. import events, payload, tracing
from ..breaker import Breakers, BreakerState
from ..context import context_parameter
from ..delivery import send
from ..errors import (
    ConfigError,
    PayloadError,
    PayloadTooLarge,
    TaskNotAllowed,
    UnknownTask,
    UnreadableJob,
)
from ..registry import Task
from ..sealing import is_sealed
from ..store.types import Finished, Outcome, Permit
from .claimed import read_claimed
from .coroutines import run_coroutine
from .logs import claimed_fields
from .permits import PERMIT_ERROR_DELAY, PermitGate, WorkerSide
from .runs import Run, failed, not_mine, outcome_of

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

    from ..runtime import Runtime

log = logging.getLogger("flask_ratchet.worker")

#: The error of a job canceled for not starting by its deadline (``expires``).
EXPIRED = "expired"


def _past_deadline(run: Run, deadline: datetime) -> bool:
    """Whether the attempt starts after ``deadline``: the claim's time (the database's clock)
    plus how long the job has waited in this worker since (this process's monotonic clock)."""
    waited = max(run.started - run.received, 0.0)
    return run.claimed.picked_at + timedelta(seconds=waited) > deadline


class Attempts:
    """Runs attempts for one worker (or the testing kit's in-process runs): its app, its
    process's circuit breakers and the permits it holds."""

    def __init__(self, app: Flask, runtime: Runtime, supervisor: WorkerSide) -> None:
        self._app = app
        self._runtime = runtime
        self._supervisor = supervisor
        #: This process's circuit breakers, by service.
        self.breakers = Breakers(runtime.config.circuit_breakers)
        self._permits = PermitGate(supervisor)

    def run(self, run: Run) -> Finished | None:
        """Run one attempt in this thread (inside its app context); its outcome, or ``None``
        when there is nothing to write (canceled, or handed back to another worker)."""
        claimed = run.claimed
        run.started_at = datetime.now(UTC)
        run.started = time.monotonic()
        run.thread_id = threading.get_ident()
        if run.ctx.is_canceled():  # canceled between the claim and now
            not_mine(claimed, "not run")
            return None
        if claimed.expires_at is not None and _past_deadline(run, claimed.expires_at):
            return self._expire(run)
        try:
            args, kwargs, params = read_claimed(run.claimed, self._runtime.keyring)
            if params is not None:
                run.ctx.params = params
            task = self._runtime.registry.for_run(
                claimed.task, self._runtime.config.allowed_modules
            )
        except UnknownTask as exc:
            return self._refuse(run, exc)
        except (UnreadableJob, TaskNotAllowed) as exc:
            return failed(run, exc, permanent=True)
        run.rules = task.retry
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
                self.settle_breaker(run, None)  # it did not run: free its trial place
                if answer is None:
                    why = f"no permit of {claimed.resource!r} could be asked for"
                    return self._defer(run, PERMIT_ERROR_DELAY, why)
                if answer.permit is Permit.GONE:
                    not_mine(claimed, "not run")
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
        self.settle_breaker(run, failure is None)
        if failure is not None:
            if isinstance(failure, KeyboardInterrupt | SystemExit):
                raise failure
            if isinstance(failure, asyncio.CancelledError) and run.ctx.is_canceled():
                # Stopped from outside: a timeout was reported already, a cancel has no outcome.
                not_mine(claimed, "its coroutine was cancelled")
                return None
            return failed(run, failure)
        if run.ctx.is_canceled():
            not_mine(claimed, "its result is discarded")
            return None
        try:
            result = payload.encode_value(
                f"the result of {claimed.task}", value, self._runtime.config.max_payload_bytes
            )
            clear = None
            if is_sealed(claimed.payload):  # an encrypted job's result is sealed too
                clear, result = result, self._runtime.keyring.seal(result, claimed.job_id, "result")
        except (PayloadError, PayloadTooLarge, ConfigError) as exc:
            return failed(run, exc, permanent=True)
        return outcome_of(run, Outcome.SUCCEEDED, result=result, clear_result=clear)

    def traced(self, run: Run, tracer: Tracer) -> Finished | None:
        """:meth:`run` inside the run's CONSUMER span (see :mod:`flask_ratchet.tracing`),
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
            outcome = self.run(run)
            if outcome is not None:  # None: canceled or handed back, nothing is written
                failure = run.failure if outcome.error is not None else None
                tracing.ran(span, outcome.outcome.value, failure, outcome.error, outcome.traceback)
            return outcome

    def _call(self, run: Run, task: Task, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """Run the job's own code and return what it returns (or raise what it raises)."""
        kwargs = dict(kwargs)
        name = context_parameter(task.func)
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
            return failed(run, UnknownTask(refused.dead_letter), permanent=True)
        return None  # handed back (or no longer this worker's): nothing more to write

    def _expire(self, run: Run) -> Finished | None:
        """Cancel a job whose deadline passed before this attempt could start ("expired"),
        instead of running it late; nothing to write after that."""
        claimed = run.claimed
        run.ctx.take_lines()
        ended = self._supervisor.expire(claimed, EXPIRED)
        if ended is None:  # the database did not answer: claimed again, it expires then
            return self._defer(run, PERMIT_ERROR_DELAY, "it expired, and could not be canceled")
        if not ended:
            not_mine(claimed, "not run")
            return None
        log.warning(
            "job %s (%s) canceled: expired, not started by its deadline %s",
            claimed.job_id,
            claimed.task,
            claimed.expires_at,
            extra=claimed_fields(claimed, self._supervisor.node_id),
        )
        return None

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
        return outcome_of(run, Outcome.RELEASE, delay=delay)

    def settle_breaker(self, run: Run, success: bool | None) -> None:
        """Tell the breaker that let the attempt through how it went (``None``: it never ran).
        Once only: the watchdog may have reported a timeout while the job's code still runs."""
        if run.breaker is None:  # the common case, no breaker: nothing to tell, no lock taken
            return  # (run.breaker only ever goes from a breaker to None)
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
