"""The operator console blueprint, mounted by ``init_app`` at ``RATCHET_CONSOLE_URL_PREFIX``.

Closed by default: every URL answers 403 until the host app sets ``RATCHET_CONSOLE_AUTH`` to a
callable ``(request) -> "admin" | "read" | None``. Templates and static files ship inside the
package and are found with :mod:`importlib.resources`.

This folder is the package ``flask_ratchet.console`` (``flask_ratchet/console`` is a symlink to
it), and is imported by that name only: imported as a top-level ``console`` from a checkout, it
would be a second module object with a blueprint of its own.
"""

from __future__ import annotations

from importlib.resources import files

from flask import Blueprint

# Before the console's own modules are imported: never as console.views and the like.
if __name__ != "flask_ratchet.console":
    raise ImportError(
        f"the console is flask_ratchet.console: import it by that name, not {__name__}"
    )

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
