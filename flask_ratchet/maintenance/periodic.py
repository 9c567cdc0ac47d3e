"""Runs periodic maintenance tasks, each under a lease so one node runs it at a time.

The lease lasts one interval and is not released after the run: whichever node takes it first in
an interval does the work, and the others skip that round.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from ..services import Service
from ..store import Store
from .locks import Lease

log = logging.getLogger("flask_ratchet.worker")


@dataclass(frozen=True, slots=True)
class PeriodicTask:
    """``run(store, engine)`` every ``interval`` seconds, cluster-wide, under lease ``name``."""

    name: str
    interval: float
    run: Callable[[Store, Engine], None]


class Maintenance(Service):
    """The thread that runs a node's share of the cluster's periodic tasks."""

    def __init__(
        self,
        store: Store,
        engine: Engine,
        owner: str,
        tasks: list[PeriodicTask],
        stop: threading.Event,
    ) -> None:
        super().__init__("ratchet-maintenance", stop)
        self._store = store
        self._engine = engine
        self._owner = owner
        self._tasks = tasks
        self.runs: dict[str, int] = {t.name: 0 for t in tasks}
        self._due: dict[str, float] | None = None  # when each task runs next; all at the start

    def run_due(self, due: dict[str, float], now: float) -> None:
        """Run every task whose time has come and whose lease this node gets."""
        for task in self._tasks:
            if now < due[task.name]:
                continue
            due[task.name] = now + task.interval
            lease = Lease(self._store, self._engine, f"ratchet:{task.name}", self._owner)
            try:
                if lease.try_acquire(ttl=task.interval * 0.9):
                    task.run(self._store, self._engine)
                    self.runs[task.name] += 1
            except SQLAlchemyError:
                log.warning(
                    "maintenance task %s failed; next try in %.0fs",
                    task.name,
                    task.interval,
                    exc_info=True,
                )
            except Exception:
                # Not the database: most likely a row holding what ratchet never writes. The
                # thread must live on (it also recovers orphans and keeps retention going).
                log.exception(
                    "maintenance task %s failed on what it read; next try in %.0fs",
                    task.name,
                    task.interval,
                )

    def run_once(self) -> float:
        if self._due is None:
            self._due = {t.name: time.monotonic() for t in self._tasks}
        self.run_due(self._due, time.monotonic())
        return max(0.05, min(self._due.values()) - time.monotonic())
