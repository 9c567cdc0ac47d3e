"""Heartbeats: each worker says it is alive in ``ratchet_node``; orphan recovery reads that."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Collection
from dataclasses import asdict
from datetime import UTC, datetime, timedelta

from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from ..breaker import Breakers
from ..services import Service
from ..store import Store
from ..store.types import NodeInfo

log = logging.getLogger("flask_ratchet.worker")

#: How far back each heartbeat looks for breaker resets (longer than any console request).
RESET_LOOKBACK = timedelta(minutes=5)
#: A node clock this far from the database's is worth a warning.
SKEW_WARNING = 1.0


class Heartbeat(Service):
    """Upserts this node's row every ``interval`` seconds and warns once about clock skew.

    With each beat it publishes the queues this process takes and the state of its circuit
    breakers (the console shows them) and applies the breaker resets operators asked for since
    the last beat.
    """

    def __init__(
        self,
        store: Store,
        engine: Engine,
        info: NodeInfo,
        interval: float,
        stop: threading.Event,
        breakers: Breakers | None = None,
        queues: Collection[str] | None = None,
    ) -> None:
        super().__init__("ratchet-heartbeat", stop, first=interval)
        self._store = store
        self._engine = engine
        self.info = info
        self._interval = interval
        self.skew_warned = False
        self.beats = 0
        self._breakers = breakers
        #: The queues it takes (``None``: every queue), published for the job page's "why".
        self._queues = None if queues is None else sorted(queues)
        self._first_beat: datetime | None = None
        self._applied: dict[str, datetime] = {}  # resets applied, by audit row id

    def beat(self) -> None:
        """One heartbeat, now."""
        with self._store.begin(self._engine) as conn:
            db_now = self._store.cluster.heartbeat(conn, self.info, self._published())
            if self._breakers is not None:
                self._apply_resets(conn, db_now, self._breakers)
        self.beats += 1
        skew = abs((datetime.now(UTC) - db_now).total_seconds())
        if skew > SKEW_WARNING and not self.skew_warned:
            self.skew_warned = True
            log.warning(
                "this node's clock is %.1fs away from the database's; ratchet decides with the "
                "database's clock, but fix the node's time (NTP)",
                skew,
            )

    def _published(self) -> str:
        state: dict[str, object] = {"queues": self._queues}
        if self._breakers is not None:
            snapshots = self._breakers.snapshots()
            state["breakers"] = {k: asdict(v) for k, v in snapshots.items()}
        return json.dumps(state)

    def _apply_resets(self, conn: Connection, db_now: datetime, breakers: Breakers) -> None:
        # Resets asked for before this process started do not concern it: its breakers are new.
        if self._first_beat is None:
            self._first_beat = db_now
        # An audit row carries its transaction's start time and may commit later than rows
        # stamped after it: look back a while, and apply each row once, by its id.
        since = max(self._first_beat, db_now - RESET_LOOKBACK)
        self._applied = {k: at for k, at in self._applied.items() if at >= since}
        for audit_id, service in self._store.cluster.breaker_resets(conn, since):
            if audit_id in self._applied:
                continue
            self._applied[audit_id] = db_now
            if breakers.reset(service):
                log.info("circuit breaker of %r reset by an operator", service)

    def run_once(self) -> float:
        self.beat()
        return self._interval

    def failed(self, exc: Exception) -> float:
        if isinstance(exc, SQLAlchemyError):
            log.warning("heartbeat failed; retrying in %gs", self._interval, exc_info=True)
        else:
            # A row it read that ratchet never wrote: the node must go on beating, or it would
            # look dead and its jobs would run twice.
            log.exception("heartbeat failed on what it read; retrying in %gs", self._interval)
        return self._interval
