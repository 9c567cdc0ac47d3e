"""The Celery guide's worked port of a Celery app runs as written, on every database: its
code block is ``shop.py``, run by the real CLIs in subprocesses (an upgrade, requests, a burst
worker); and its pytest-flask example is a real project's test suite, run by pytest beside
pytest-flask."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.acceptance.test_sample_app_tests import pytest_in
from tests.docs.pages import DOCS, section_blocks
from tests.integration.test_docs_apps import python_in

PAGE = DOCS / "guides" / "coming-from-celery.md"


def shop_py() -> str:
    celery, ported = section_blocks(PAGE, "## A worked port")
    assert "celery.conf.task_routes" in celery  # the first block is the app before the port
    return ported


@pytest.mark.slow  # the real CLIs in subprocesses
def test_the_worked_port_runs_as_written(empty_engine: sa.Engine, tmp_path: Path) -> None:
    (tmp_path / "shop.py").write_text(shop_py())
    run = python_in(tmp_path, empty_engine)

    flask = ["-m", "flask", "--app", "shop"]
    run(*flask, "ratchet", "db", "upgrade")
    submitted = run(
        "-c",
        "import json\n"
        "from shop import create_app\n"
        "client = create_app().test_client()\n"
        "order = client.post('/orders/7')\n"
        "album = client.post('/albums', json=[1, 2, 3])\n"
        "assert (order.status_code, album.status_code) == (202, 202)\n"
        "print(json.dumps([order.text, album.text, client.get(f'/jobs/{order.text}').json]))\n",
    )
    order_id, album_id, before = json.loads(submitted)
    assert before == {"status": "PENDING", "result": None}
    queued = run(*flask, "ratchet", "jobs", "list", "--queue", "mail")
    assert "shop:send_receipt" in queued, queued  # RATCHET_ROUTES: send_* goes to mail
    run(*flask, "ratchet", "worker", "--burst", "--queues", "mail,default")
    ended = run(
        "-c",
        "import json\n"
        "from shop import create_app, ratchet, resize, total_bytes\n"
        "app = create_app()\n"
        "client = app.test_client()\n"
        f"states = [client.get('/jobs/{order_id}').json, client.get('/jobs/{album_id}').json]\n"
        "with app.app_context():\n"
        "    (chord,) = ratchet.find_jobs(task=total_bytes).items\n"
        "    sizes = [j.progress.message for j in ratchet.find_jobs(task=resize).items]\n"
        "print(json.dumps([states, chord.result, sizes]))\n",
    )
    states, total, progress = json.loads(ended)
    assert states == [
        {"status": "SUCCEEDED", "result": "receipt for order 7 sent"},
        {"status": "SUCCEEDED", "result": {"total": 3, "succeeded": 3, "failed": 0}},
    ]
    assert total == 1024 * (1 + 2 + 3)  # the chord's callback read every child's result
    assert progress == ["resizing"] * 3


@pytest.mark.slow  # a pytest run in a subprocess
def test_the_pytest_flask_example_passes(database_url: str, tmp_path: Path) -> None:
    conftest, tests = section_blocks(PAGE, "## pytest and pytest-flask")
    project = tmp_path / "project"
    project.mkdir()
    (project / "shop.py").write_text(shop_py())
    if not database_url.startswith("sqlite"):
        # The example's own SQLite file, swapped for this run's PostgreSQL or MariaDB database.
        sqlite = "f\"sqlite:///{tmp_path / 'test.db'}\""
        assert sqlite in conftest
        conftest = conftest.replace(sqlite, "os.environ['RATCHET_TEST_URL']")
        conftest = "import os\n" + conftest
    (project / "conftest.py").write_text(conftest)
    (project / "test_shop.py").write_text(tests)
    (project / "pytest.ini").write_text("[pytest]\npythonpath = .\n")
    env = os.environ | {"RATCHET_TEST_URL": database_url}
    done = pytest_in(project, "-p", "flask", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout, done.stdout
