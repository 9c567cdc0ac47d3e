"""The queues page (GET, read only): every queue's jobs by state, its last hour, whether it is
paused; admins pause and resume a queue from it (POSTed to :mod:`.queue_actions`)."""

from __future__ import annotations

from flask import render_template

from .pages import state
from .reads import queues as queue_rows


def queues() -> str:
    s = state()
    with s.connection() as conn:
        now = s.store.now(conn)
        report = queue_rows.queues(conn, s.store.queues, now)
    return render_template("ratchet/queues.html", report=report, max_queues=queue_rows.MAX_QUEUES)
