"""The operator console blueprint, mounted by ``init_app`` at ``RATCHET_CONSOLE_URL_PREFIX``.

Closed by default: every URL answers 403 until the host app sets ``RATCHET_CONSOLE_AUTH`` to a
callable ``(request) -> "admin" | "read" | None``. Templates and static files ship inside the
package and are found with :mod:`importlib.resources`.
"""

from __future__ import annotations

from importlib.resources import files

from flask import Blueprint

from .views import register

blueprint = Blueprint(
    "ratchet_console",
    __name__,
    template_folder=str(files("flask_ratchet.templates")),
    static_folder=str(files("flask_ratchet.static") / "ratchet"),
    static_url_path="/static",
)
register(blueprint)

__all__ = ["blueprint"]
