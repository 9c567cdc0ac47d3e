"""Missing or old tables say what to run, in the app, the worker and the console; several
upgrades at once converge."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import sqlalchemy as sa

from flask_ratchet import SchemaNotReady, migrate
from tests.apps import add, create_app, ratchet
from tests.integration.test_console import ADMIN
from tests.preloaded import Process, launcher

ROOT = Path(__file__).resolve().parents[2]
OLD = "0004"


def host_cli(engine: sa.Engine, output: Path, *args: str, **env: str) -> Process:
    """``flask <args>`` of tests.host_app on ``engine``'s database, started (not waited for),
    writing into the folder ``output``."""
    output.mkdir(exist_ok=True)
    number = len(list(output.glob("*.out")))
    return launcher().start(
        ["-m", "flask", "--app", "tests.host_app:create_app()", *args],
        os.environ | {"HOST_DATABASE_URL": engine.url.render_as_string(hide_password=False)} | env,
        ROOT,
        output / f"{number}.out",
        output / f"{number}.err",
    )


@pytest.mark.parametrize("revision", [None, OLD], ids=["missing", "old"])
def test_an_enqueue_says_what_to_run_and_works_once_it_is_run(
    empty_engine: sa.Engine, revision: str | None
) -> None:
    if revision is not None:
        migrate.upgrade(empty_engine, revision)
    app = create_app(
        empty_engine.url.render_as_string(hide_password=False), RATCHET_AUTO_CREATE=False
    )
    found = "are missing" if revision is None else f"are at revision {revision}"
    with app.app_context():
        with pytest.raises(SchemaNotReady) as refused:
            ratchet.enqueue_now(add, 1, 2)
        message = str(refused.value)
        assert found in message and f"needs revision {migrate.HEAD}" in message
        assert "Run 'flask ratchet db upgrade' once" in message
        assert migrate.current(empty_engine) == revision  # nothing was created or changed
        migrate.upgrade(empty_engine)
        assert ratchet.get_job(ratchet.enqueue_now(add, 1, 2).id) is not None  # no restart


def test_the_host_apps_own_pages_work_without_ratchets_tables(empty_engine: sa.Engine) -> None:
    app = create_app(
        empty_engine.url.render_as_string(hide_password=False), RATCHET_AUTO_CREATE=False
    )
    app.add_url_rule("/hello", "hello", lambda: "hello")
    assert app.test_client().get("/hello").text == "hello"


def test_the_console_shows_what_to_run(empty_engine: sa.Engine) -> None:
    migrate.upgrade(empty_engine, OLD)
    app = create_app(
        empty_engine.url.render_as_string(hide_password=False), RATCHET_AUTO_CREATE=False
    )
    client = app.test_client()
    page = client.get("/ratchet/jobs", headers=ADMIN)
    assert page.status_code == 503
    assert 'class="notice warn" role="alert"' in page.text
    assert f"are at revision {OLD}" in page.text and "flask ratchet db upgrade" in page.text
    assert page.headers["X-Content-Type-Options"] == "nosniff"
    fragment = client.get("/ratchet/jobs", headers=ADMIN | {"HX-Request": "true"})
    assert fragment.status_code == 503 and "flask ratchet db upgrade" in fragment.text
    assert client.get("/ratchet/jobs").status_code == 403  # the wall comes first
    migrate.upgrade(empty_engine)
    assert client.get("/ratchet/jobs", headers=ADMIN).status_code == 200


@pytest.mark.parametrize(
    "command",
    [
        ("worker", "--burst"),
        ("jobs", "list"),
        ("jobs", "show", "01a21bed-0000-7000-8000-000000000000"),
        ("queues", "list"),
        ("recurring", "list"),
    ],
    ids=lambda command: " ".join(command[:2]),
)
def test_a_command_without_its_tables_exits_with_one_line(
    empty_engine: sa.Engine, command: tuple[str, ...], tmp_path: Path
) -> None:
    run = host_cli(empty_engine, tmp_path, "ratchet", *command, HOST_RATCHET_AUTO_CREATE="false")
    out, err = run.communicate(timeout=120)
    assert run.returncode == 1, out + err
    assert "Traceback" not in err, err
    (line,) = [line for line in err.splitlines() if line.startswith("Error:")]
    assert "are missing" in line and "Run 'flask ratchet db upgrade' once" in line


def test_several_upgrades_at_once_converge(empty_engine: sa.Engine, tmp_path: Path) -> None:
    """The pods of one deploy, each running `flask ratchet db upgrade` as it starts."""
    upgrades = [host_cli(empty_engine, tmp_path, "ratchet", "db", "upgrade") for _ in range(4)]
    for upgrade in upgrades:
        out, err = upgrade.communicate(timeout=120)
        assert upgrade.returncode == 0, out + err
    assert migrate.current(empty_engine) == migrate.HEAD
