"""The worker's announcer thread: sends committed events off the completer's thread, so that a
slow signal receiver or callback never holds up the writing of outcomes."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from flask import Flask

from ..facts import Event
from ..runtime import Runtime, announce


class Announcer(threading.Thread):
    """Sends events in the order they were committed. ``put`` from any thread."""

    def __init__(self, app: Flask, wake: Callable[[], None]) -> None:
        super().__init__(name="ratchet-announcer", daemon=True)
        self._app = app
        self._wake = wake
        self._queue: queue.SimpleQueue[list[Event] | None] = queue.SimpleQueue()

    def put(self, items: list[Event]) -> None:
        """Queue a committed transaction's events."""
        self._queue.put(items)

    def stop(self, timeout: float = 10.0) -> None:
        """Send what is queued, then end."""
        self._queue.put(None)
        self.join(timeout)

    def run(self) -> None:
        with self._app.app_context():
            while (items := self._queue.get()) is not None:
                announce(self._app, items, self._wake)


def predicate_evaluator(app: Flask) -> Callable[[str, Any], bool]:
    """How the completer evaluates a WHEN branch's predicate: the registered (or allow-listed)
    function of that name, called with the parent's result inside an app context."""
    runtime: Runtime = app.extensions["ratchet"]

    def evaluate(name: str, result: Any) -> bool:
        task = runtime.registry.for_run(name, runtime.config.allowed_modules)
        with app.app_context():
            return bool(task.func(result))

    return evaluate
