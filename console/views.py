"""Console pages. GET requests only read; every page is escaped by Jinja's autoescape."""

from __future__ import annotations

from flask import Blueprint, abort, current_app, g, render_template, request
from werkzeug.wrappers import Response

from flask_ratchet.extension import RatchetState
from flask_ratchet.states import JobStatus

ROLES = ("admin", "read")
PAGE_SIZE = 50


def _state() -> RatchetState:
    return current_app.extensions["ratchet"]  # type: ignore[no-any-return]


def authorize() -> None:
    """Refuse every request unless the host app's RATCHET_CONSOLE_AUTH grants a role."""
    auth = _state().config.console_auth
    role = auth(request) if auth is not None else None
    if role not in ROLES:
        abort(403)
    g.ratchet_role = role


def secure_headers(response: Response) -> Response:
    """No inline scripts, no framing, no sniffing."""
    response.headers["Content-Security-Policy"] = (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    )
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    return response


def overview() -> str:
    health = _state().ratchet.queue_health()
    return render_template("ratchet/overview.html", health=health, statuses=list(JobStatus))


def jobs() -> str:
    status = request.args.get("status") or None
    if status is not None and status not in JobStatus.__members__:
        abort(400, f"unknown status {status!r}")
    cursor = request.args.get("cursor") or None
    try:
        page = _state().ratchet.find_jobs(status=status, limit=PAGE_SIZE, cursor=cursor)
    except ValueError:
        abort(400, "bad cursor")
    return render_template("ratchet/jobs.html", page=page, status=status, statuses=list(JobStatus))


def job_detail(job_id: str) -> str:
    try:
        job = _state().ratchet.get_job(job_id)
    except ValueError:
        abort(404)
    if job is None:
        abort(404)
    return render_template("ratchet/job.html", job=job)


def register(bp: Blueprint) -> None:
    """Attach the views and guards to ``bp``."""
    bp.before_request(authorize)
    bp.after_request(secure_headers)
    bp.add_url_rule("/", "overview", overview)
    bp.add_url_rule("/jobs", "jobs", jobs)
    bp.add_url_rule("/jobs/<job_id>", "job", job_detail)
