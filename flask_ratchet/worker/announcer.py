"""The worker's announcer thread: sends committed events off the completer's thread, so that a
slow signal receiver or callback never holds up the writing of outcomes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Flask

from ..delivery import announce
from ..facts import Event
from ..runtime import Runtime
from ..services import QueueService


class Announcer(QueueService[list[Event]]):
    """Sends events in the order they were committed. ``put`` from any thread; ``stop`` sends
    what is queued, then ends."""

    def __init__(self, app: Flask, wake: Callable[[], None]) -> None:
        super().__init__("ratchet-announcer")
        self._app = app
        self._wake = wake

    def handle(self, first: list[Event]) -> None:
        with self._app.app_context():
            announce(self._app, first, self._wake)


def predicate_evaluator(app: Flask) -> Callable[[str, Any], bool]:
    """How the completer evaluates a WHEN branch's predicate: the registered (or allow-listed)
    function of that name, called with the parent's result inside an app context."""
    runtime: Runtime = app.extensions["ratchet"]

    def evaluate(name: str, result: Any) -> bool:
        task = runtime.registry.for_run(name, runtime.config.allowed_modules)
        with app.app_context():
            return bool(task.func(result))

    return evaluate
