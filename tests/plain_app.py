"""An app without Flask-SQLAlchemy: ratchet on a database of its own (``RATCHET_DATABASE_URL``).
Importable by worker subprocesses as ``tests.plain_app``."""

from __future__ import annotations

import os
from typing import Any

from flask import Flask, request

from flask_ratchet import Ratchet

plain = Ratchet()


@plain.task
def shout(text: str) -> str:
    return text.upper()


def create_plain_app(url: str | None = None, **config: Any) -> Flask:
    """An app whose only database is ratchet's, at ``url`` (default ``$RATCHET_TEST_URL``)."""
    app = Flask(__name__)
    app.config["RATCHET_DATABASE_URL"] = url or os.environ["RATCHET_TEST_URL"]
    app.config["RATCHET_CONSOLE_AUTH"] = lambda request: request.headers.get("X-Role")
    app.config.update(config)
    plain.init_app(app)

    @app.post("/shout")
    def shout_later() -> tuple[str, int]:
        handle = shout.enqueue(request.form["text"])  # commits by itself: no session to join
        return str(handle.id), 202

    @app.post("/shout-all")
    def shout_all() -> tuple[str, int]:
        with plain.transaction():  # all or nothing
            for text in request.form.getlist("text"):
                shout.enqueue(text)
            if request.form.get("fail"):
                raise ValueError("the request failed after enqueueing")
        return "queued", 202

    return app
