"""Error answers: a page in the console's layout, or a notice for htmx.

htmx swaps nothing for a 4xx or 5xx unless its ``responseHandling`` says so (see
:data:`.views.HTMX_CONFIG`); when it does, :func:`answer` makes sure what it swaps is a short
notice in ``#notice``, whatever element sent the request: a live region that polls must not be
replaced by an error. A request without htmx gets a page in the console's layout saying what
went wrong: a 400 from a query string shows its form again with the bad field marked
(:class:`BadParameter` names it), a 404 for a job id says how long ended jobs are kept.
"""

from __future__ import annotations

import logging
from typing import Any

from flask import g, render_template, request
from sqlalchemy.exc import OperationalError
from werkzeug.exceptions import BadRequest, HTTPException, ServiceUnavailable
from werkzeug.wrappers import Response

from .htmx import fragment, is_htmx

#: The most query parameters a 400 page shows again as a form (the job list has 14).
MAX_FIELDS_SHOWN = 20
#: The longest parameter name or value the form shows again.
MAX_SHOWN = 300
#: The longest ``Referer`` a refused form's page links back to.
MAX_REFERRER = 2000


class BadParameter(BadRequest):
    """A 400 naming the request parameter at fault, so that the error page can mark it."""

    def __init__(self, parameter: str, description: str) -> None:
        super().__init__(description)
        self.parameter = parameter


def answer(error: HTTPException) -> Response:
    """The ``_notice`` fragment with the error's message for htmx; the error page otherwise."""
    if not is_htmx():
        return page(error)
    body = render_template(
        "ratchet/_notice.html", error=error.description or error.name, code=error.code
    )
    response = fragment(body, error.code or 500, retarget="#notice", reswap="innerHTML")
    # The sender's own hx-select (a live region's id) would find nothing in this fragment.
    response.headers["HX-Reselect"] = ".notice"
    return response


def page(error: HTTPException, **context: Any) -> Response:
    """``error`` as a page in the console's layout, with the error's own headers (a 405's
    ``Allow``). Reads nothing from the database: it may be what failed. ``context`` is the
    layout's helpers where the blueprint's context processor does not run (an unrouted URL)."""
    parameter = getattr(error, "parameter", None)
    body = render_template(
        "ratchet/error.html",
        code=error.code or 500,
        name=error.name,
        message=error.description or error.name,
        parameter=parameter,
        form_fields=_fields_again(parameter),
        back=_form_page(error),
        **context,
    )
    response = Response(body, error.code or 500, mimetype="text/html")
    for name, value in error.get_headers():
        if name.lower() != "content-type":
            response.headers[name] = value
    return response


def _fields_again(parameter: str | None) -> list[tuple[str, str]]:
    """The query string of a GET refused for ``parameter``, to show as its form again; none
    for a POST (its form is on the page it came from, with a CSRF token) or a refused role."""
    if parameter is None or request.method != "GET" or not g.get("ratchet_role"):
        return []
    fields = [
        (name[:MAX_SHOWN], value[:MAX_SHOWN])
        for name, value in request.args.items(multi=True)
        if "\x00" not in name and "\x00" not in value
    ]
    return fields[:MAX_FIELDS_SHOWN]


def _form_page(error: HTTPException) -> str | None:
    """The console page a refused form was sent from (its ``Referer``, sent for this site
    only), to link back to; None for anything but a 400 on a POST, or another site's page."""
    if error.code != 400 or request.method != "POST" or not g.get("ratchet_role"):
        return None
    referrer = request.referrer or ""
    if not referrer.startswith(request.host_url) or len(referrer) > MAX_REFERRER:
        return None
    return referrer


def database_unavailable(error: OperationalError) -> Response:
    """503 for a database that does not answer (down, unreachable, out of connections): the
    console can show nothing, and says so, instead of a server error."""
    logging.getLogger(__name__).warning(
        "console: the database did not answer: %s", type(error.orig or error).__name__
    )
    return answer(ServiceUnavailable("The jobs database did not answer. Try again in a moment."))
