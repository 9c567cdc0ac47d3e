"""After a commit: the events a transaction recorded (:mod:`flask_ratchet.facts`), delivered as
signals to their receivers and as job and batch callbacks, each on its own, so that one that
raises keeps neither the others nor the committed outcome from standing."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from blinker import NamedSignal
from flask import Flask

from . import events, facts
from .facts import Event

log = logging.getLogger("flask_ratchet.events")


def announce(app: Flask, items: Iterable[Event], wake: Callable[[], None]) -> None:
    """Send the events a committed transaction recorded: signals, and job and batch callbacks
    (call inside ``app``'s app context). ``wake`` is called once, first, if any of them made
    jobs due: workers start on them before receivers run.

    A callback is a registered task (or an allow-listed function) called in this process: a
    job's ``on_success``/``on_failure`` callback gets the job's :class:`~flask_ratchet.job.Job`
    snapshot, a batch's ``on_progress`` callback a :class:`~flask_ratchet.job.BatchProgress`.
    A receiver or callback that raises is logged and changes nothing: the outcome it reacts to
    is already committed.
    """
    items = list(items)
    if any(event.kind == facts.WAKE for event in items):
        try:
            wake()
        except Exception:
            log.exception("waking workers failed; they find the jobs at their next poll")
    for event in items:
        try:
            if event.kind in facts.UNSIGNALLED:
                continue
            if event.kind == facts.CALLBACK:
                app.extensions["ratchet"].call_back(event.data)
            else:
                send(app, events.SIGNALS[event.kind], event.data)
        except Exception:
            log.exception("a callback for %s raised; the job's outcome is unchanged", event.kind)


def send(app: Flask, signal: NamedSignal, data: dict[str, Any]) -> None:
    """Send ``signal`` to each receiver on its own: one that raises is logged and does not keep
    the others from hearing (``signal.send`` stops at the first exception)."""
    if not events.wanted(signal):
        return
    for receiver in signal.receivers_for(app):
        try:
            receiver(app, **data)
        except Exception:
            log.exception("a receiver of %s raised; the job's outcome is unchanged", signal.name)
