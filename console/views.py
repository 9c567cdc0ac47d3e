"""Wiring: the console's URLs, guards, and what its templates may call.

Pages live in :mod:`.pages` (GET, read only), actions in :mod:`.actions` (POST, admin only),
a batch's actions in :mod:`.batch_actions`, the workflow list in :mod:`.workflow_pages`,
those of resource limits and circuit breakers in :mod:`.resource_pages` and
:mod:`.resource_actions`, those of queues in :mod:`.queue_pages` and :mod:`.queue_actions`, and
the checks every request passes in :mod:`.security`.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

from flask import Blueprint, abort, current_app, render_template, request
from flask.sansio.blueprints import BlueprintSetupState
from sqlalchemy.exc import DBAPIError, OperationalError
from werkzeug.exceptions import HTTPException
from werkzeug.wrappers import Response

from flask_ratchet.errors import SchemaNotReady

from . import error_pages, security
from .htmx import CHANGED_EVENT, is_htmx

#: The package the views' modules are in (``flask_ratchet.console``).
_PACKAGE = __name__.rpartition(".")[0]

#: Reflected into the page head so htmx never injects a style element (the CSP forbids it) and
#: never evaluates strings as code. Attributes are not inherited: a form inside a live region
#: must not pick up the region's ``hx-select``/``hx-swap`` (only ``hx-headers`` is, from body).
HTMX_CONFIG = {
    "disableInheritance": True,
    "includeIndicatorStyles": False,
    "allowEval": False,
    "allowScriptTags": False,
    "selfRequestsOnly": True,
    "historyCacheSize": 0,
    # htmx swaps no 4xx/5xx by default, so a refused action would show nothing: swap the
    # notice the error handler sends instead (5xx too), and let 204 leave the page alone.
    "responseHandling": [
        {"code": "204", "swap": False},
        {"code": "[23]..", "swap": True},
        {"code": "[45]..", "swap": True, "error": True},
    ],
}


def _template_globals() -> dict[str, Any]:
    from . import pages, replica

    return {
        "can_act": security.can_act(),
        "csrf_token": security.csrf_token(),
        "csrf_header": security.CSRF_HEADER,
        "csrf_field": security.CSRF_FIELD,
        "htmx_config": HTMX_CONFIG,
        "changed_event": CHANGED_EVENT,
        "list_url": pages.list_url,
        "page_url": pages.page_url,
        # Called by the layout alone, so a fragment or a notice never reads the alarms.
        "header_alarms": pages.header_alarms,
        "header_replica": replica.header_replica,
    }


def _guard() -> None:
    """The checks every console request passes: the role, the CSRF token and origin of a state
    change, then no NUL character in any parameter."""
    from .filters import refuse_nul_characters

    security.authorize()
    refuse_nul_characters(request.args)
    refuse_nul_characters(request.form)


def _schema_ready() -> Response | None:
    """After the guard: a page saying what to run while ratchet's tables are missing or older
    than this version needs (503), instead of a database error on every page. Not for the
    metrics, whose scrape says itself that it cannot read the database
    (``ratchet_cluster_up 0``), so that an alert on it fires."""
    if request.endpoint == "ratchet_console.metrics":
        return None
    try:
        current_app.extensions["ratchet"].ensure_schema()
    except SchemaNotReady as exc:
        if is_htmx():
            abort(503, description=str(exc))
        return Response(render_template("ratchet/schema.html", problem=str(exc)), 503)
    return None


def _guard_unrouted() -> Response | None:
    """The same wall for a URL under the console's prefix that matches no route, or no route
    for its method.

    Flask runs a blueprint's hooks only for URLs that matched one of its routes, so such a URL
    would answer 404 or 405 to anyone, mapping the routes. App-wide ``before_request`` hooks
    run for every request, before ``dispatch_request`` raises the routing error. Routed console
    URLs keep the blueprint's own hook, which runs after every app-wide one: a host app that
    names its user in a hook of its own, registered after ``init_app``, still has by then
    (for an unknown URL it may not have yet: at worst a 403 where a 404 was due). The host
    app's own routes under the prefix, if any, are its own business.
    """
    if request.url_rule is None and security.is_console_path():
        # The blueprint's error handlers and template helpers do not apply to a URL it does
        # not route: the page is drawn here, in the console's layout, with its helpers.
        try:
            _guard()
        except HTTPException as refused:
            return error_pages.page(refused, **_template_globals())
        routing = request.routing_exception
        if isinstance(routing, HTTPException) and (routing.code or 500) >= 400:  # not a redirect
            return error_pages.page(routing, **_template_globals())
    return None


def _exempt_when_registered(state: BlueprintSetupState) -> None:
    """A host app that set up Flask-WTF's ``CSRFProtect`` before ratchet: its check runs before
    any hook of the console's, so the console is exempted at once."""
    security.exempt_from_host_csrf(state.app, state.blueprint)


