"""Who may see the console, who may act, and the checks every state change passes.

- Closed by default: without ``RATCHET_CONSOLE_AUTH``, or when it grants no role, every URL is 403.
- ``read`` sees everything and can change nothing; ``admin`` may act.
- Every state change is a POST from an admin that carries the CSRF token (header
  ``X-Ratchet-CSRF``, sent by htmx through ``hx-headers``, or the ``csrf_token`` form field) and
  comes from a page of this site (``Origin``, or ``Referer`` when a browser sends no ``Origin``:
  same scheme and host, or one of ``RATCHET_CONSOLE_ORIGINS`` when that is set).

The CSRF token is a double-submit token: a random value in an ``HttpOnly``, ``SameSite=Strict``
cookie scoped to the console, repeated in the page. It needs no server-side session and no
``SECRET_KEY`` from the host app; another site can neither read the cookie nor make a browser send
it, and the ``Origin`` check refuses cross-site POSTs on its own as well. So the host app's own
CSRF protection (Flask-WTF's ``CSRFProtect``) is told to leave the console alone
(:func:`exempt_from_host_csrf`).
"""

from __future__ import annotations

import hmac
import re
import secrets
import sys
from urllib.parse import urlsplit

from flask import abort, current_app, g, request
from flask.sansio.app import App
from flask.sansio.blueprints import Blueprint
from werkzeug.wrappers import Response

ROLES = ("admin", "read")
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
CSRF_COOKIE = "ratchet_csrf"
CSRF_HEADER = "X-Ratchet-CSRF"
CSRF_FIELD = "csrf_token"
#: Exactly what ``secrets.token_urlsafe(32)`` makes: any other cookie value is replaced.
CSRF_TOKEN_FORMAT = re.compile(r"[A-Za-z0-9_-]{43}")

#: No inline script or style anywhere: htmx is a file, and its indicator styles are turned off.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'; "
    "object-src 'none'"
)


def is_console_path() -> bool:
    """Whether the request's path lies under the console's prefix, routed or not.

    Slashes are merged first: the app's URL map redirects ``//ratchet//jobs`` to the route it
    names, which would tell a stranger the route exists.
    """
    prefix = current_app.extensions["ratchet"].config.console_url_prefix
    if prefix is None:
        return False
    path = re.sub("/{2,}", "/", request.path)
    return path == prefix or path.startswith(prefix + "/")


def authorize() -> None:
    """Refuse every request the host app's ``RATCHET_CONSOLE_AUTH`` grants no role, and every
    state change that is not an admin's POST with the CSRF token from this site."""
    auth = current_app.extensions["ratchet"].config.console_auth
    role = auth(request) if auth is not None else None
    if role not in ROLES:
        # Says where access is configured, not who may have it: an operator setting the
        # console up needs the one, anyone else learns nothing from it.
        abort(
            403,
            "The console is closed to this request. Access is configured by the app: "
            "RATCHET_CONSOLE_AUTH, a function of the request returning 'read' or 'admin' "
            "(flask-ratchet README, Console, Access).",
        )
    g.ratchet_role = role
    _load_csrf_token()
    if request.method in SAFE_METHODS:
        return
    if role != "admin":
        abort(403, "read-only access: this role cannot change jobs")
    if not _same_origin():
        abort(403, "cross-origin request refused")
    sent = request.headers.get(CSRF_HEADER) or request.form.get(CSRF_FIELD, "")
    if g.ratchet_csrf_new or not hmac.compare_digest(sent.encode(), g.ratchet_csrf.encode()):
        abort(403, "missing or wrong CSRF token; reload the page and try again")


def exempt_from_host_csrf(app: App, blueprint: Blueprint) -> None:
    """Exempt the console's ``blueprint`` from ``app``'s Flask-WTF ``CSRFProtect``, if it has
    one (the same again changes nothing).

    Its global check would refuse every console POST ("The CSRF session token is missing"):
    they carry the console's own token, checked by :func:`authorize`, never Flask-WTF's.
    Another extension registered as ``csrf`` is left alone: its ``exempt`` may take no
    blueprint.
    """
    csrf = app.extensions.get("csrf")
    flask_wtf = sys.modules.get("flask_wtf.csrf")  # imported already by any app that uses it
    if flask_wtf is not None and isinstance(csrf, flask_wtf.CSRFProtect):
        csrf.exempt(blueprint)


def actor() -> str:
    """Who is acting, for the audit trail.

    The host app may name the user by setting ``g.ratchet_actor`` in its auth callable; otherwise
    the web server's user (``REMOTE_USER``), or the client address. Never the HTTP Basic user
    name from the ``Authorization`` header: nothing says the host checked its password, so any
    client could write any name into the trail.
    """
    named = g.get("ratchet_actor")
    if named:
        return str(named)
    if request.remote_user:
        return request.remote_user
    return request.remote_addr or "unknown"


def can_act() -> bool:
    """Whether the current role may change jobs (templates hide the buttons otherwise)."""
    return bool(g.get("ratchet_role") == "admin")


def csrf_token() -> str:
    """The token pages repeat in ``hx-headers`` and in every form."""
    # Empty when the request was refused before its cookie was read (an error page).
    return str(g.get("ratchet_csrf", ""))


def _load_csrf_token() -> None:
    token = request.cookies.get(CSRF_COOKIE, "")
    g.ratchet_csrf_new = CSRF_TOKEN_FORMAT.fullmatch(token) is None
    g.ratchet_csrf = secrets.token_urlsafe(32) if g.ratchet_csrf_new else token


def _same_origin() -> bool:
    """Whether the request comes from a page of this console.

    With ``RATCHET_CONSOLE_ORIGINS`` set, the origin must be one of those: that holds even when
    an attacker's DNS name points at this server (DNS rebinding), where ``Host`` and ``Origin``
    both carry the attacker's name. Without it, scheme and host must match the request's (so
    behind a TLS-terminating proxy, ``request.scheme`` must be the browser's: e.g. ``ProxyFix``).
    """
    source = request.headers.get("Origin") or request.headers.get("Referer")
    if not source or source == "null":
        return False
    try:
        parts = urlsplit(source)
    except ValueError:
        # An unclosed IPv6 bracket ("http://[x"): no page of this site sends that.
        return False
    origin = f"{parts.scheme}://{parts.netloc}".lower()
    allowed = current_app.extensions["ratchet"].config.console_origins
    if allowed:
        return origin in allowed
    return origin == f"{request.scheme}://{request.host}".lower()


def secure_headers(response: Response) -> Response:
    """A strict CSP, no framing or sniffing, no caching; and the CSRF cookie when it is new."""
    response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Referrer-Policy"] = "same-origin"
    if request.endpoint != "ratchet_console.static":
        response.headers["Cache-Control"] = "no-store"
    if g.get("ratchet_csrf_new"):
        response.set_cookie(
            CSRF_COOKIE,
            g.ratchet_csrf,
            path=_cookie_path(),
            httponly=True,
            samesite="Strict",
            # Secure under HTTPS, and whenever the host says its cookies are (e.g. behind a
            # proxy that terminates TLS without telling werkzeug).
            secure=request.is_secure or bool(current_app.config.get("SESSION_COOKIE_SECURE")),
        )
    return response


def _cookie_path() -> str:
    prefix = current_app.extensions["ratchet"].config.console_url_prefix or "/"
    return str(request.script_root + prefix) or "/"
