"""A sample app's own test suite (examples/shop) uses the testing kit and the pytest plugin,
run as its team would: ``pytest`` in the project's folder, in a subprocess."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def pytest_in(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_sample_apps_suite_passes_with_the_plugin(tmp_path: Path) -> None:
    shop = tmp_path / "shop"
    shutil.copytree(ROOT / "examples" / "shop", shop)
    done = pytest_in(shop)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "6 passed" in done.stdout, done.stdout
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
