"""The worker's recurring-job firer: registers the declared masters, then fires due ones.

Every worker runs one. It reads when the next occurrence is due (by the database's clock) and
sleeps until then, but never longer than :data:`RECHECK`, so that masters registered or changed
elsewhere are seen within a second. A due occurrence is fired in one short write transaction
(:meth:`RecurringStore.fire_due`), so an every-second schedule fires within milliseconds of each
second. Firers on several nodes never create the same child twice: see
:mod:`flask_ratchet.store.recurring`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING

from flask import Flask
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from ..config import RatchetConfig
from ..store import SqlJobStore
from ..store.recurring import FIRE_BATCH, FirePass, RecurringStore

if TYPE_CHECKING:
    from ..extension import RatchetState

log = logging.getLogger("flask_ratchet.worker")

#: Longest sleep between passes: how soon a master registered elsewhere is noticed.
RECHECK = 1.0
#: Sleep when a due master is held by another node's pass (it is about to advance it).
HELD_ELSEWHERE = 0.05
#: Sleep after a database error.
AFTER_ERROR = 1.0
#: Added to each sleep so that the next pass finds the occurrence due, not a hair early.
MARGIN = 0.002


class RecurringFirer(threading.Thread):
    """Fires the due recurring masters of one database until ``stop`` is set."""

    def __init__(
        self,
        store: SqlJobStore,
        engine: Engine,
        config: RatchetConfig,
        stop: threading.Event,
        *,
        register: Callable[[], object] | None = None,
        on_fired: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(name="ratchet-recurring", daemon=True)
        self._store = store
        self._recurring = RecurringStore(store)
        self._engine = engine
        self._threshold = timedelta(seconds=config.recurring_misfire_threshold)
        self._disabled = config.recurring_disabled
        self._stop = stop
        self._register = register
        self._on_fired = on_fired
        self.passes = 0
        self.fired = 0

    def fire_pass(self) -> FirePass:
        """One pass: create the children of every due master, in one transaction."""
        with self._store.begin(self._engine) as conn:
            result = self._recurring.fire_due(conn, self._threshold, self._disabled)
        self.passes += 1
        self.fired += len(result.fired)
        if result.fired:
            log.info("fired %d recurring jobs", len(result.fired))
            if self._on_fired is not None:
                self._on_fired()
        return result

    def step(self) -> FirePass:
        """Look (read only) whether an occurrence is due; fire if one is."""
        with self._engine.connect() as conn:
            seen = self._recurring.peek(conn, self._disabled)
        if seen.next_due is None or seen.next_due > seen.now:
            return seen
        return self.fire_pass()

    def run(self) -> None:
        registered = self._register is None
        while not self._stop.is_set():
            try:
                if not registered and self._register is not None:
                    self._register()
                    registered = True
                delay = self._delay(self.step())
            except SQLAlchemyError:
                log.warning("recurring jobs: a pass failed; trying again", exc_info=True)
                delay = AFTER_ERROR
            except Exception:  # never let the thread die: the next pass may well work
                log.exception("recurring jobs: unexpected error; trying again")
                delay = AFTER_ERROR
            self._stop.wait(delay)

    @staticmethod
    def _delay(result: FirePass) -> float:
        if result.next_due is None:
            return RECHECK
        wait = (result.next_due - result.now).total_seconds()
        if wait > 0:
            return min(wait + MARGIN, RECHECK)
        # Still due after the pass: more than one batch was due, or another node holds it.
        return 0.0 if len(result.fired) >= FIRE_BATCH else HELD_ELSEWHERE


def start_recurring(
    app: Flask, store: SqlJobStore, engine: Engine, stop: threading.Event
) -> RecurringFirer | None:
    """Start a worker's firer (unless ``RATCHET_RECURRING_ENABLED`` is False).

    It first registers the app's declared masters (``@ratchet.recurring``), on the worker's
    engine, then fires. After a pass that created children it wakes the workers, so that the
    children run at once.
    """
    state: RatchetState = app.extensions["ratchet"]
    if not state.config.recurring_enabled:
        log.info("recurring jobs are disabled here (RATCHET_RECURRING_ENABLED = False)")
        return None
    recurring = RecurringStore(store)
    definitions = list(state.ratchet.recurring_definitions.values())

    def register() -> None:
        for definition in definitions:
            with store.begin(engine) as conn:
                recurring.register(conn, definition)
        if definitions:
            log.info("registered %d declared recurring jobs", len(definitions))

    def wake() -> None:
        with app.app_context():
            state.wake()

    firer = RecurringFirer(store, engine, state.config, stop, register=register, on_fired=wake)
    firer.start()
    return firer
