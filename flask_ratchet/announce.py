"""Sends the events a committed transaction recorded: signals, and job and batch callbacks.

A callback is a registered task (or an allow-listed function) called in this process, inside
an app context: a job's ``on_success``/``on_failure`` callback gets the job's
:class:`~flask_ratchet.job.Job` snapshot, a batch's ``on_progress`` callback a
:class:`~flask_ratchet.job.BatchProgress`. A receiver or callback that raises is logged and
changes nothing: the outcome it reacts to is already committed.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from blinker import NamedSignal
from flask import Flask

from . import events
from .events import Event
from .flow import BatchCounts
from .job import BatchProgress

if TYPE_CHECKING:
    from .extension import RatchetState

log = logging.getLogger("flask_ratchet.events")


def announce(app: Flask, items: Iterable[Event], wake: Callable[[], None]) -> None:
    """Send ``items`` (call inside ``app``'s app context). ``wake`` is called once, first, if
    any of them made jobs due: workers start on them before receivers run."""
    items = list(items)
    if any(event.kind == events.WAKE for event in items):
        try:
            wake()
        except Exception:
            log.exception("waking workers failed; they find the jobs at their next poll")
    for event in items:
        try:
            if event.kind == events.WAKE:
                continue
            if event.kind == events.CALLBACK:
                _call_back(app, event.data)
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


def _call_back(app: Flask, data: dict[str, Any]) -> None:
    state: RatchetState = app.extensions["ratchet"]
    task = state.ratchet.registry.for_run(data["task"], state.config.allowed_modules)
    counts = data.get("counts")
    if isinstance(counts, BatchCounts):
        batch_id: uuid.UUID = data["batch_id"]
        progress = state.ratchet.batch_progress(batch_id) or BatchProgress(
            batch_id, "", counts.total, counts.succeeded, counts.failed
        )
        task.func(progress)
        return
    job = state.ratchet.get_job(data["job_id"])
    if job is not None:
        task.func(job)
