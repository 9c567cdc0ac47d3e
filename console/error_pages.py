"""Errors on htmx requests become a notice the page shows.

htmx swaps nothing for a 4xx or 5xx unless its ``responseHandling`` says so (see
:data:`.views.HTMX_CONFIG`); when it does, this handler makes sure what it swaps is a short
notice in ``#notice``, whatever element sent the request: a live region that polls must not be
replaced by an error. Requests without htmx get werkzeug's usual error page.
"""

from __future__ import annotations

import logging

from flask import render_template
from sqlalchemy.exc import OperationalError
from werkzeug.exceptions import HTTPException, ServiceUnavailable
from werkzeug.wrappers import Response

from .htmx import fragment, is_htmx


def answer(error: HTTPException) -> Response | HTTPException:
    """The ``_notice`` fragment with the error's message for htmx; the error page otherwise."""
    if not is_htmx():
        return error
    body = render_template(
        "ratchet/_notice.html", error=error.description or error.name, code=error.code
    )
    response = fragment(body, error.code or 500, retarget="#notice", reswap="innerHTML")
    # The sender's own hx-select (a live region's id) would find nothing in this fragment.
    response.headers["HX-Reselect"] = ".notice"
    return response


def database_unavailable(error: OperationalError) -> Response | HTTPException:
    """503 for a database that does not answer (down, unreachable, out of connections): the
    console can show nothing, and says so, instead of a server error."""
    logging.getLogger(__name__).warning(
        "console: the database did not answer: %s", type(error.orig or error).__name__
    )
    return answer(ServiceUnavailable("The jobs database did not answer. Try again in a moment."))
