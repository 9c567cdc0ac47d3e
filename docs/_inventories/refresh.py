"""Refresh the intersphinx inventories the docs build reads (``docs/_inventories/*.inv``).

The build never touches the network: ``conf.py`` points intersphinx at these files. Run this
when a project's docs move on::

    python docs/_inventories/refresh.py            # every project
    python docs/_inventories/refresh.py sqlalchemy # one

Each inventory is taken, in order, from the project's published ``objects.inv``; else from the
copy a Debian documentation package installs (``python3-doc``, ``python-flask-doc``,
``python-click-doc``); else it is written from ``STAND_INS`` below: the names these docs link
to, with their pages on the project's site, for a machine that reaches neither. The file says
which source it came from (its ``version`` field).
"""

from __future__ import annotations

import sys
import urllib.request
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: name: (the site intersphinx links to, a Debian package's copy of its inventory).
PROJECTS: dict[str, tuple[str, str | None]] = {
    "python": ("https://docs.python.org/3/", "/usr/share/doc/python3/html/objects.inv"),
    "flask": (
        "https://flask.palletsprojects.com/en/stable/",
        "/usr/share/doc/python-flask-doc/html/objects.inv",
    ),
    "flask_sqlalchemy": ("https://flask-sqlalchemy.readthedocs.io/en/stable/", None),
    "sqlalchemy": ("https://docs.sqlalchemy.org/en/20/", None),
    "alembic": ("https://alembic.sqlalchemy.org/en/latest/", None),
    "blinker": ("https://blinker.readthedocs.io/en/stable/", None),
    "click": (
        "https://click.palletsprojects.com/en/stable/",
        "/usr/share/doc/python-click-doc/html/objects.inv",
    ),
}

#: name: [(object, role, page#anchor)], written when neither source above can be read.
STAND_INS: dict[str, list[tuple[str, str, str]]] = {
    "flask_sqlalchemy": [
        ("flask_sqlalchemy.SQLAlchemy", "py:class", "api/#flask_sqlalchemy.SQLAlchemy"),
        (
            "flask_sqlalchemy.SQLAlchemy.session",
            "py:attribute",
            "api/#flask_sqlalchemy.SQLAlchemy.session",
        ),
    ],
    "sqlalchemy": [
        ("sqlalchemy.engine.Engine", "py:class", "core/connections.html#sqlalchemy.engine.Engine"),
        (
            "sqlalchemy.engine.Connection",
            "py:class",
            "core/connections.html#sqlalchemy.engine.Connection",
        ),
        ("sqlalchemy.engine.URL", "py:class", "core/engines.html#sqlalchemy.engine.URL"),
        ("sqlalchemy.orm.Session", "py:class", "orm/session_api.html#sqlalchemy.orm.Session"),
        ("sqlalchemy.schema.MetaData", "py:class", "core/metadata.html#sqlalchemy.schema.MetaData"),
        ("sqlalchemy.schema.Table", "py:class", "core/metadata.html#sqlalchemy.schema.Table"),
    ],
    "blinker": [("blinker.NamedSignal", "py:class", "#blinker.NamedSignal")],
    "alembic": [
        ("alembic.config.Config", "py:class", "api/config.html#alembic.config.Config"),
        (
            "alembic.runtime.environment.EnvironmentContext.configure",
            "py:method",
            "api/runtime.html#alembic.runtime.environment.EnvironmentContext.configure",
        ),
    ],
}


def published(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url + "objects.inv", timeout=20) as answer:
            return bytes(answer.read())
    except OSError:
        return None


def stand_in(name: str) -> bytes:
    """An inventory (format 2) of ``STAND_INS[name]``."""
    header = (
        "# Sphinx inventory version 2\n"
        f"# Project: {name}\n"
        "# Version: stand-in\n"
        "# The remainder of this file is compressed using zlib.\n"
    )
    body = "".join(f"{obj} {role} 1 {uri} -\n" for obj, role, uri in STAND_INS[name])
    return header.encode() + zlib.compress(body.encode(), 9)


def refresh(name: str) -> str:
    url, debian = PROJECTS[name]
    data = published(url)
    source = url
    if data is None and debian and Path(debian).exists():
        data, source = Path(debian).read_bytes(), debian
    if data is None:
        data, source = stand_in(name), "STAND_INS"
    (HERE / f"{name}.inv").write_bytes(data)
    return source


def main(names: list[str]) -> None:
    for name in names or list(PROJECTS):
        print(f"{name}: {refresh(name)}")


if __name__ == "__main__":
    main(sys.argv[1:])
