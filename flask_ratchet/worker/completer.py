"""Writes outcomes in batches: one transaction per few milliseconds or per ``max_batch`` jobs.

Each write is fenced (see :mod:`flask_ratchet.store.execution`). A store error never turns an
outcome into something else: the batch is retried with backoff, and if the worker must stop
before it lands, the jobs stay RUNNING and orphan recovery (or this node's own reclaim at its next
start) runs them again.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from ..store import SqlJobStore
from ..store.execution import Finished

log = logging.getLogger("flask_ratchet.worker")


class Completer(threading.Thread):
    """The thread that writes outcomes. ``put`` from any thread; ``stop`` flushes and joins."""

    def __init__(
        self,
        store: SqlJobStore,
        engine: Engine,
        node_id: str,
        *,
        max_batch: int = 200,
        max_wait: float = 0.005,
        on_written: Callable[[], None] = lambda: None,
    ) -> None:
        super().__init__(name="ratchet-completer", daemon=True)
        self._store = store
        self._engine = engine
        self._node_id = node_id
        self._max_batch = max_batch
        self._max_wait = max_wait
        self._on_written = on_written
        self._backlog = 0
        self._count_lock = threading.Lock()
        self._queue: queue.SimpleQueue[Finished | None] = queue.SimpleQueue()
        self._stopping = threading.Event()
        self.written = 0
        self.discarded = 0

    def put(self, item: Finished) -> None:
        with self._count_lock:
            self._backlog += 1
        self._queue.put(item)

    @property
    def backlog(self) -> int:
        """Outcomes handed over and not yet written (or given up)."""
        return self._backlog

    def pending(self) -> bool:
        """Whether outcomes are waiting to be written."""
        return self._backlog > 0

    def stop(self, timeout: float = 30.0) -> None:
        """Write everything queued so far, then end the thread."""
        self._stopping.set()
        self._queue.put(None)
        self.join(timeout)

    def run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                if self._queue.empty():
                    return
                continue
            batch = [first]
            deadline = time.monotonic() + self._max_wait
            while len(batch) < self._max_batch:
                try:
                    item = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if item is None:
                    self._queue.put(None)  # keep the stop marker for the outer loop
                    break
                batch.append(item)
            self._write(batch)

    def _write(self, batch: list[Finished]) -> None:
        try:
            self._write_with_retries(batch)
        finally:
            with self._count_lock:
                self._backlog -= len(batch)
            self._on_written()

    def _write_with_retries(self, batch: list[Finished]) -> None:
        delay = 0.05
        while True:
            try:
                with self._store.begin(self._engine) as conn:
                    applied = self._store.complete_many(conn, self._node_id, batch)
                break
            except SQLAlchemyError:
                if self._stopping.is_set() and delay > 5:
                    log.exception(
                        "could not write %d outcomes before stopping; the jobs stay RUNNING and "
                        "will be recovered",
                        len(batch),
                    )
                    return
                log.warning("writing %d outcomes failed; retrying", len(batch), exc_info=True)
                time.sleep(delay)
                delay = min(delay * 2, 10.0)
        self.written += len(applied)
        lost = [i.job_id for i in batch if i.job_id not in applied]
        if lost:
            self.discarded += len(lost)
            log.info(
                "%d outcomes discarded: the jobs were canceled or recovered meanwhile (%s)",
                len(lost),
                ", ".join(map(str, lost[:5])),
            )
