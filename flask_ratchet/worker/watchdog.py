"""The worker's watchdog: jobs past their timeout are stopped, and so are jobs canceled while
running (read from the database every :data:`CANCEL_SWEEP_EVERY` seconds); a claim past its
bound has its connection cut (:mod:`.deadline`); running jobs' log lines are stored every
:data:`LOG_FLUSH_EVERY` seconds.

The cancel sweep also records when attempts started (``started_at`` of their hot rows, see
:mod:`flask_ratchet.substates`): one statement for every attempt a thread took since the last
sweep and that still runs. Attempts shorter than a sweep are never written at all, so the job
threads and the claim pay nothing for it, and a long one is shown started within a second.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from ..services import Service
from ..substates import attempt_started_at
from .deadline import ClaimDeadline
from .executor import Executor
from .logs import claimed_fields
from .runs import Run

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
        new = [r for r in runs if not r.start_recorded]
        ids = [r.claimed.job_id for r in runs]
        try:
            if new:  # a write: SQLite's begin takes its write lock first
                with self._store.begin(self._engine) as conn:
                    self._store.executions.mark_started(conn, self._node_id, _starts(new))
                    mine = self._store.executions.still_running(conn, self._node_id, ids)
            else:
                with self._engine.connect() as conn:
                    mine = self._store.executions.still_running(conn, self._node_id, ids)
        except SQLAlchemyError:
            return
        for run in new:
            run.start_recorded = True
        for run in self._executor.stop_canceled(runs, mine):
            log.info(
                "job %s was canceled while running; its result will be discarded",
                run.claimed.job_id,
                extra=claimed_fields(run.claimed, self._node_id),
            )


def _starts(runs: list[Run]) -> list[tuple[uuid.UUID, datetime]]:
    """When each run's thread took it, on the database's clock (see
    :func:`~flask_ratchet.substates.attempt_started_at`)."""
    return [
        (r.claimed.job_id, attempt_started_at(r.claimed.picked_at, r.started - r.received))
        for r in runs
    ]
