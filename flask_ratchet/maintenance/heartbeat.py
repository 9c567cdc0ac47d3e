"""Heartbeats: each worker says it is alive in ``ratchet_node``; orphan recovery reads that."""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime

from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from ..store import SqlJobStore
from ..store.cluster import NodeInfo

log = logging.getLogger("flask_ratchet.worker")

#: A node clock this far from the database's is worth a warning.
SKEW_WARNING = 1.0


class Heartbeat(threading.Thread):
    """Upserts this node's row every ``interval`` seconds and warns once about clock skew."""

    def __init__(
        self,
        store: SqlJobStore,
        engine: Engine,
        info: NodeInfo,
        interval: float,
        stop: threading.Event,
    ) -> None:
        super().__init__(name="ratchet-heartbeat", daemon=True)
        self._store = store
        self._engine = engine
        self.info = info
        self._interval = interval
        self._stop_event = stop
        self.skew_warned = False
        self.beats = 0

    def beat(self) -> None:
        """One heartbeat, now."""
        with self._store.begin(self._engine) as conn:
            db_now = self._store.heartbeat(conn, self.info)
        self.beats += 1
        skew = abs((datetime.now(UTC) - db_now).total_seconds())
        if skew > SKEW_WARNING and not self.skew_warned:
            self.skew_warned = True
            log.warning(
                "this node's clock is %.1fs away from the database's; ratchet decides with the "
                "database's clock, but fix the node's time (NTP)",
                skew,
            )

    def run(self) -> None:
        while not self._stop_event.wait(self._interval):
            try:
                self.beat()
            except SQLAlchemyError:
                log.warning("heartbeat failed; retrying in %.0fs", self._interval, exc_info=True)
