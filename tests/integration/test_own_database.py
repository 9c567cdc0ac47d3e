"""An app without Flask-SQLAlchemy uses ratchet with ``RATCHET_DATABASE_URL``, on every
database: each operation commits by itself (in a request too), unless inside
``ratchet.transaction()``; the testing kit, a worker and the console work on that engine."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask
from flask_sqlalchemy import SQLAlchemy

from flask_ratchet import ConfigError, JobStatus, Ratchet
from flask_ratchet.testing import run_jobs
from flask_ratchet.worker.runner import Worker
from tests.apps import add, create_app, db, ratchet
from tests.integration.helpers import count
from tests.integration.test_console import Console
from tests.plain_app import create_plain_app, plain, shout


@pytest.fixture
def plain_app(database_url: str) -> Iterator[Flask]:
    app = create_plain_app(database_url)
    with app.app_context():
        app.extensions["ratchet"].ensure_schema()
        yield app
    app.extensions["ratchet"].engine.dispose()


def jobs_written(url: str) -> int:
    return count("ratchet_job", url)


def test_a_request_enqueue_commits_by_itself_and_run_jobs_runs_it(
    plain_app: Flask, database_url: str
) -> None:
    assert "sqlalchemy" not in plain_app.extensions
    assert plain_app.extensions["ratchet"].db is None
    answer = plain_app.test_client().post("/shout", data={"text": "hello"})
    assert answer.status_code == 202
    assert jobs_written(database_url) == 1  # seen from another connection: committed
    (ran,) = run_jobs(plain_app)
    assert (str(ran.id), ran.status, ran.result) == (answer.text, JobStatus.SUCCEEDED, "HELLO")


def test_a_transaction_groups_enqueues_all_or_nothing(plain_app: Flask, database_url: str) -> None:
    client = plain_app.test_client()
    failed = client.post("/shout-all", data={"text": ["a", "b"], "fail": "1"})
    assert failed.status_code == 500
    assert jobs_written(database_url) == 0  # rolled back with the block
    assert client.post("/shout-all", data={"text": ["a", "b"]}).status_code == 202
    assert jobs_written(database_url) == 2
    with plain.transaction():
        shout.enqueue("c")
        assert jobs_written(database_url) == 2  # not committed inside the block
    assert jobs_written(database_url) == 3
    assert sorted(j.result for j in run_jobs(plain_app)) == ["A", "B", "C"]


def test_outside_a_request_too_and_wait_sees_the_end(plain_app: Flask, database_url: str) -> None:
    handle = shout.enqueue("quiet")
    assert jobs_written(database_url) == 1
    assert not plain.runtime.in_transaction()  # nothing to commit first: wait() may wait
    run_jobs(plain_app)
    assert handle.wait(timeout=5).result == "QUIET"


def test_a_worker_runs_jobs_on_ratchets_own_engine(plain_app: Flask) -> None:
    handles = [shout.enqueue(f"w{i}") for i in range(5)]
    worker = Worker(plain_app, concurrency=2, burst=True)
    thread = threading.Thread(target=worker.run, name="test-worker")
    thread.start()
    thread.join(60)
    assert not thread.is_alive()
    assert [plain.get_job(h.id).result for h in handles] == [f"W{i}" for i in range(5)]  # type: ignore[union-attr]


def test_console_actions_commit_with_their_audit_row(plain_app: Flask, database_url: str) -> None:
    job_id = shout.enqueue("later").id
    console = Console(plain_app.test_client())
    done = console.post(f"/ratchet/jobs/{job_id}/cancel", htmx=True)
    assert done.status_code == 200, done.text
    assert plain.get_job(job_id).status == JobStatus.CANCELED  # type: ignore[union-attr]
    assert count("ratchet_audit", database_url) == 1
    assert console.get(f"/ratchet/jobs/{job_id}").status_code == 200


def test_an_app_with_flask_sqlalchemy_may_still_keep_jobs_apart(
    database_url: str, tmp_path: Path
) -> None:
    jobs_url = f"sqlite:///{tmp_path / 'jobs.db'}"
    app = create_app(database_url, RATCHET_DATABASE_URL=jobs_url)
    with app.test_request_context():
        handle = ratchet.enqueue_now(add, 1, 2)
        assert not db.session().in_transaction()  # the request's session was not joined
        assert jobs_written(jobs_url) == 1  # committed already, in the jobs' own database
        assert ratchet.get_job(handle.id) is not None
    app.extensions["ratchet"].engine.dispose()


def test_a_relative_sqlite_path_is_in_the_instance_folder(tmp_path: Path) -> None:
    app = Flask(__name__, instance_path=str(tmp_path / "instance"))
    app.config["RATCHET_DATABASE_URL"] = "sqlite:///jobs.db"
    Ratchet(app)
    engine = app.extensions["ratchet"].engine
    assert engine.url.database == str(tmp_path / "instance" / "jobs.db")
    engine.dispose()


def test_what_cannot_work_is_refused_at_init_app(tmp_path: Path) -> None:
    with pytest.raises(
        RuntimeError, match="or, for an app without a database of its own, set RATCHET_DATABASE_URL"
    ):
        Ratchet(Flask(__name__))
    for bad in ("not a url", 42, ""):
        app = Flask(__name__)
        app.config["RATCHET_DATABASE_URL"] = bad
        with pytest.raises(ConfigError, match="RATCHET_DATABASE_URL must be a database URL"):
            Ratchet(app)
    app = Flask(__name__)
    app.config["RATCHET_DATABASE_URL"] = "postgresql+psycopg2://app:secret@db/app"
    with pytest.raises(ConfigError, match=r"RATCHET_DATABASE_URL: .*psycopg 3") as refused:
        Ratchet(app)
    assert "secret" not in str(refused.value)
    app = Flask(__name__)
    app.config["SQLALCHEMY_DATABASE_URI"] = f"sqlite:///{tmp_path / 'app.db'}"
    app.config["RATCHET_DATABASE_URL"] = f"sqlite:///{tmp_path / 'jobs.db'}"
    other = SQLAlchemy(app)
    with pytest.raises(ConfigError, match="db= another: pass one of them"):
        Ratchet(app, db=other)
    with app.app_context():
        other.engine.dispose()
