"""The worker's recurring-job firer: registers the declared masters, then fires due ones.

Every worker runs one (not a ``--burst`` worker: it exits once nothing is due, and a firer would
keep making work). The worker registers the declared masters itself before it reports "started"
(:func:`start_recurring`); a definition that fails then is tried again by the firer, with backoff,
while it fires everything else.

The firer reads when the next occurrence is due (by the database's clock) and sleeps until then,
but never longer than :data:`RECHECK`, so that masters registered or changed elsewhere are seen
within a second. A due occurrence is fired in one short write transaction
(:meth:`flask_ratchet.store.recurring.Recurring.fire_due`), so an every-second schedule fires
within milliseconds of each second. Firers on several nodes never create the same child twice: see
:mod:`flask_ratchet.store.recurring`. It stops firing as soon as the worker starts draining.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

from flask import Flask
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from ..api.recurring import declared_masters
from ..config import RatchetConfig
from ..recurring import RecurringDefinition
from ..retry import first_line
from ..sealing import NO_KEYS, Keyring
from ..services import Service
from ..store import Recurring, Store
from ..store.types import FirePass

if TYPE_CHECKING:
    from ..runtime import Runtime

log = logging.getLogger("flask_ratchet.worker")

#: Longest sleep between passes: how soon a master registered elsewhere is noticed.
RECHECK = 1.0
#: Sleep when a due master is held by another node's pass (it is about to advance it).
HELD_ELSEWHERE = 0.05
#: Sleep after a database error.
AFTER_ERROR = 1.0
#: While the database stays unreachable, how often the outage is logged again.
OUTAGE_LOG_EVERY = 60.0
#: Waits before registering a failed declared definition again: doubled up to the last one.
REGISTER_BACKOFF = (1.0, 60.0)
#: Added to each sleep so that the next pass finds the occurrence due, not a hair early.
MARGIN = 0.002


class Registrar:
    """Registers declared masters, each on its own, and remembers the ones that failed."""

    def __init__(
        self,
        store: Store,
        engine: Engine,
        definitions: Sequence[RecurringDefinition],
        keyring: Keyring = NO_KEYS,
    ) -> None:
        self._store = store
        self._keyring = keyring
        self._recurring = store.recurring
        self._engine = engine
        self.pending = list(definitions)
        self._wait = REGISTER_BACKOFF[0]
        self._next_try = 0.0

    def register_pending(self) -> None:
        """Try every definition not registered yet, each in its own transaction.

        One that fails (a database error, a definition the database refuses) is logged and
        left for a later call; the others are registered regardless.
        """
        if not self.pending or time.monotonic() < self._next_try:
            return
        failed: list[RecurringDefinition] = []
        for definition in self.pending:
            try:
                with self._store.begin(self._engine) as conn:
                    self._recurring.register(conn, definition, self._keyring)
            except Exception as exc:  # one bad definition must not keep the others out
                log.warning(
                    "could not register recurring job %s (%s); trying again in %.0f s",
                    definition.id,
                    first_line(exc),
                    self._wait,
                )
                failed.append(definition)
        done = len(self.pending) - len(failed)
        if done:
            log.info("registered %d declared recurring jobs", done)
        self.pending = failed
        if failed:
            self._next_try = time.monotonic() + self._wait
            self._wait = min(self._wait * 2, REGISTER_BACKOFF[1])


class RecurringFirer(Service):
    """Fires the due recurring masters of one database until ``stop`` (or ``draining``) is set."""

    def __init__(
        self,
        store: Store,
        engine: Engine,
        config: RatchetConfig,
        stop: threading.Event,
        *,
        draining: threading.Event | None = None,
        registrar: Registrar | None = None,
        on_fired: Callable[[], None] | None = None,
        keyring: Keyring = NO_KEYS,
    ) -> None:
        # Draining is set first when a worker stops: sleeping on it ends the sleep at once.
        super().__init__("ratchet-recurring", stop, sleep=draining)
        self._store = store
        self._recurring = store.recurring
        self._engine = engine
        self._threshold = timedelta(seconds=config.recurring_misfire_threshold)
        self._disabled = config.recurring_disabled
        self._registrar = registrar
        self._on_fired = on_fired
        #: Opens encrypted masters' arguments, to seal them again for each child.
        self._keyring = keyring
        self._outage_since: float | None = None
        self._outage_logged = 0.0
        self.passes = 0
        self.fired = 0
        #: Passes that failed on a database error (the thread went on).
        self.failures = 0

    def fire_pass(self) -> FirePass:
        """One pass: create the children of every due master, in one transaction."""
        with self._store.begin(self._engine) as conn:
            result = self._recurring.fire_due(conn, self._threshold, self._disabled, self._keyring)
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

    def run_once(self) -> float:
        if self._registrar is not None:
            self._registrar.register_pending()
        delay = self._delay(self.step())
        self._recovered()
        return delay

    def failed(self, exc: Exception) -> float:
        if isinstance(exc, SQLAlchemyError):
            self._failed(exc)
        else:  # the next pass may well work
            log.exception("recurring jobs: unexpected error; trying again")
        return AFTER_ERROR

    def _failed(self, exc: SQLAlchemyError) -> None:
        """Log a database outage when it starts, then every ``OUTAGE_LOG_EVERY`` seconds."""
        self.failures += 1
        now = time.monotonic()
        if self._outage_since is None:
            self._outage_since = self._outage_logged = now
            log.warning("recurring jobs: database error (%s); trying every second", first_line(exc))
        elif now - self._outage_logged >= OUTAGE_LOG_EVERY:
            self._outage_logged = now
            log.warning(
                "recurring jobs: the database has failed for %.0f s (%s); still trying",
                now - self._outage_since,
                first_line(exc),
            )

    def _recovered(self) -> None:
        if self._outage_since is not None:
            log.info(
                "recurring jobs: the database is back after %.0f s",
                time.monotonic() - self._outage_since,
            )
            self._outage_since = None

    @staticmethod
    def _delay(result: FirePass, batch: int = Recurring.fire_batch) -> float:
        if result.next_due is None:
            return RECHECK
        wait = (result.next_due - result.now).total_seconds()
        if wait > 0:
            return min(wait + MARGIN, RECHECK)
        # Still due after the pass: more than one batch was due, or another node holds it.
        return 0.0 if len(result.fired) >= batch else HELD_ELSEWHERE


def start_recurring(
    app: Flask,
    store: Store,
    engine: Engine,
    stop: threading.Event,
    *,
    draining: threading.Event | None = None,
    burst: bool = False,
) -> RecurringFirer | None:
    """Register the app's declared masters, then start a worker's firer.

    Nothing happens for a ``burst`` worker or when ``RATCHET_RECURRING_ENABLED`` is False. The
    declared masters (``@ratchet.recurring``) are registered here, in the caller's thread, each
    in its own transaction, so that a worker's start-up is over when it reports "started";
    the firer retries those that failed. After a pass that created children the firer wakes the
    workers, so that the children run at once. Join it with ``firer.join()`` after setting
    ``stop`` or ``draining``.
    """
    runtime: Runtime = app.extensions["ratchet"]
    if burst:
        log.info("recurring jobs are not fired by a --burst worker")
        return None
    if not runtime.config.recurring_enabled:
        log.info("recurring jobs are disabled here (RATCHET_RECURRING_ENABLED = False)")
        return None
    registrar = Registrar(store, engine, declared_masters(runtime), runtime.keyring)
    registrar.register_pending()

    def wake() -> None:
        with app.app_context():
            runtime.wake()

    firer = RecurringFirer(
        store,
        engine,
        runtime.config,
        stop,
        draining=draining,
        registrar=registrar,
        on_fired=wake,
        keyring=runtime.keyring,
    )
    firer.start()
    return firer
