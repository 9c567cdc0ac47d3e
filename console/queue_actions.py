"""Pause and resume a queue across the cluster (POST only; :mod:`.security` has checked the
role, the CSRF token and the origin). Each goes through the library's own operation in the
request's transaction, with its audit row, and both commit together."""

from __future__ import annotations

from dataclasses import dataclass

from flask import abort, request, url_for
from werkzeug.wrappers import Response

from flask_ratchet.api import queues
from flask_ratchet.errors import InvalidOption

from .actions import audit
from .htmx import notice_or_page
from .pages import current_runtime
from .security import actor

#: The actions, and what each does.
QUEUE_ACTIONS = {"pause": queues.pause_queue, "resume": queues.resume_queue}


@dataclass(frozen=True, slots=True)
class QueueChange:
    """A queue paused or resumed (``changed``: it was not so already)."""

    action: str
    queue: str
    changed: bool


def set_paused(action: str) -> Response | str:
    """POST …/queues/<pause|resume> with the queue's ``name`` in the form."""
    change = QUEUE_ACTIONS.get(action)
    if change is None:
        abort(400, f"action must be one of {', '.join(QUEUE_ACTIONS)}")
    name = request.form.get("name", "")
    runtime = current_runtime()
    with runtime.connection() as conn:
        try:
            changed = change(runtime, name, by=actor())
        except InvalidOption as exc:
            abort(400, str(exc))
        audit(conn, f"{action}-queue", "queue", name, 1, int(changed))
    return notice_or_page(
        "ratchet/_queue_notice.html",
        url_for("ratchet_console.queues"),
        outcome=QueueChange(action, name, changed),
    )
