"""The built wheel is self-contained: console, templates, static files and migrations included."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import venv
import zipfile
from pathlib import Path

import pytest

from flask_ratchet import migrate

ROOT = Path(__file__).resolve().parents[2]
VERSIONS = ROOT / "migrations" / "versions"
CONSOLE = ROOT / "console"
TEMPLATES = ROOT / "templates" / "ratchet"

SCRIPT = textwrap.dedent(
    """
    import importlib.util, sys, flask_ratchet
    # What SQLite users do not need: no PostgreSQL driver, no web server.
    for absent in ("psycopg", "psycopg2", "gunicorn"):
        assert importlib.util.find_spec(absent) is None, absent
    from flask import Flask
    from flask_sqlalchemy import SQLAlchemy
    from flask_ratchet import Ratchet
    assert "site-packages" in flask_ratchet.__file__, flask_ratchet.__file__
    app = Flask(__name__)
    app.config["SQLALCHEMY_DATABASE_URI"] = "sqlite:///" + sys.argv[1]
    app.config["RATCHET_CONSOLE_AUTH"] = lambda request: "read"
    db = SQLAlchemy(app)
    ratchet = Ratchet(app)
    client = app.test_client()
    page = client.get("/ratchet/")
    assert page.status_code == 200 and b"Overview" in page.data, page.status_code
    css = client.get("/ratchet/static/console.css")
    assert css.status_code == 200 and b".pill" in css.data
    @ratchet.task
    def hello(name):
        return name
    with app.app_context():
        job_id = ratchet.enqueue_now(hello, "wheel").id
        assert ratchet.get_job(job_id) is not None
    print("ok")
    """
)


@pytest.mark.slow
def test_wheel_installs_and_serves_the_console(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(tmp_path / "dist"), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (wheel,) = (tmp_path / "dist").glob("flask_ratchet-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for expected in (
        "flask_ratchet/console/views.py",
        "flask_ratchet/templates/ratchet/overview.html",
        "flask_ratchet/static/ratchet/console.css",
        "flask_ratchet/static/ratchet/htmx.min.js",
        "flask_ratchet/static/ratchet/VENDORED.json",
        *(f"flask_ratchet/console/{p.relative_to(CONSOLE)}" for p in CONSOLE.rglob("*.py")),
        *(f"flask_ratchet/templates/ratchet/{p.name}" for p in TEMPLATES.glob("*.html")),
        "flask_ratchet/migrations/env.py",
        "flask_ratchet/migrations/script.py.mako",
        *(f"flask_ratchet/migrations/versions/{p.name}" for p in VERSIONS.glob("0*.py")),
        "flask_ratchet/py.typed",
    ):
        assert expected in names
    env = tmp_path / "venv"
    # No pip of its own (setting one up costs more than the rest of the test): this process's
    # pip installs into it.
    venv.create(env, with_pip=False)
    python = env / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", str(wheel)],
        check=True,
        capture_output=True,
    )
    db_file = tmp_path / "wheel.db"
    run = subprocess.run(
        [str(python), "-c", SCRIPT, str(db_file)], capture_output=True, text=True, cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "ok"
    (tmp_path / "wheelapp.py").write_text(
        "from flask import Flask\n"
        "from flask_sqlalchemy import SQLAlchemy\n"
        "from flask_ratchet import Ratchet\n"
        "app = Flask(__name__)\n"
        f"app.config['SQLALCHEMY_DATABASE_URI'] = 'sqlite:///{tmp_path / 'cli.db'}'\n"
        "Ratchet(app, db=SQLAlchemy(app))\n"
    )
    flask = [str(env / "bin" / "flask"), "--app", "wheelapp", "ratchet", "db"]
    upgrade = subprocess.run([*flask, "upgrade"], capture_output=True, text=True, cwd=tmp_path)
    assert upgrade.returncode == 0, upgrade.stderr
    current = subprocess.run([*flask, "current"], capture_output=True, text=True, cwd=tmp_path)
    head = migrate.head()
    assert f"current: {head}" in current.stdout, current.stdout + current.stderr


def test_every_package_folder_is_listed_for_the_wheel() -> None:
    import tomllib

    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    # Through the symlink flask_ratchet/console too, which rglob() may not follow.
    found = {
        ".".join(Path(folder).relative_to(ROOT).parts)
        for folder, _, names in os.walk(ROOT / "flask_ratchet", followlinks=True)
        if "__init__.py" in names
    }
    assert "flask_ratchet.console.reads" in found
    assert found <= listed, f"add {sorted(found - listed)} to [tool.setuptools] packages"
