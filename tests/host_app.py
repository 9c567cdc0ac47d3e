"""An existing app taking flask-ratchet in: Flask-SQLAlchemy, Flask-Migrate and a model of its own,
for the tests that run the real ``flask db`` CLI in a subprocess.

``HOST_DATABASE_URL`` names its database; ``HOST_MIGRATE_FIRST=1`` registers Flask-Migrate before
ratchet (else after); any other ``HOST_<KEY>`` sets config ``KEY``
(``HOST_RATCHET_AUTO_CREATE=false``).
"""

from __future__ import annotations

import os

from flask import Flask
from flask_migrate import Migrate
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from flask_ratchet import Ratchet


class Base(DeclarativeBase):
    pass


db = SQLAlchemy(model_class=Base)
migrations = Migrate()
ratchet = Ratchet()


class Invoice(db.Model):  # type: ignore[name-defined,misc]
    id: Mapped[int] = mapped_column(primary_key=True)
    number: Mapped[str]


def create_app() -> Flask:
    app = Flask(__name__)
    app.config["SQLALCHEMY_DATABASE_URI"] = os.environ["HOST_DATABASE_URL"]
    app.config.from_prefixed_env("HOST")
    db.init_app(app)
    if os.environ.get("HOST_MIGRATE_FIRST") == "1":
        migrations.init_app(app, db)
        ratchet.init_app(app)
    else:
        ratchet.init_app(app)
        migrations.init_app(app, db)
    return app
