"""One attempt in flight (:class:`Run`) and what it ends as: the :class:`Finished` outcome the
completer writes (:func:`outcome_of`, :func:`failed`); and the Sentry hooks an attempt reports
through, imported only where the app imported ``sentry_sdk`` (:func:`error_reports`)."""

from __future__ import annotations

import importlib
import logging
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from datetime import datetime
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

from ..breaker import CircuitBreaker
from ..context import JobContext
from ..retry import NO_RULES, Decision, RetryRules, describe, format_traceback
from ..store.types import ClaimedJob, Finished, Outcome
from .claimed import retry_decision
from .logs import claimed_fields

if TYPE_CHECKING:  # opentelemetry is the otel extra
    from opentelemetry.trace import Tracer

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
    #: Whether the watchdog has written when the attempt started (``started_at`` of its row).
    start_recorded: bool = False
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
    #: Its task's retry rules, once the task is known (from the registry, not the row).
    rules: RetryRules = NO_RULES
    #: The tracer its run is recorded with (:func:`flask_ratchet.tracing.tracer`, looked up
    #: once per claimed batch), ``None`` while tracing is off.
    tracer: Tracer | None = None

    @property
    def deadline(self) -> float | None:
        timeout = self.claimed.timeout
        # ``not timeout > 0`` also holds for NaN: a stored timeout that is not a positive
        # number never expires an attempt (the job fails as unreadable instead).
        if timeout is None or not self.started or not timeout > 0:
            return None
        return self.started + timeout


def failed(run: Run, exc: BaseException, *, permanent: bool = False) -> Finished:
    """The outcome of an attempt that raised ``exc``: a retry, as the job's options and the
    error decide, or FAILED for good (``permanent``: running it again would fail the same way)."""
    claimed = run.claimed
    run.failure = exc
    error, trace = describe(exc), format_traceback(exc)
    if isinstance(exc, JobTimeout):
        error = f"JobTimeout: ran longer than its timeout of {claimed.timeout:g}s"
    # A timeout is the worker's verdict, no exception of the task's: retry_on does not filter it.
    rules = replace(run.rules, retry_on=None) if isinstance(exc, JobTimeout) else run.rules
    decision = Decision(retry=False) if permanent else retry_decision(claimed, exc, rules)
    if not decision.retry:
        return outcome_of(run, Outcome.FAILED, error=error, traceback=trace)
    return outcome_of(run, Outcome.RETRY, error=error, traceback=trace, delay=decision.delay)


def outcome_of(run: Run, outcome: Outcome, **fields: Any) -> Finished:
    """The attempt's ``outcome`` for the completer, with its timings and captured log lines."""
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


def not_mine(claimed: ClaimedJob, what: str) -> None:
    """Log that the job was canceled or recovered elsewhere, and what became of this attempt;
    there is no outcome to write."""
    log.info(
        "job %s is no longer this worker's (canceled or recovered elsewhere): %s",
        claimed.job_id,
        what,
        extra=claimed_fields(claimed, None),
    )
