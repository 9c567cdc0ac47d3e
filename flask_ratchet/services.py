"""The one shape of a worker's background loops, and the signals tests wait on.

A :class:`Service` is a daemon thread that calls :meth:`Service.run_once` until its stop event is
set, sleeping between passes as long as the pass said. A pass that raises is logged and the loop
goes on (a database error as a warning, anything else with its traceback: most likely a row
holding what ratchet never writes), for these threads keep a node alive: its heartbeat, orphan
recovery, recurring jobs, timeouts. A :class:`QueueService` is one fed by other threads: the
worker's completer (outcomes to write) and announcer (events to send); its passes wait on its
queue.

A :class:`Signal` counts what happened (a pass, a claim, outcomes written) and lets a test wait
for it instead of polling: ``assert worker.started.wait_for(1, timeout=30)``.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Generic, TypeVar

from sqlalchemy.exc import SQLAlchemyError

log = logging.getLogger("flask_ratchet.worker")

T = TypeVar("T")


class Signal:
    """A count of something that happened, which other threads can wait on."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._count = 0

    @property
    def count(self) -> int:
        """How many times it happened so far."""
        return self._count

    def fire(self, times: int = 1) -> None:
        """It happened (``times`` times)."""
        with self._cond:
            self._count += times
            self._cond.notify_all()

    def wait_for(self, count: int = 1, timeout: float = 30.0) -> bool:
        """Wait until it has happened ``count`` times in all, at most ``timeout`` seconds;
        return whether it has."""
        with self._cond:
            return self._cond.wait_for(lambda: self._count >= count, timeout)


class Service(threading.Thread):
    """A background loop: :meth:`run_once` until ``stop`` is set.

    ``sleep`` is what the pause between passes waits on (default ``stop``: a worker that drains
    may end a loop's sleep earlier by setting another event first). ``first`` is the pause
    before the first pass. Each pass, whether it worked or failed, fires :attr:`passed`.
    """

    #: Seconds to the next pass after a pass that raised.
    after_error: float = 1.0

    def __init__(
        self,
        name: str,
        stop: threading.Event,
        *,
        sleep: threading.Event | None = None,
        first: float = 0.0,
    ) -> None:
        super().__init__(name=name, daemon=True)
        # Not ``_stop``: that name is a method of threading.Thread (join() calls it).
        self._stop_event = stop
        self._sleep = sleep or stop
        self._first = first
        #: Fired after each pass (a test hook).
        self.passed = Signal()

    def run_once(self) -> float:
        """One pass; return the seconds until the next."""
        raise NotImplementedError

    def stopping(self) -> bool:
        """Whether the loop ends before its next pass."""
        return self._stop_event.is_set() or self._sleep.is_set()

    def failed(self, exc: Exception) -> float:
        """A pass raised ``exc`` (logged here); return the seconds until the next pass."""
        pause = self.after_error
        if isinstance(exc, SQLAlchemyError):
            log.warning("%s: pass failed; next in %.1fs", self.name, pause, exc_info=True)
        else:
            log.exception("%s: pass failed on what it read; next in %.1fs", self.name, pause)
        return pause

    def finish(self) -> None:
        """What is left to do once the loop has ended (nothing, unless a service says)."""

    def run(self) -> None:
        if self._first > 0 and self._sleep.wait(self._first):
            return
        while not self.stopping():
            try:
                delay = self.run_once()
            except Exception as exc:  # the loop must live on: the next pass may well work
                delay = self.failed(exc)
            self.passed.fire()
            self._sleep.wait(delay)
        self.finish()


class QueueService(Service, Generic[T]):
    """A service fed by other threads: ``put`` from any thread; each pass waits for the first
    item and handles it with whatever else came meanwhile. ``stop`` handles what was put before
    it, then ends the thread.

    Its passes wait on the queue, not on a timer: a pass returns no pause.
    """

    def __init__(self, name: str) -> None:
        super().__init__(name, threading.Event())
        self._queue: queue.SimpleQueue[T | None] = queue.SimpleQueue()

    def put(self, item: T) -> None:
        """Hand ``item`` over."""
        self._queue.put(item)

    def stop(self, timeout: float = 30.0) -> None:
        """Handle everything put so far, then end the thread (waiting at most ``timeout``)."""
        self._stop_event.set()
        self._queue.put(None)  # wakes a pass waiting for its first item
        self.join(timeout)

    def handle(self, first: T) -> None:
        """One pass's work, ``first`` being the item it waited for."""
        raise NotImplementedError

    def run_once(self) -> float:
        first = self._queue.get()
        if first is not None:
            self.handle(first)
        return 0.0

    def take(self, timeout: float) -> T | None:
        """The next item put, waiting at most ``timeout`` seconds; ``None`` when none came, or
        when ``stop`` was called (its marker stays for the loop to see)."""
        try:
            item = self._queue.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return None
        if item is None:
            self._queue.put(None)
        return item

    def finish(self) -> None:
        # What was put before ``stop`` and after the last pass began.
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is not None:
                try:
                    self.handle(item)
                except Exception as exc:
                    self.failed(exc)
