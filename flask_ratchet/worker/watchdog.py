"""The worker's watchdog: jobs past their timeout are stopped, and so are jobs canceled while
running (read from the database every :data:`CANCEL_SWEEP_EVERY` seconds); a claim past its
bound has its connection cut (:mod:`.deadline`); running jobs' log lines are stored every
:data:`LOG_FLUSH_EVERY` seconds."""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from ..services import Service
from .deadline import ClaimDeadline
from .executor import Executor
from .logs import claimed_fields

if TYPE_CHECKING:
    from ..store import Store

log = logging.getLogger("flask_ratchet.worker")

#: How often the watchdog looks for timeouts, and for jobs canceled while running.
WATCH_EVERY = 0.2
CANCEL_SWEEP_EVERY = 1.0
#: How often a running attempt's log lines so far are stored, so that its page shows them
#: while it runs (the rest are stored with its outcome).
LOG_FLUSH_EVERY = 3.0


class Watchdog(Service):
    """Stops the ``executor``'s jobs that timed out or were canceled while running."""

    after_error = WATCH_EVERY

    def __init__(
        self,
        executor: Executor,
        store: Store,
        engine: Engine,
        node_id: str,
        stop: threading.Event,
        *,
        claims: ClaimDeadline | None = None,
    ) -> None:
        super().__init__("ratchet-watchdog", stop)
        self._claims = claims
        self._executor = executor
        self._store = store
        self._engine = engine
        self._node_id = node_id
        self._next_sweep = time.monotonic()
        self._next_flush = time.monotonic() + LOG_FLUSH_EVERY

    def run_once(self) -> float:
        if self._claims is not None:
            self._claims.enforce(time.monotonic())
        for run in self._executor.expire(time.monotonic()):
            log.warning(
                "job %s (%s) timed out after %ss",
                run.claimed.job_id,
                run.claimed.task,
                run.claimed.timeout,
                extra=claimed_fields(run.claimed, self._node_id),
            )
        if time.monotonic() >= self._next_sweep:
            self._next_sweep = time.monotonic() + CANCEL_SWEEP_EVERY
            self._sweep_canceled()
        if time.monotonic() >= self._next_flush:
            self._next_flush = time.monotonic() + LOG_FLUSH_EVERY
            self._flush_logs()
        return WATCH_EVERY

    def _flush_logs(self) -> None:
        """Store the lines the running attempts logged since the last flush, in one statement.
        Lines the database did not take go back to their attempts, for the next flush or the
        outcome."""
        taken = [
            (run, run.ctx.take_lines(final=False))
            for run in self._executor.running()
            if run.started
        ]
        taken = [(run, lines) for run, lines in taken if lines]
        if not taken:
            return
        try:
            with self._store.begin(self._engine) as conn:
                self._store.executions.add_logs(
                    conn, [(run.claimed.job_id, run.claimed.attempt, lines) for run, lines in taken]
                )
        except SQLAlchemyError:
            for run, lines in taken:
                run.ctx.give_back_lines(lines)
            log.warning("could not store running jobs' log lines; trying again", exc_info=True)

    def _sweep_canceled(self) -> None:
        runs = [r for r in self._executor.running() if r.started]
        if not runs:
            return
        try:
            with self._engine.connect() as conn:
                mine = self._store.executions.still_running(
                    conn, self._node_id, [r.claimed.job_id for r in runs]
                )
        except SQLAlchemyError:
            return
        for run in self._executor.stop_canceled(runs, mine):
            log.info(
                "job %s was canceled while running; its result will be discarded",
                run.claimed.job_id,
                extra=claimed_fields(run.claimed, self._node_id),
            )
