"""The extension contract: registration, config errors, CLI, and a console closed by default."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import sqlalchemy as sa
from flask import Flask
from flask_sqlalchemy import SQLAlchemy

from flask_ratchet import ConfigError, Ratchet, migrate
from flask_ratchet.config import RatchetConfig
from tests.apps import add, create_app, db, ratchet


def test_the_runtime_lives_in_app_extensions_and_nothing_starts(tmp_path: Path) -> None:
    before = set(threading.enumerate())
    app = create_app(f"sqlite:///{tmp_path / 'a.db'}")
    runtime = app.extensions["ratchet"]
    assert runtime.registry is ratchet.registry
    assert isinstance(runtime.config, RatchetConfig)
    # No thread started (threads left by earlier tests may end meanwhile: compare identities).
    assert set(threading.enumerate()) <= before
    assert not (tmp_path / "a.db").exists() or not _has_ratchet_tables(tmp_path / "a.db")
    assert "ratchet" in app.cli.commands
    with app.app_context():
        db.engine.dispose()


def _has_ratchet_tables(path: Path) -> bool:
    import sqlite3

    with sqlite3.connect(path) as conn:
        query = "SELECT name FROM sqlite_master WHERE name LIKE 'ratchet_%'"
        names = conn.execute(query).fetchall()
    conn.close()
    return bool(names)


def test_second_registration_raises(tmp_path: Path) -> None:
    app = create_app(f"sqlite:///{tmp_path / 'a.db'}")
    with pytest.raises(RuntimeError, match="already registered"):
        ratchet.init_app(app)
    with app.app_context():
        db.engine.dispose()


def test_constructor_form_and_explicit_db(tmp_path: Path) -> None:
    app = Flask(__name__)
    app.config["SQLALCHEMY_DATABASE_URI"] = f"sqlite:///{tmp_path / 'b.db'}"
    other_db = SQLAlchemy(app)
    own = Ratchet(app, db=other_db)
    own.task(add)
    with app.app_context():
        assert own.runtime.db is other_db
        assert own.get_job(own.enqueue_now(add, 1, 2).id) is not None
        other_db.engine.dispose()


def test_missing_flask_sqlalchemy_is_explained() -> None:
    with pytest.raises(RuntimeError, match="needs Flask-SQLAlchemy"):
        Ratchet(Flask(__name__))


def test_bad_config_fails_at_init_app_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="RATCHET_MAX_PAYLOAD_BYTES"):
        create_app(f"sqlite:///{tmp_path / 'c.db'}", RATCHET_MAX_PAYLOAD_BYTES="big")


def test_operations_need_an_app_context() -> None:
    with pytest.raises(RuntimeError, match="application context"):
        ratchet.enqueue_now(add, 1, 2)


def test_in_memory_sqlite_is_refused_with_advice() -> None:
    app = create_app("sqlite://")
    with app.app_context(), pytest.raises(ValueError, match="not an in-memory database"):
        ratchet.enqueue_now(add, 1, 2)


def test_cli_db_and_jobs_commands(app: Flask) -> None:
    runner = app.test_cli_runner()
    result = runner.invoke(args=["ratchet", "db", "upgrade"])
    assert result.exit_code == 0, result.output
    current = runner.invoke(args=["ratchet", "db", "current"])
    head = migrate.head()
    assert f"current: {head}" in current.output and f"head:    {head}" in current.output
    handle = ratchet.enqueue_now(add, 1, 2)
    listed = runner.invoke(args=["ratchet", "jobs", "list", "--status", "pending"])
    assert str(handle.id) in listed.output and "PENDING" in listed.output
    shown = runner.invoke(args=["ratchet", "jobs", "show", str(handle.id)])
    assert '"task": "tests.apps:add"' in shown.output
    assert runner.invoke(args=["ratchet", "jobs", "cancel", str(handle.id)]).exit_code == 0
    again = runner.invoke(args=["ratchet", "jobs", "cancel", str(handle.id)])
    assert again.exit_code == 1 and "was not canceled" in again.output
    retry = runner.invoke(args=["ratchet", "jobs", "retry", str(handle.id)])
    assert retry.exit_code == 1 and "is not FAILED" in retry.output


def test_console_is_closed_without_auth(database_url: str) -> None:
    app = create_app(database_url, RATCHET_CONSOLE_AUTH=None)
    client = app.test_client()
    for url in ("/ratchet/", "/ratchet/jobs", "/ratchet/jobs/00000000-0000-0000-0000-000000000000"):
        assert client.get(url).status_code == 403
    with app.app_context():
        db.engine.dispose()


def test_console_pages_render_escaped(app: Flask) -> None:
    hostile = "<script>alert(1)</script>"
    handle = ratchet.enqueue(add, hostile, 1).with_tags('"><img src=x>').submit()
    client = app.test_client()
    assert client.get("/ratchet/").status_code == 403  # no role header
    headers = {"X-Role": "read"}
    for url in ("/ratchet/", "/ratchet/jobs?status=PENDING", f"/ratchet/jobs/{handle.id}"):
        response = client.get(url, headers=headers)
        assert response.status_code == 200, url
        assert "<script>alert" not in response.text and "<img src=x>" not in response.text
        assert "default-src 'self'" in response.headers["Content-Security-Policy"]
    assert client.get("/ratchet/jobs?status=NOPE", headers=headers).status_code == 400
    assert client.get("/ratchet/jobs/not-an-id", headers=headers).status_code == 404


def test_console_prefix_can_be_disabled(tmp_path: Path) -> None:
    app = create_app(f"sqlite:///{tmp_path / 'd.db'}", RATCHET_CONSOLE_URL_PREFIX=None)
    assert "ratchet_console" not in app.blueprints
    with app.app_context():
        db.engine.dispose()


def test_a_psycopg2_url_is_refused_at_start_saying_what_to_write(pg_url: str) -> None:
    # What a plain postgresql:// URL means before SQLAlchemy 2.1.
    plain = sa.make_url(pg_url).set(drivername="postgresql+psycopg2", password="s3cret")
    with pytest.raises(ConfigError) as refused:
        create_app(plain.render_as_string(hide_password=False))
    message = str(refused.value)
    assert message.startswith("SQLALCHEMY_DATABASE_URI: flask-ratchet talks to PostgreSQL")
    assert "this engine uses 'psycopg2'" in message
    expected = plain.set(drivername="postgresql+psycopg", password=None)
    assert repr(expected.render_as_string()) in message
    assert "s3cret" not in message
