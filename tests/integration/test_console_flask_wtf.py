"""The console in a host app that protects every POST with Flask-WTF's ``CSRFProtect``: the
console's actions, which carry its own token, go through whichever of ``CSRFProtect(app)`` and
``ratchet.init_app(app)`` comes first, and the host's own forms stay protected."""

from __future__ import annotations

import re

import pytest
from flask import Flask, render_template_string
from flask_wtf.csrf import CSRFProtect

from flask_ratchet.console.security import CSRF_COOKIE
from flask_ratchet.states import JobStatus
from tests.apps import add, db, made, ratchet
from tests.integration.test_console import ADMIN, ORIGIN, Console

COMMENT_FORM = '<form method="post"><input name="csrf_token" value="{{ csrf_token() }}"></form>'


def host_app(url: str, *, csrf_first: bool) -> Flask:
    """An app with Flask-WTF's global CSRF protection, set up before or after ratchet."""
    app = Flask(__name__)
    app.config["SQLALCHEMY_DATABASE_URI"] = url
    app.config["SECRET_KEY"] = "the host's secret"  # Flask-WTF keeps its token in the session
    app.config["RATCHET_CONSOLE_AUTH"] = lambda request: request.headers.get("X-Role")
    csrf = CSRFProtect()
    if csrf_first:
        csrf.init_app(app)
    db.init_app(app)
    made.append(app)
    ratchet.init_app(app)
    if not csrf_first:
        csrf.init_app(app)

    @app.get("/comment")
    def comment_form() -> str:
        return render_template_string(COMMENT_FORM)

    @app.post("/comment")
    def comment() -> str:
        return "thanks"

    return app


@pytest.mark.parametrize("csrf_first", [True, False], ids=["csrf-first", "ratchet-first"])
def test_console_actions_pass_flask_wtf_and_the_hosts_forms_stay_protected(
    database_url: str, csrf_first: bool
) -> None:
    app = host_app(database_url, csrf_first=csrf_first)
    with app.app_context():
        canceled, paused = add.enqueue(1, 2).id, add.enqueue(3, 4).id
        # The app's first request is a console POST: a form on a page loaded before the server
        # restarted, whose token the browser still holds in the console's cookie.
        browser = app.test_client()
        token = "t" * 43  # the form the console's cookie holds
        browser.set_cookie(CSRF_COOKIE, token, path="/ratchet")
        with app.app_context():  # the request's own session, as in a server
            done = browser.post(
                f"/ratchet/jobs/{canceled}/cancel",
                headers=ADMIN | ORIGIN,
                data={"csrf_token": token},
            )
        assert done.status_code == 200 and "canceled" in done.text, done.text
        console = Console(app.test_client())
        assert console.post(f"/ratchet/jobs/{paused}/pause", htmx=True).status_code == 200
        assert ratchet.get_job(canceled).status == JobStatus.CANCELED  # type: ignore[union-attr]
        assert ratchet.get_job(paused).status == JobStatus.PAUSED  # type: ignore[union-attr]
        # Exempt from Flask-WTF, the console still refuses a POST without its own token.
        refused = console.client.post(f"/ratchet/jobs/{paused}/resume", headers=ADMIN | ORIGIN)
        assert refused.status_code == 403
        assert ratchet.get_job(paused).status == JobStatus.PAUSED  # type: ignore[union-attr]

    host = app.test_client()
    missing = host.post("/comment")
    assert missing.status_code == 400 and "The CSRF token is missing" in missing.text
    found = re.search(r'value="([^"]+)"', host.get("/comment").text)
    assert found is not None
    assert host.post("/comment", data={"csrf_token": found.group(1)}).text == "thanks"
