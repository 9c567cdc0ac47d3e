"""The app and tasks the tests use. Importable by worker subprocesses as ``tests.apps``."""

from __future__ import annotations

import os
from typing import Any

from flask import Flask
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy.orm import Mapped, mapped_column

from flask_ratchet import Priority, Ratchet

db = SQLAlchemy()
ratchet = Ratchet()


class Order(db.Model):  # type: ignore[name-defined,misc]
    """A host-app table, to show jobs commit and roll back with the app's own rows."""

    id: Mapped[int] = mapped_column(primary_key=True)
    item: Mapped[str]


@ratchet.task
def add(a: int, b: int) -> int:
    return a + b


@ratchet.task(name="billing.charge", priority=Priority.HIGH, max_retries=5, tags=["billing"])
def charge(payment_id: int) -> dict[str, Any]:
    return {"charged": payment_id}


def unregistered(x: int) -> int:
    """Not a task, and tests.apps is not allow-listed by default."""
    return x


def create_app(url: str | None = None, **config: Any) -> Flask:
    """An app on ``url`` (default ``$RATCHET_TEST_URL``) with ratchet's console open to admins."""
    app = Flask(__name__)
    app.config["SQLALCHEMY_DATABASE_URI"] = url or os.environ["RATCHET_TEST_URL"]
    app.config["RATCHET_CONSOLE_AUTH"] = lambda request: request.headers.get("X-Role")
    app.config.update(config)
    db.init_app(app)
    ratchet.init_app(app)
    with app.app_context():
        db.create_all()  # the host's tables only: ratchet's live on their own MetaData
    return app
