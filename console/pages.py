"""The console's pages. GET only, and reads only: nothing here writes to the database.

Live parts of a page are re-fetched by htmx with ``hx-select`` from the same URL, so every page
is one template that also works without JavaScript.
"""

from __future__ import annotations

import uuid
from typing import Any

from flask import abort, current_app, render_template, request, url_for
from sqlalchemy.engine import Connection

from flask_ratchet.extension import RatchetState
from flask_ratchet.states import Action, JobStatus, allowed
from flask_ratchet.store import console_queries as queries
from flask_ratchet.store import console_reports as reports

from . import filters
from .present import chart

#: A job list's "new jobs" banner counts no further than this.
NEW_CAP = 999


def state() -> RatchetState:
    """The current app's ratchet state."""
    return current_app.extensions["ratchet"]  # type: ignore[no-any-return]


def overview() -> str:
    """Counts per status, the last hour's throughput, queue health, nodes and recent actions."""
    s = state()
    with s.connection() as conn:
        now = s.store.now(conn)
        counts = reports.status_counts(conn)
        minutes = reports.throughput(conn, now)
        oldest = reports.oldest_due_age(conn, now)
        p95 = reports.p95_queue_wait(conn, now)
        nodes = reports.nodes(conn, now)
        audit = reports.recent_audit(conn)
    live_after = 3 * s.config.heartbeat_interval
    return render_template(
        "ratchet/overview.html",
        counts=counts,
        chart=chart(minutes),
        oldest=oldest,
        p95=p95,
        nodes=[n for n in nodes if n.heartbeat_age <= live_after],
        audit=audit,
        now=now,
    )


def jobs() -> str:
    """The job list: filters, sort, keyset pages, and a banner counting newer jobs."""
    wanted = filters.parse(request.args)
    s = state()
    with s.connection() as conn:
        try:
            page = queries.list_jobs(conn, wanted.query, wanted.size, wanted.cursor)
        except ValueError:
            abort(400, "bad cursor")
        newest = _newest(conn, wanted, page) if wanted.cursor is None else None
    return render_template(
        "ratchet/jobs.html",
        page=page,
        wanted=wanted,
        args=wanted.args,
        newest=newest,
        filtered=bool(filters.filter_args(wanted.args)),
        search_window=queries.SEARCH_WINDOW,
        can_search=filters.can_search_arguments(),
        statuses=list(JobStatus),
        sorts=queries.SORTS,
        sizes=filters.PAGE_SIZES,
    )


def _newest(
    conn: Connection, wanted: filters.ListRequest, page: queries.JobList
) -> uuid.UUID | None:
    """The newest matching job when the page is drawn: the "new jobs" banner counts from it.

    Newest first, that is the first row; in another order the page may not hold it, so it is
    looked up (one row off the end of the same index the list walks).
    """
    if not page.rows:
        return None
    if wanted.query.sort == "newest":
        return page.rows[0].id
    found = queries.matching_ids(conn, wanted.query, 1)
    return found[0] if found else max(r.id for r in page.rows)


def jobs_new() -> str:
    """The banner of the job list: how many matching jobs arrived since the page was drawn."""
    wanted = filters.parse(request.args)
    newest = _job_id_or_404(request.args.get("newest", ""))
    s = state()
    with s.connection() as conn:
        n = queries.newer_than(conn, wanted.query, newest, NEW_CAP)
    return render_template(
        "ratchet/_jobs_new.html", n=n, cap=NEW_CAP, args=wanted.args, newest=newest
    )


def job_detail(job_id: str) -> str:
    """One job: facts, arguments, progress, executions, logs, alerts, neighbours, actions."""
    key = _job_id_or_404(job_id)
    s = state()
    job = s.ratchet.get_job(key)
    if job is None:
        abort(404)
    with s.connection() as conn:
        extras = reports.job_extras(conn, key)
    actions = [
        name
        for name, action in (
            ("retry", Action.RETRY),
            ("pause", Action.PAUSE),
            ("resume", Action.RESUME),
            ("cancel", Action.CANCEL),
        )
        if allowed(action, job.status)
    ]
    if job.is_terminal:
        actions.append("delete")
    return render_template("ratchet/job.html", job=job, extras=extras, actions=actions)


def dead_letters() -> str:
    """Jobs that failed for good, grouped by task and error, with their alerts."""
    s = state()
    with s.connection() as conn:
        groups = reports.failure_groups(conn)
    return render_template("ratchet/dlq.html", groups=groups)


def nodes() -> str:
    """Every worker node: heartbeat age, running jobs, version."""
    s = state()
    with s.connection() as conn:
        now = s.store.now(conn)
        rows = reports.nodes(conn, now)
    return render_template(
        "ratchet/nodes.html", nodes=rows, live_after=3 * s.config.heartbeat_interval
    )


def list_url(args: dict[str, str], **changes: str | None) -> str:
    """The job list's URL with ``args`` changed (``None`` removes a parameter)."""
    merged: dict[str, Any] = {**args, **changes}
    return url_for("ratchet_console.jobs", **{k: v for k, v in merged.items() if v})


def _job_id_or_404(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        abort(404)
