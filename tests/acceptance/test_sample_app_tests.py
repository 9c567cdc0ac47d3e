"""A sample app's own test suite (examples/shop) uses the testing kit and the pytest plugin,
run as its team would: ``pytest`` in the project's folder, in a subprocess."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def pytest_in(
    folder: Path, *args: str, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )


def test_the_sample_apps_suite_passes_with_the_plugin(tmp_path: Path) -> None:
    shop = tmp_path / "shop"
    shutil.copytree(ROOT / "examples" / "shop", shop)
    done = pytest_in(shop, "-p", "no:flask")  # not its dependency: pytest-flask is ours
    assert done.returncode == 0, done.stdout + done.stderr
    assert "6 passed" in done.stdout, done.stdout
    # The same suite under pytest-flask, which pushes a request context around every test that
    # uses the app fixture: jobs then join the request's transaction.
    flask_style = pytest_in(shop)
    assert flask_style.returncode == 0, flask_style.stdout + flask_style.stderr
    assert "6 passed" in flask_style.stdout, flask_style.stdout
    # The plugin comes from the package's entry point: left out, its fixtures are unknown.
    without = pytest_in(shop, "-p", "no:flask_ratchet", "-k", "fixture")
    assert without.returncode != 0
    assert "fixture 'ratchet_jobs' not found" in without.stdout, without.stdout


PROJECT_CONFTEST = """
import pytest
from flask import Flask
from flask_sqlalchemy import SQLAlchemy

from flask_ratchet import Ratchet

db = SQLAlchemy()
ratchet = Ratchet()


@ratchet.task
def greet(name: str) -> str:
    return f"hello {name}"


@pytest.fixture(params=["one", "two"])
def database(request, tmp_path):
    return f"sqlite:///{tmp_path / request.param}.db"


@pytest.fixture
def web(database):  # parametrized, through the fixture it uses
    app = Flask(__name__)
    app.config["SQLALCHEMY_DATABASE_URI"] = database
    db.init_app(app)
    ratchet.init_app(app)
    return app
"""

PROJECT_TEST = """
from conftest import greet


def test_the_kit_runs_on_the_named_app(ratchet_jobs):
    greet.enqueue("ann")
    ratchet_jobs.assert_enqueued(greet, args=["ann"])
    (job,) = ratchet_jobs.run()
    assert job.result == "hello ann"
"""


def test_the_plugin_takes_the_app_fixture_the_ini_file_names(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(PROJECT_CONFTEST)
    (tmp_path / "test_named.py").write_text(PROJECT_TEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\npythonpath = .\n")
    unnamed = pytest_in(tmp_path)  # the default, ``app``: this project has none
    assert unnamed.returncode != 0
    assert "fixture 'app' not found" in unnamed.stdout, unnamed.stdout
    (tmp_path / "pytest.ini").write_text("[pytest]\npythonpath = .\nratchet_app_fixture = web\n")
    named = pytest_in(tmp_path)
    assert named.returncode == 0, named.stdout + named.stderr
    assert "2 passed" in named.stdout, named.stdout  # once per database
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\npythonpath = .\nratchet_app_fixture = tmp_path\n"
    )
    wrong = pytest_in(tmp_path)
    assert wrong.returncode != 0
    assert "need the fixture 'tmp_path' to give a Flask app, got PosixPath" in wrong.stdout


PYTEST_FLASK_CONFTEST = """
import os

import pytest
from flask import Flask
from flask_sqlalchemy import SQLAlchemy

from flask_ratchet import Ratchet

db = SQLAlchemy()
ratchet = Ratchet()


@ratchet.task
def greet(name: str) -> str:
    return f"hello {name}"


@pytest.fixture
def app():
    app = Flask(__name__)
    app.config["SQLALCHEMY_DATABASE_URI"] = os.environ["RATCHET_TEST_URL"]
    db.init_app(app)
    ratchet.init_app(app)

    @app.post("/greet/<name>")
    def greet_view(name):
        handle = greet.enqueue(name)
        db.session.commit()
        return ratchet.get_job(handle.id).status.value

    return app
"""

PYTEST_FLASK_TESTS = """
from flask import has_app_context


def greet_twice(client):
    return [client.post(f"/greet/{name}").text for name in ("ann", "bob")]


def test_eager_after_client(client, ratchet_eager):
    assert greet_twice(client) == ["SUCCEEDED", "SUCCEEDED"]


def test_eager_before_client(ratchet_eager, client):
    assert greet_twice(client) == ["SUCCEEDED", "SUCCEEDED"]


def test_jobs_after_client(client, ratchet_jobs):
    assert greet_twice(client) == ["PENDING", "PENDING"]
    assert [job.result for job in ratchet_jobs.run()] == ["hello ann", "hello bob"]


def test_jobs_before_client(ratchet_jobs, client):
    assert greet_twice(client) == ["PENDING", "PENDING"]
    assert [job.result for job in ratchet_jobs.run()] == ["hello ann", "hello bob"]


def test_both_after_client(client, ratchet_jobs, ratchet_eager):
    assert greet_twice(client) == ["SUCCEEDED", "SUCCEEDED"]


def test_client_between(ratchet_jobs, client, ratchet_eager):
    assert greet_twice(client) == ["SUCCEEDED", "SUCCEEDED"]


def test_every_context_was_popped():  # runs last: nothing the tests above pushed is left
    assert not has_app_context()
"""


def test_the_fixtures_work_beside_pytest_flasks_client_in_any_order(
    tmp_path: Path, database_url: str
) -> None:
    """pytest-flask's ``client`` keeps its last request's contexts pushed until its own
    fixture ends, which may come before or after the kit's fixtures end."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "conftest.py").write_text(PYTEST_FLASK_CONFTEST)
    (project / "test_beside_pytest_flask.py").write_text(PYTEST_FLASK_TESTS)
    (project / "pytest.ini").write_text("[pytest]\npythonpath = .\n")
    done = pytest_in(project, "-p", "flask", env=os.environ | {"RATCHET_TEST_URL": database_url})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "7 passed" in done.stdout and "error" not in done.stdout, done.stdout
