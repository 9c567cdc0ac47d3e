"""The audit page (GET, read only): every action taken from the console, in keyset pages."""

from __future__ import annotations

from flask import render_template, request

from . import filters, reads
from .pages import current_runtime, page_args


def audit() -> str:
    """Audit rows, newest first, of one operator and one action when asked."""
    actor = filters.text("actor", request.args.get("actor"), 255)
    action = filters.text("what", request.args.get("what"), 32)
    size = filters.page_size(request.args.get("size"))
    cursor = filters.checked_cursor(request.args.get("cursor"))
    runtime = current_runtime()
    with runtime.connection() as conn:
        try:
            page = reads.audit.audit_rows(
                conn, actor=actor, action=action, limit=size, after=cursor
            )
        except ValueError:
            filters.refuse("cursor", "bad cursor")
    return render_template(
        "ratchet/audit.html",
        page=page,
        args=page_args(size, actor=actor, what=action),
        cursor=cursor,
        size=size,
        sizes=filters.PAGE_SIZES,
    )
