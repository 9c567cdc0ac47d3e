"""A second app on the test database, with tasks of its own that ``tests.apps`` does not know:
two apps sharing one database, or an old and a new deploy of one app. Importable by worker
subprocesses as ``tests.second_app``."""

from __future__ import annotations

import json
import os
from typing import Any

from flask import Flask
from flask_sqlalchemy import SQLAlchemy

from flask_ratchet import Ratchet

db = SQLAlchemy()
ratchet = Ratchet()


@ratchet.task
def only_here(n: int) -> int:
    """Returns the pid of the worker that ran it."""
    return os.getpid()


@ratchet.task(queue="second")
def only_here_queued(n: int) -> int:
    """The same, in a queue of this app's own."""
    return os.getpid()


def create_app(url: str | None = None, **config: Any) -> Flask:
    app = Flask(__name__)
    app.config["SQLALCHEMY_DATABASE_URI"] = url or os.environ["RATCHET_TEST_URL"]
    app.config.update(json.loads(os.environ.get("RATCHET_TEST_CONFIG", "{}")))
    app.config.update(config)
    db.init_app(app)
    ratchet.init_app(app)
    return app
