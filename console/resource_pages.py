"""The resource limits and circuit breakers pages. GET only, and reads only.

Their changes (a limit, a breaker reset) are POSTed to :mod:`.resource_actions`. Like the other
pages, each is one template whose live part htmx re-fetches with ``hx-select`` from the same URL.
"""

from __future__ import annotations

from flask import abort, render_template, request

from flask_ratchet.options import RESOURCE_MAX_LENGTH
from flask_ratchet.resources import DEFAULT_RETRY_DELAY

from . import filters, reads
from .pages import current_runtime, live_after


def resources() -> str:
    """Every resource with a limit, permits out or live jobs naming it: its limit, permits in
    use and who holds them, its waiting jobs, and its running ones (started, or waiting for a
    worker thread)."""
    runtime = current_runtime()
    with runtime.connection() as conn:
        now = runtime.store.now(conn)
        report = reads.resources.resources(conn, runtime.store.dialect)
        live = reads.resources.live_node_ids(conn, now, live_after(runtime))
        started = reads.substates.started_by(conn, "resource")
    return render_template(
        "ratchet/resources.html",
        report=report,
        live=live,
        started=started,
        split=reads.substates.split,
        now=now,
        window=reads.resources.WAITING_WINDOW,
        max_resources=reads.resources.MAX_RESOURCES,
        name_max=RESOURCE_MAX_LENGTH,
        default_delay=DEFAULT_RETRY_DELAY,
    )


def resource_limit() -> str:
    """GET …/resources/limit?name=…: one resource and the form that sets its limit (for a name
    nothing uses yet, the form that gives it one)."""
    name = request.args.get("name", "")
    if not name or len(name) > RESOURCE_MAX_LENGTH:
        abort(404)
    runtime = current_runtime()
    with runtime.connection() as conn:
        now = runtime.store.now(conn)
        row = reads.resources.resource(conn, runtime.store.dialect, name)
        live = reads.resources.live_node_ids(conn, now, live_after(runtime))
    return render_template(
        "ratchet/resource_limit.html",
        r=row,
        live=live,
        window=reads.resources.WAITING_WINDOW,
        default_delay=DEFAULT_RETRY_DELAY,
    )


def breakers() -> str:
    """Every service's circuit breaker in each live worker, and its worst state."""
    runtime = current_runtime()
    with runtime.connection() as conn:
        now = runtime.store.now(conn)
        report = reads.resources.breakers(conn, now, live_after(runtime))
    return render_template(
        "ratchet/breakers.html",
        report=report,
        now=now,
        interval=runtime.config.heartbeat_interval,
        max_services=reads.resources.MAX_SERVICES,
    )


def breaker_reset() -> str:
    """GET …/breakers/reset?service=…: what resetting a service's breakers means, on which
    workers; asks to confirm."""
    service = request.args.get("service", "")
    if not service or len(service) > filters.MAX_TEXT:
        abort(404)
    runtime = current_runtime()
    with runtime.connection() as conn:
        now = runtime.store.now(conn)
        found = reads.resources.service_breakers(conn, now, live_after(runtime), service)
    return render_template(
        "ratchet/breaker_reset.html", svc=found, interval=runtime.config.heartbeat_interval
    )
