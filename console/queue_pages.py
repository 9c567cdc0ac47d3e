"""The queues page (GET, read only): every queue's jobs by state, its last hour, whether it is
paused; admins pause and resume a queue from it (POSTed to :mod:`.queue_actions`)."""

from __future__ import annotations

from flask import render_template

from . import reads
from .pages import current_runtime


def queues() -> str:
    runtime = current_runtime()
    with runtime.connection() as conn:
        now = runtime.store.now(conn)
        report = reads.queues.queues(conn, runtime.store.queues, now)
    return render_template("ratchet/queues.html", report=report, max_queues=reads.queues.MAX_QUEUES)
