"""PostgreSQL behind PgBouncer in transaction pooling mode (Debian's ``pgbouncer``, started here
on a loopback port in front of the test database): web enqueues in a request, real worker
processes, recurring jobs, ``wait()`` and the console all go through it, with wake-ups over a
direct ``RATCHET_LISTEN_URL`` or, without one, by polling."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from bench.pgbouncer import PgBouncerError, running_pgbouncer, through
from flask_ratchet import JobStatus
from flask_ratchet.errors import ConfigError
from tests.acceptance.conftest import Workers, wait_until
from tests.apps import add, create_app, db, ratchet
from tests.conftest import truncate_all

#: What every app and worker here is told: the pooler's rules (its own engine included).
POOLED: dict[str, Any] = {
    "RATCHET_TRANSACTION_POOLING": True,
    "SQLALCHEMY_ENGINE_OPTIONS": {"connect_args": {"prepare_threshold": None}},
}


@pytest.fixture(scope="module")
def bouncer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A PgBouncer in transaction mode in front of the local PostgreSQL; its port."""
    server = os.environ.get("RATCHET_TEST_DATABASE_URL", "postgresql://root@127.0.0.1:5432/test")
    try:
        with running_pgbouncer(server, tmp_path_factory.mktemp("pgbouncer")) as port:
            yield port
    except PgBouncerError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture
def direct(pg_url: str) -> str:
    truncate_all(pg_url)
    return pg_url


@pytest.fixture
def pooled_app(direct: str, bouncer: int) -> Iterator[Flask]:
    app = create_app(through(direct, bouncer), RATCHET_LISTEN_URL=direct, **POOLED)

    @app.post("/orders/<int:n>")
    def order(n: int) -> dict[str, str]:
        return {"job": str(add.enqueue(n, n).id)}  # joins the request's session

    @app.teardown_request
    def commit(_exc: BaseException | None) -> None:
        db.session.commit()

    with app.app_context():
        yield app
        db.session.remove()
        db.engine.dispose()


def test_requests_workers_and_waits_go_through_the_pooler(
    pooled_app: Flask, direct: str, bouncer: int, tmp_path: Path
) -> None:
    workers = Workers(through(direct, bouncer), tmp_path)
    try:
        for _ in range(2):
            workers.start(RATCHET_LISTEN_URL=direct, **POOLED)
        client = pooled_app.test_client()
        # More than psycopg's five executions before it would prepare a statement.
        ids = [client.post(f"/orders/{n}").json["job"] for n in range(40)]  # type: ignore[index]
        done = [ratchet.wait(i, timeout=120) for i in ids]
        assert [(j.status, j.result) for j in done] == [
            (JobStatus.SUCCEEDED, 2 * n) for n in range(40)
        ], workers.output(workers.procs[0])
        page = client.get("/ratchet/jobs?status=SUCCEEDED", headers={"X-Role": "admin"})
        assert page.status_code == 200 and ids[0] in page.text
        master = ratchet.schedule_recurring("@every 1s", "UTC", add, 20, 22).submit()
        child = wait_until(
            lambda: (
                ratchet.find_jobs(status="SUCCEEDED", task=add, limit=50).items[0].recurring_id
                == master.id
            ),
            what="a recurring child to run",
        )
        assert child
        for proc in workers.procs:
            output = workers.output(proc)
            assert "prepared statement" not in output and "Traceback" not in output, output
    finally:
        workers.stop_all()


def test_without_a_listen_url_workers_poll(direct: str, bouncer: int, tmp_path: Path) -> None:
    app = create_app(through(direct, bouncer), **POOLED)
    workers = Workers(through(direct, bouncer), tmp_path)
    try:
        proc = workers.start(RATCHET_POLL_INTERVAL=0.5, RATCHET_POLL_MAX_INTERVAL=1, **POOLED)
        with app.app_context():
            add.enqueue(0, 0).wait(timeout=120)  # the worker is up
            started = time.monotonic()
            done = add.enqueue(2, 3).wait(timeout=120)
            took = time.monotonic() - started
            assert (done.status, done.result) == (JobStatus.SUCCEEDED, 5), workers.output(proc)
            assert took < 30, took  # found by a poll (liveness, not a latency figure)
            db.session.remove()
            db.engine.dispose()
    finally:
        workers.stop_all()


def test_an_app_engine_that_prepares_statements_is_a_clear_error(direct: str, bouncer: int) -> None:
    app = create_app(through(direct, bouncer), RATCHET_TRANSACTION_POOLING=True)
    with app.app_context():
        with pytest.raises(ConfigError, match="prepare_threshold"):
            add.enqueue(1, 2)
        db.session.remove()
        db.engine.dispose()