def _exempt_before_host_csrf() -> None:
    """A host app that sets up ``CSRFProtect`` after ratchet: this app-wide hook, registered
    with the console, runs before Flask-WTF's check on every console request."""
    if request.blueprint == "ratchet_console":
        blueprint = current_app.blueprints["ratchet_console"]
        security.exempt_from_host_csrf(current_app, blueprint)


def _headers(response: Response) -> Response:
    """The console's headers on every response under its prefix: pages, refusals, routing
    errors and server errors alike (Flask runs app-wide ``after_request`` hooks for each)."""
    if request.blueprint == "ratchet_console" or security.is_console_path():
        return security.secure_headers(response)
    return response


#: Every (module, function, shown) the views name, for the test that each exists.
NAMED: set[tuple[str, str, bool]] = set()


@functools.cache
def _loaded(module: str, name: str, shown: bool) -> Callable[..., Any]:
    view: Callable[..., Any] = getattr(importlib.import_module(f"{_PACKAGE}.{module}"), name)
    if shown:
        from .replica import from_replica

        view = from_replica(view)
    return view


def _lazy(module: str, name: str, *, shown: bool = False) -> Callable[..., Any]:
    """The function ``name`` of the console's module ``module``, imported at its first call.

    The pages, actions and their reads are imported by the first request that needs them: a
    process that loads the app and never serves the console (a worker, a ``flask ratchet``
    command) does not load them, which was a tenth of its start-up. ``shown``: a page that
    only shows, whose reads go to the read replica if there is one (see :mod:`.replica`)."""

    NAMED.add((module, name, shown))

    def call(*args: Any, **kwargs: Any) -> Any:
        return _loaded(module, name, shown)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__module__ = f"{_PACKAGE}.{module}"
    return call


def _shown(module: str, name: str) -> Callable[..., Any]:
    """:func:`_lazy` for a page that only shows: its reads go to the read replica."""
    return _lazy(module, name, shown=True)


def _retried(action: Callable[..., Any]) -> Callable[..., Any]:
    """``action`` run in one transaction committed when it returns (``Runtime.unit_of_work``:
    the request's ``db.session``, or a transaction of ratchet's own database), and run again
    from the start, that transaction rolled back first, when the database gave it up to break
    a deadlock or a lock wait (see ``Runtime.again_after``)."""

    @functools.wraps(action)
    def run(*args: Any, **kwargs: Any) -> Any:
        runtime = current_app.extensions["ratchet"]
        attempt = 1
        while True:
            try:
                with runtime.unit_of_work():
                    return action(*args, **kwargs)
            except DBAPIError as exc:
                if not runtime.again_after(exc, attempt):
                    raise
            attempt += 1

    return run


