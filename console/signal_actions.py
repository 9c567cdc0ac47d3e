"""Deliver or reject the signal a WAITING job awaits, from its page.

Through the library's own ``deliver_signal`` / ``reject_signal`` on the job's id (the guarded
swap from WAITING: a job that is no longer waiting is left alone and reported as refused), with
the audit row, in the request's transaction. :mod:`.security` has already checked the role,
the CSRF token and the origin.
"""

from __future__ import annotations

import json
from typing import Any

from flask import abort, request, url_for
from werkzeug.wrappers import Response

from flask_ratchet.api import signals
from flask_ratchet.errors import InvalidOption, PayloadError, PayloadTooLarge

from .actions import ActionResult, audit
from .htmx import notice_or_page
from .pages import current_runtime, job_id_or_404

#: What each decision does to the job, for the notice.
PAST = {"deliver": "signaled", "reject": "rejected"}


def decide(job_id: str) -> Response | str:
    """POST …/jobs/<id>/signal with ``decision`` (``deliver``, with an optional JSON
    ``payload``, or ``reject``, with a ``reason``)."""
    key = job_id_or_404(job_id)
    decision = request.form.get("decision", "")
    if decision not in PAST:
        abort(400, "decision must be deliver or reject")
    runtime = current_runtime()
    try:
        if decision == "deliver":
            n = signals.deliver(runtime, key, _payload(runtime.config.max_payload_bytes))
        else:
            n = signals.reject(runtime, key, request.form.get("reason", ""))
    except (InvalidOption, PayloadError, PayloadTooLarge) as exc:
        abort(400, str(exc))
    with runtime.connection() as conn:
        audit(conn, f"signal-{decision}", "job", str(key), 1, n)
    outcome = ActionResult(decision, [key] if n else [], [] if n else [key])
    return notice_or_page(
        "ratchet/_notice.html",
        url_for("ratchet_console.job", job_id=str(key)),
        outcome=outcome,
        past=PAST[decision],
        allowed_from="WAITING",
    )


def _payload(limit: int) -> Any:
    """The form's JSON payload (``None`` if empty); 400 for text that is not JSON."""
    text = request.form.get("payload", "").strip()
    if not text:
        return None
    if len(text) > limit:
        abort(400, f"payload must be at most {limit} characters of JSON")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        abort(400, f"payload must be JSON: {exc}")
