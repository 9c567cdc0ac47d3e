"""An app for gunicorn ``--preload`` whose factory queries the database before the fork, as many
do (``db.create_all()``, a ratchet call): every web worker inherits the master's pool.

``PRELOAD_DATABASE_URL`` names its database. ``POST /notes/<token>`` adds a note and enqueues a
job for it in the request's transaction, then commits, or rolls both back with ``?fail=1``.
"""

from __future__ import annotations

import os

from flask import Flask, request
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy import String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from flask_ratchet import Ratchet


class Base(DeclarativeBase):
    pass


db = SQLAlchemy(model_class=Base)
ratchet = Ratchet()


class Note(db.Model):  # type: ignore[name-defined,misc]
    id: Mapped[int] = mapped_column(primary_key=True)
    token: Mapped[str] = mapped_column(String(64))  # MariaDB needs a length


@ratchet.task
def noted(token: str) -> None:
    """The job each note sets off (the test only counts them)."""


def create_app() -> Flask:
    app = Flask(__name__)
    app.config["SQLALCHEMY_DATABASE_URI"] = os.environ["PRELOAD_DATABASE_URL"]
    app.config["RATCHET_AUTO_CREATE"] = True
    db.init_app(app)
    ratchet.init_app(app)
    with app.app_context():
        db.create_all()
        ratchet.queue_health()  # ratchet's own query, before the fork too

    @app.post("/notes/<token>")
    def add_note(token: str) -> str:
        db.session.add(Note(token=token))
        ratchet.enqueue_now(noted, token)
        if request.args.get("fail"):
            db.session.rollback()
            return "rolled back"
        db.session.commit()
        return "committed"

    return app