def register(bp: Blueprint) -> None:
    """Attach the views, guards and template helpers to ``bp``."""
    bp.record(_exempt_when_registered)
    bp.before_app_request(_exempt_before_host_csrf)
    bp.before_request(_guard)
    bp.before_request(_schema_ready)
    bp.before_app_request(_guard_unrouted)
    bp.register_error_handler(HTTPException, error_pages.answer)
    bp.register_error_handler(OperationalError, error_pages.database_unavailable)
    bp.after_app_request(_headers)
    bp.context_processor(_template_globals)
    for name in (
        "masked",
        "masked_text",
        "pretty_json",
        "arguments",
        "duration",
        "when",
        "count",
        "first_line",
        "short_id",
        "audit_filter",
        "in_zone",
        "batch_bar",
        "wall_time",
        "parallelism",
        "condition",
        "condition_meaning",
        "waiting",
        "percent",
        "seconds",
        "visible",
        "relative",
        "head",
    ):
        bp.add_app_template_filter(_lazy("present", name), f"ratchet_{name}")
    bp.add_app_template_filter(_lazy("present", "iso"), "ratchet_iso")
    bp.add_app_template_filter(_lazy("pages", "ago"), "ratchet_ago")

    # Pages that only show read from the read replica, if there is one (see .replica); the
    # pages leading to an action (a confirmation, a limit's form) read the database itself.
    bp.add_url_rule("/", "overview", _shown("pages", "overview"))
    bp.add_url_rule("/alarms", "alarms", _shown("pages", "alarms"))
    bp.add_url_rule("/jobs", "jobs", _shown("pages", "jobs"))
    bp.add_url_rule("/jobs/new-count", "jobs_new", _shown("pages", "jobs_new"))
    bp.add_url_rule("/jobs/<job_id>", "job", _shown("pages", "job_detail"))
    bp.add_url_rule("/dead-letters", "dead_letters", _shown("pages", "dead_letters"))
    bp.add_url_rule("/nodes", "nodes", _shown("pages", "nodes"))
    bp.add_url_rule("/audit", "audit", _shown("audit_page", "audit"))
    bp.add_url_rule("/metrics", "metrics", _lazy("metrics", "metrics"))  # reads the replica itself
    bp.add_url_rule("/queues", "queues", _shown("queue_pages", "queues"))
    bp.add_url_rule("/recurring", "recurring", _shown("recurring_pages", "recurring"))
    bp.add_url_rule(
        "/recurring/cancel",
        "confirm_recurring_cancel",
        _lazy("recurring_pages", "recurring_cancel"),
    )
    bp.add_url_rule("/batches", "batches", _shown("pages", "batches"))
    bp.add_url_rule("/batches/<batch_id>", "batch", _shown("pages", "batch_detail"))
    bp.add_url_rule(
        "/batches/<batch_id>/<action>", "confirm_batch_action", _lazy("batch_actions", "confirm")
    )
    bp.add_url_rule("/workflows", "workflows", _shown("workflow_pages", "workflows"))
    bp.add_url_rule("/resources", "resources", _shown("resource_pages", "resources"))
    bp.add_url_rule("/resources/limit", "resource_limit", _lazy("resource_pages", "resource_limit"))
    bp.add_url_rule("/breakers", "breakers", _shown("resource_pages", "breakers"))
    bp.add_url_rule(
        "/breakers/reset", "confirm_breaker_reset", _lazy("resource_pages", "breaker_reset")
    )

    bp.add_url_rule(
        "/jobs/<job_id>/signal",
        "act_signal",
        _retried(_lazy("signal_actions", "decide")),
        methods=["POST"],
    )
    bp.add_url_rule(
        "/jobs/<job_id>/<action>", "act_one", _retried(_lazy("actions", "one")), methods=["POST"]
    )
    bp.add_url_rule(
        "/jobs/selected", "act_selected", _retried(_lazy("actions", "selected")), methods=["POST"]
    )
    bp.add_url_rule(
        "/jobs/bulk", "confirm_bulk", _lazy("actions", "confirm_filter"), methods=["GET"]
    )
    bp.add_url_rule(
        "/jobs/bulk", "act_bulk", _retried(_lazy("actions", "on_filter")), methods=["POST"]
    )
    bp.add_url_rule(
        "/batches/<batch_id>/<action>",
        "act_batch",
        _retried(_lazy("batch_actions", "act")),
        methods=["POST"],
    )
    bp.add_url_rule(
        "/recurring/<action>",
        "act_recurring",
        _retried(_lazy("actions", "recurring_one")),
        methods=["POST"],
    )
    bp.add_url_rule(
        "/resources/limit",
        "act_resource_limit",
        _retried(_lazy("resource_actions", "set_limit")),
        methods=["POST"],
    )
    bp.add_url_rule(
        "/breakers/reset",
        "act_breaker_reset",
        _retried(_lazy("resource_actions", "reset_breaker")),
        methods=["POST"],
    )
    bp.add_url_rule(
        "/queues/<action>",
        "act_queue",
        _retried(_lazy("queue_actions", "set_paused")),
        methods=["POST"],
    )
