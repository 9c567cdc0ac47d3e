"""Set a resource's limit, and reset a service's circuit breakers in every worker.

POST only; :mod:`.security` has already checked the role, the CSRF token and the origin. Each
action writes its change and its audit row in the request's transaction and commits them
together. A limit goes through the library's own ``ratchet.configure_resource``, so a value it
refuses is answered with its error and nothing is written. A breaker reset *is* an audit row:
each worker reads the ``reset-breaker`` rows newer than its start at its next heartbeat and
resets its own breaker of that service (see ``maintenance/heartbeat.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from flask import abort, request, url_for
from werkzeug.wrappers import Response

from flask_ratchet.api.resources import configure_resource
from flask_ratchet.breaker import BREAKER_RESET
from flask_ratchet.resources import ResourceLimit

from . import filters, reads
from .actions import audit
from .htmx import notice_or_page
from .pages import current_runtime, live_after

#: The audit action of a limit set from the console.
SET_LIMIT = "set-limit"


@dataclass(frozen=True, slots=True)
class LimitChange:
    """A limit set: what it is now and what it was (``None``: the resource had none)."""

    limit: ResourceLimit
    before: ResourceLimit | None
    #: The heading of the page shown without JavaScript.
    action: str = "set limit"

    @property
    def changed(self) -> bool:
        return self.before != self.limit


@dataclass(frozen=True, slots=True)
class ResetOutcome:
    """A breaker reset: asked of ``workers`` live workers at ``at`` (none: nothing to reset)."""

    service: str
    workers: int
    at: datetime
    interval: float
    action: str = "reset breaker"


def set_limit() -> Response | str:
    """POST …/resources/limit with ``name``, ``max_concurrent`` and/or ``rate`` (``10/s``), and
    ``retry_delay`` (seconds):
    create or change a resource's limit through ``ratchet.configure_resource``, and audit it.

    A value it refuses is a 400 whose message is its error (a notice under htmx); nothing is
    written then, not even an audit row, as for any other malformed request.
    """
    name = request.form.get("name", "")
    # Any: whatever was typed goes to configure_resource, which checks it.
    typed_max = request.form.get("max_concurrent", "").strip()
    wanted_max: Any = filters.spelled_number("max_concurrent", typed_max) if typed_max else None
    # A rate as typed ("10/s"), checked by configure_resource; empty: none.
    wanted_rate = request.form.get("rate", "").strip() or None
    wanted_delay: Any = filters.spelled_number("retry_delay", request.form.get("retry_delay", ""))
    if isinstance(wanted_max, int) and wanted_max > filters.INT_MAX:
        # Its column is an INTEGER: PostgreSQL would refuse the row, SQLite store a number
        # no other reader expects.
        abort(400, f"max_concurrent must be at most {filters.INT_MAX}")
    runtime = current_runtime()
    with runtime.connection() as conn:
        before = runtime.store.resources.get_resource_limit(conn, name)
        try:
            limit = configure_resource(runtime, name, wanted_max, wanted_delay, wanted_rate)
        except ValueError as exc:
            abort(400, str(exc))
        outcome = LimitChange(limit, before)
        audit(conn, SET_LIMIT, "resource", name, 1, int(outcome.changed))
    return notice_or_page(
        "ratchet/_limit_notice.html", url_for("ratchet_console.resources"), outcome=outcome
    )


def reset_breaker() -> Response | str:
    """POST …/breakers/reset with ``service``: reset its circuit breaker in every worker, by
    writing the ``reset-breaker`` audit row the workers read at their next heartbeat.

    Refused, with nothing written, when no live worker reports a breaker for the service: the
    row would be a reset order all the same, for whichever worker made one later.
    """
    service = request.form.get("service", "")
    if not service or len(service) > filters.MAX_TEXT:
        abort(400, f"service must be a service's name of 1 to {filters.MAX_TEXT} characters")
    runtime = current_runtime()
    with runtime.connection() as conn:
        now = runtime.store.now(conn)
        found = reads.resources.service_breakers(conn, now, live_after(runtime), service)
        workers = len(found.nodes)
        if workers:
            # Requested of and passed on to every live worker that reports the breaker; each
            # applies it at its next heartbeat, which the page then shows.
            audit(conn, BREAKER_RESET, "breaker", service, workers, workers, at=now)
    outcome = ResetOutcome(service, workers, now, runtime.config.heartbeat_interval)
    return notice_or_page(
        "ratchet/_breaker_notice.html", url_for("ratchet_console.breakers"), outcome=outcome
    )
