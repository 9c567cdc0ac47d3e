"""The console is one module object, ``flask_ratchet.console``: the folder ``console/`` is that
package (``flask_ratchet/console`` is a symlink to it), and it is never imported as a top-level
``console``, which would be a second module with a blueprint of its own."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

from flask import Flask

import flask_ratchet.console
import flask_ratchet.console.reads
from flask_ratchet import Ratchet
from flask_ratchet.console import views

ROOT = Path(__file__).resolve().parents[2]


def test_the_extension_registers_flask_ratchet_consoles_blueprint() -> None:
    app = Flask(__name__)
    app.config["RATCHET_DATABASE_URL"] = "sqlite://"
    Ratchet(app)
    registered = app.blueprints["ratchet_console"]
    assert registered is flask_ratchet.console.blueprint
    assert sys.modules[registered.import_name] is flask_ratchet.console
    assert not [name for name in sys.modules if name.split(".")[0] == "console"]


def test_the_console_folder_is_the_package_through_a_relative_symlink() -> None:
    link = ROOT / "flask_ratchet" / "console"
    assert link.is_symlink() and os.readlink(link) == "../console"  # relative: a clone works
    assert Path(flask_ratchet.console.__file__).resolve() == ROOT / "console" / "__init__.py"
    reads = Path(flask_ratchet.console.reads.__file__).resolve()
    assert reads == ROOT / "console" / "reads" / "__init__.py"


def test_a_top_level_console_import_is_refused() -> None:
    for statement in ("import console", "from console.reads.queues import queue_names"):
        done = subprocess.run(
            [sys.executable, "-c", statement], cwd=ROOT, capture_output=True, text=True
        )
        assert done.returncode == 1, statement
        assert "the console is flask_ratchet.console" in done.stderr, done.stderr


def test_every_view_and_filter_the_console_names_exists() -> None:
    assert len(views.NAMED) > 50  # the routes and template filters register() named
    for module, name, _ in sorted(views.NAMED):
        found = getattr(importlib.import_module(f"flask_ratchet.console.{module}"), name, None)
        assert callable(found), f"flask_ratchet.console.{module} has no function {name}"


def test_an_app_loads_the_consoles_pages_at_its_first_console_request(tmp_path: Path) -> None:
    """A process that loads the app and never serves the console (a worker, a CLI command)
    does not import the pages, actions and reads; the first request that needs them does."""
    program = """
import sys
from flask import Flask
from flask_ratchet import Ratchet
app = Flask("host")
app.config["RATCHET_DATABASE_URL"] = sys.argv[1]
app.config["RATCHET_CONSOLE_AUTH"] = lambda request: "read"
Ratchet(app)
heavy = ("flask_ratchet.console.pages", "flask_ratchet.console.reads")
print(sorted(name for name in heavy if name in sys.modules))
status = app.test_client().get("/ratchet/").status_code
print(status, sorted(name for name in heavy if name in sys.modules))
"""
    done = subprocess.run(
        [sys.executable, "-c", program, f"sqlite:///{tmp_path / 'app.db'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    before, after = done.stdout.splitlines()
    assert before == "[]"
    assert after == "200 ['flask_ratchet.console.pages', 'flask_ratchet.console.reads']"
