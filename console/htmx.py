"""htmx request headers and responses, through htmx-flask, without touching the host app.

htmx-flask's ``Htmx.init_app`` replaces ``app.request_class``; an extension must not change its
host app that way, so the console builds htmx-flask's ``HtmxHeaders`` from the current request's
headers itself and uses its ``make_response`` (a plain function) for response headers.
"""

from __future__ import annotations

from typing import Any

from flask import render_template, request
from htmx_flask.requests import HtmxHeaders  # type: ignore[import-untyped]
from htmx_flask.response import make_response  # type: ignore[import-untyped]
from werkzeug.wrappers import Response

#: The client-side event that makes live parts of a page reload after an action.
CHANGED_EVENT = "ratchet-changed"


def is_htmx() -> bool:
    """Whether the current request was sent by htmx (``HX-Request: true``)."""
    return bool(HtmxHeaders(request.headers))


def refreshes_a_region() -> bool:
    """Whether the request is htmx refreshing one live region of a page, which it names
    (``HX-Target``): it swaps that region alone, whatever else the page draws."""
    headers = HtmxHeaders(request.headers)
    return bool(headers) and bool(headers.target)


def fragment(body: str, status: int = 200, **headers: Any) -> Response:
    """A partial for htmx, with htmx response headers (``trigger=…``, ``retarget=…``…)."""
    response = make_response(body, status, **headers)
    assert isinstance(response, Response)
    return response


def notice_or_page(
    notice: str, back: str, location: str | None = None, **context: Any
) -> Response | str:
    """What an action answers: the ``notice`` template for htmx (with the event that refreshes
    live parts, and ``location`` to go to instead), or the "done" page showing it without JS,
    with a link ``back``."""
    if is_htmx():
        body = render_template(notice, back=back, **context)
        return fragment(body, trigger=CHANGED_EVENT, location=location)
    return render_template("ratchet/done.html", notice=notice, back=back, **context)
