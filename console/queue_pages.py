"""The queues page (GET, read only): every queue's jobs by state, its last hour, whether it is
paused; ``?q=`` keeps the queues whose name holds that text, ``?after=`` starts the page after a
name. Admins pause and resume a queue from it (POSTed to :mod:`.queue_actions`)."""

from __future__ import annotations

from flask import abort, render_template, request

from . import filters, reads
from .pages import current_runtime
from .queue_chart import chart

#: The longest filter text: a queue name is at most 64 characters.
MAX_FILTER = 64


def queues() -> str:
    runtime = current_runtime()
    containing = request.args.get("q", "").strip() or None
    if containing is not None and len(containing) > MAX_FILTER:
        abort(400, f"q is longer than {MAX_FILTER} characters")
    after = filters.queue_name(request.args.get("after") or None)
    with runtime.connection() as conn:
        now = runtime.store.now(conn)
        report = reads.queues.queues(conn, runtime.store.queues, now, containing, after)
    return render_template(
        "ratchet/queues.html",
        report=report,
        chart=chart(report.rows),
        max_queues=reads.queues.MAX_QUEUES,
        contains=containing or "",
        after=after,
    )
