"""The apps the docs show run as written, on every database: the existing-app guide's and the
README's quick start are apps whose commands are the real CLIs in subprocesses; the console's
access rule and the metrics token grant what they say."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests import preloaded
from tests.docs.pages import DOCS, README, section_block

GUIDES = DOCS / "guides"


def python_in(folder: Path, engine: sa.Engine) -> Callable[..., str]:
    """Runs ``python *args`` in ``folder`` (importable) with ``DATABASE_URL`` set to
    ``engine``'s database; returns its output, failing the test if it fails."""
    env = os.environ | {
        "DATABASE_URL": engine.url.render_as_string(hide_password=False),
        "PYTHONPATH": str(folder),
    }

    def run(*args: str) -> str:
        done = preloaded.run(list(args), cwd=folder, env=env, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    return run


@pytest.mark.slow  # the real CLIs in subprocesses
def test_the_existing_app_section_runs_as_written(empty_engine: sa.Engine, tmp_path: Path) -> None:
    block = section_block(GUIDES / "existing-apps.md", "# Adding flask-ratchet to an existing app")
    (tmp_path / "myapp.py").write_text(block)
    run = python_in(tmp_path, empty_engine)
    flask = ["-m", "flask", "--app", "myapp"]
    run(*flask, "ratchet", "db", "upgrade")
    run(
        "-c",
        "from myapp import create_app, ratchet\n"
        "app = create_app()\n"
        "assert app.test_client().post('/reports/7/export').status_code == 202\n",
    )
    listed = run(*flask, "ratchet", "jobs", "list", "--status", "pending")
    assert "myapp:export_report" in listed, listed
    run(*flask, "ratchet", "worker", "--burst")
    assert "myapp:export_report" in run(*flask, "ratchet", "jobs", "list", "--status", "succeeded")
    # The app's own migrations: nothing of its own changed, and ratchet's tables are not seen.
    run(*flask, "db", "init")
    run(*flask, "db", "migrate", "-m", "nothing")
    assert list((tmp_path / "migrations" / "versions").glob("*.py")) == []


@pytest.mark.slow  # the real CLIs in subprocesses
def test_the_quick_start_runs_as_written(empty_engine: sa.Engine, tmp_path: Path) -> None:
    """Its app on this test's database (the block names a SQLite file): a sign-up's user and job
    appear together, and a worker runs the job."""
    block = section_block(README, "## Quick start")
    assert '"sqlite:///app.db"' in block
    (tmp_path / "quickstart.py").write_text(
        "import os\n" + block.replace('"sqlite:///app.db"', 'os.environ["DATABASE_URL"]')
    )
    run = python_in(tmp_path, empty_engine)
    script = (
        "from quickstart import create_app, db, ratchet\n"
        "app = create_app()\n"
        "with app.app_context():\n"
        "    db.create_all()\n"
        "    ratchet.runtime.ensure_schema() if ratchet.runtime.auto_create else None\n"
        "assert app.test_client().post('/signup', data={'email': 'a@example.com'}).text == 'ok'\n"
        "with app.app_context():\n"
        "    (job,) = ratchet.find_jobs().items\n"
        "    assert job.task == 'quickstart:send_welcome' and job.args == [1], job\n"
    )
    flask = ["-m", "flask", "--app", "quickstart"]
    run(*flask, "ratchet", "db", "upgrade")
    run("-c", script)
    run(*flask, "ratchet", "worker", "--burst")
    with empty_engine.connect() as conn:
        ended = conn.execute(sa.text("SELECT terminal_status FROM ratchet_job")).scalar_one()
    assert ended == "SUCCEEDED"


def test_the_access_example_grants_the_roles_it_says(tmp_path: Path) -> None:
    """The console guide's Access block, run in an app of its own with a stand-in for Flask-Login's
    ``current_user``."""
    from types import SimpleNamespace

    from flask import Flask, g
    from flask_sqlalchemy import SQLAlchemy

    from flask_ratchet import Ratchet

    app = Flask(__name__)
    app.config["SQLALCHEMY_DATABASE_URI"] = f"sqlite:///{tmp_path / 'access.db'}"
    user = SimpleNamespace(is_authenticated=False, email="ops@example.com", is_admin=False)
    access = section_block(GUIDES / "console.md", "## Access")
    exec(access, {"app": app, "g": g, "current_user": user})
    SQLAlchemy(app)
    Ratchet(app)
    client = app.test_client()
    assert client.get("/ratchet/").status_code == 403  # not signed in
    user.is_authenticated = True
    page = client.get("/ratchet/")
    assert page.status_code == 200 and "read · read only" in page.text
    user.is_admin = True
    page = client.get("/ratchet/")
    assert page.status_code == 200 and ">admin<" in page.text
    with app.app_context():
        app.extensions["sqlalchemy"].engine.dispose()


def test_the_metrics_token_example_grants_prometheus_read_and_no_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The observability guide's Cluster metrics block: the token reads /ratchet/metrics,
    nothing else; a person is judged by the app's own rule (here a stand-in for Flask-Login's
    ``current_user``)."""
    from types import SimpleNamespace

    from flask import Flask
    from flask_sqlalchemy import SQLAlchemy

    from flask_ratchet import Ratchet

    monkeypatch.setenv("METRICS_TOKEN", "s3cret-token")
    # Flask-Login's anonymous user has none of the app's own attributes (no ``is_admin``).
    user = SimpleNamespace(is_authenticated=False)
    scope: dict[str, object] = {"current_user": user}
    exec(section_block(GUIDES / "observability.md", "## Cluster metrics"), scope)
    app = Flask(__name__)
    app.config["SQLALCHEMY_DATABASE_URI"] = f"sqlite:///{tmp_path / 'metrics.db'}"
    app.config["RATCHET_CONSOLE_AUTH"] = scope["console_role"]
    SQLAlchemy(app)
    Ratchet(app)
    client = app.test_client()
    token = {"Authorization": "Bearer s3cret-token"}
    assert client.get("/ratchet/metrics").status_code == 403  # anonymous: 403, not 500
    assert client.get("/ratchet/metrics", headers={"Authorization": "Bearer x"}).status_code == 403
    scraped = client.get("/ratchet/metrics", headers=token)
    assert scraped.status_code == 200 and "ratchet_cluster_up 1.0" in scraped.text
    assert client.get("/ratchet/", headers=token).status_code == 403  # the token reads metrics only
    user.is_authenticated = user.is_admin = True
    assert client.get("/ratchet/").status_code == 200
    with app.app_context():
        app.extensions["sqlalchemy"].engine.dispose()
