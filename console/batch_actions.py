"""Cancel a batch, and retry its failed children: a confirmation page that counts the jobs
(GET), then the action (an admin's POST; :mod:`.security` has checked the role, the CSRF token
and the origin).

Each is the library's operation (:func:`flask_ratchet.api.bulk.cancel_batch`,
:func:`flask_ratchet.api.bulk.retry_failed_children`): the store's guarded bulk changes over the
batch's children, narrowed by the principal's policy, with their audit row (naming the console's
actor and role) in the request's transaction. The form carries the count confirmed: if more
jobs would change now (children failed meanwhile), nothing is changed and the page asks again.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

from flask import abort, g, render_template, request, url_for
from werkzeug.wrappers import Response

from flask_ratchet import api
from flask_ratchet.runtime import Runtime

from . import filters, reads
from .htmx import notice_or_page
from .pages import current_runtime, job_id_or_404
from .security import actor

#: A batch action: the library's operation (``dry_run`` counts what it would change).
Operation = Callable[..., int]
#: The batch actions by their path segment, with the operation and what the buttons say.
BATCH_ACTIONS: dict[str, tuple[Operation, str]] = {
    "cancel": (api.bulk.cancel_batch, "Cancel batch"),
    "retry": (api.bulk.retry_failed_children, "Retry failed children"),
}


@dataclass(frozen=True, slots=True)
class BatchChange:
    """What a batch action did: how many jobs it changed of the ones it was confirmed for."""

    action: str
    batch: reads.batches.BatchRow
    confirmed: int
    changed: int


def _action(action: str) -> tuple[Operation, str]:
    found = BATCH_ACTIONS.get(action)
    if found is None:
        abort(400, f"action must be one of {', '.join(BATCH_ACTIONS)}")
    return found


def _count(runtime: Runtime, operation: Operation, key: uuid.UUID) -> int:
    """How many jobs ``operation`` would change now (its dry run, writing nothing)."""
    return operation(runtime, key, actor=actor(), role=str(g.ratchet_role), dry_run=True)


def _batch(runtime: Runtime, key: uuid.UUID) -> reads.batches.BatchRow:
    """The batch, or 404 if there is none or the operator may not read its parent."""
    with runtime.connection() as conn:
        found = reads.batches.batch_row(conn, key)
        if found is None or not api.policy.may(runtime, conn, "read", key):
            abort(404)
    return found


def _confirm_page(
    action: str, b: reads.batches.BatchRow, n: int, grew_from: int | None = None
) -> str:
    return render_template(
        "ratchet/batch_confirm.html",
        action=action,
        label=BATCH_ACTIONS[action][1],
        b=b,
        n=n,
        grew_from=grew_from,
    )


def confirm(batch_id: str, action: str) -> str:
    """GET …/batches/<id>/<cancel|retry>: how many jobs the action would change; asks to
    confirm (the form is an admin's only)."""
    operation, _ = _action(action)
    key = job_id_or_404(batch_id)
    runtime = current_runtime()
    b = _batch(runtime, key)
    return _confirm_page(action, b, _count(runtime, operation, key))


def act(batch_id: str, action: str) -> tuple[str, int] | Response | str:
    """POST …/batches/<id>/<cancel|retry> with the ``count`` confirmed: act, unless more jobs
    would change now than were confirmed (409, and the page asks again)."""
    operation, _ = _action(action)
    key = job_id_or_404(batch_id)
    confirmed = filters.whole_number("count", request.form.get("count", ""), 0, filters.INT_MAX)
    runtime = current_runtime()
    b = _batch(runtime, key)
    now = _count(runtime, operation, key)
    if now > confirmed:
        return _confirm_page(action, b, now, grew_from=confirmed), 409
    changed = operation(runtime, key, actor=actor(), role=str(g.ratchet_role))
    return notice_or_page(
        "ratchet/_batch_notice.html",
        url_for("ratchet_console.batch", batch_id=str(key)),
        outcome=BatchChange(action, b, confirmed, changed),
    )
