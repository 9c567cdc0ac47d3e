"""Waiting for a job's end without a worker: refusals, timeouts, unknown ids, ended jobs."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask

from flask_ratchet import (
    InvalidOption,
    JobNotFound,
    JobStatus,
    WaitInTransaction,
    WaitTimeout,
)
from flask_ratchet.wakeups.channels import PgChannels, conninfo
from flask_ratchet.wakeups.end_watches import ChannelEndWatch
from flask_ratchet.wakeups.hub import IDLE_CLOSE, Hub
from flask_ratchet.worker.runner import Worker
from tests.apps import Order, add, create_app, db, ratchet
from tests.integration.helpers import count


def test_an_ended_job_is_returned_at_once(app: Flask) -> None:
    handle = add.enqueue(1, 2)
    assert ratchet.cancel_job(handle.id)
    ended = handle.wait(timeout=5)
    assert (ended.id, ended.status) == (handle.id, JobStatus.CANCELED)
    assert ratchet.wait(str(handle.id), timeout=5) == ended


def test_a_job_that_does_not_end_in_time_raises_and_goes_on(app: Flask) -> None:
    handle = add.enqueue(1, 2)
    with pytest.raises(WaitTimeout, match=rf"job {handle.id} \(tests.apps:add\) did not end "):
        handle.wait(timeout=0.3)
    job = ratchet.get_job(handle.id)
    assert job is not None and job.status == JobStatus.PENDING


def test_an_unknown_job_and_bad_timeouts_are_refused(app: Flask) -> None:
    with pytest.raises(JobNotFound):
        ratchet.wait(uuid.uuid4(), timeout=1)
    with pytest.raises(ValueError, match="is not a job id"):
        ratchet.wait("nope", timeout=1)
    handle = add.enqueue(1, 2)
    for bad in (-1, float("nan"), True, "10"):
        with pytest.raises(InvalidOption, match="timeout"):
            handle.wait(timeout=bad)  # type: ignore[arg-type]


def test_waiting_inside_a_transaction_is_refused_and_leaves_it_usable(app: Flask) -> None:
    with ratchet.transaction():
        handle = add.enqueue(1, 2)
        with pytest.raises(WaitInTransaction, match="commit"):
            handle.wait(timeout=1)
        add.enqueue(3, 4)  # the transaction goes on
    assert count("ratchet_job") == 2


def test_a_request_waits_only_after_it_commits(database_url: str) -> None:
    app = create_app(database_url)
    with app.app_context():
        app.extensions["ratchet"].ensure_schema()

    @app.post("/uncommitted")
    def uncommitted() -> str:
        db.session.add(Order(item="book"))
        handle = add.enqueue(1, 2)
        try:
            handle.wait(timeout=1)
        except WaitInTransaction as exc:
            db.session.commit()  # the request's transaction is still usable
            return str(exc)
        return "waited"

    @app.post("/committed")
    def committed() -> str:
        handle = add.enqueue(1, 2)
        ratchet.cancel_job(handle.id)
        db.session.commit()
        return handle.wait(timeout=5).status.value

    client = app.test_client()
    refused = client.post("/uncommitted")
    assert refused.status_code == 200 and "cannot wait for job" in refused.text
    assert client.post("/committed").text == "CANCELED"
    with app.app_context():
        assert count("ratchet_job") == 2
        assert db.session.query(Order).count() == 1


# SQLite waiters watch the file for commits instead: PostgreSQL only.
@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_a_cancel_from_the_api_tells_waiters_elsewhere(app: Flask) -> None:
    job_id = add.enqueue(1, 2).id  # no worker: it stays PENDING
    watch = ChannelEndWatch(PgChannels(ratchet.runtime.engine.url))
    try:
        assert ratchet.cancel_job(job_id)
        started = time.monotonic()
        watch.wait(20)
        # Without the NOTIFY after the cancel's commit, the watch would sleep the full 20 s.
        assert time.monotonic() - started < 10
    finally:
        watch.close()


def listening_connections(app: Flask) -> int:
    """The connections to the test database that LISTEN (for wake-ups or job ends)."""
    with app.app_context(), db.engine.connect() as conn:
        found = conn.execute(
            sa.text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND query LIKE 'LISTEN %'"
            )
        )
        return int(found.scalar_one())


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_waiters_in_one_process_share_one_listening_connection(app: Flask) -> None:
    jobs = [add.enqueue(i, i).id for i in range(8)]  # no worker: they stay PENDING
    ended: dict[uuid.UUID, str] = {}

    def wait_for(job_id: uuid.UUID) -> None:
        with app.app_context():
            ended[job_id] = ratchet.wait(job_id, timeout=60).status.value

    threads = [threading.Thread(target=wait_for, args=(job_id,)) for job_id in jobs]
    for thread in threads:
        thread.start()
    hub = Hub.of(PgChannels(ratchet.runtime.engine.url))
    deadline = time.monotonic() + 30
    while hub.waiters < len(jobs) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert hub.waiters == len(jobs) and hub.listening
    assert listening_connections(app) == 1  # not one per waiter
    for job_id in jobs:
        assert ratchet.cancel_job(job_id)
    for thread in threads:
        thread.join(30)
    assert ended == dict.fromkeys(jobs, "CANCELED")
    # With no waiter left, the connection closes after a while.
    deadline = time.monotonic() + IDLE_CLOSE + 10
    while listening_connections(app) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert listening_connections(app) == 0 and not hub.listening


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_a_worker_and_a_waiter_in_one_process_share_one_listening_connection(app: Flask) -> None:
    worker = Worker(app, concurrency=1)
    thread = threading.Thread(target=worker.run, name="test-worker")
    thread.start()
    try:
        hub = Hub.of(PgChannels(ratchet.runtime.engine.url))
        deadline = time.monotonic() + 30
        while not hub.listening and time.monotonic() < deadline:
            time.sleep(0.05)
        assert hub.listening  # the worker's wake-ups: the hub listens with no waiter
        handle = add.enqueue(2, 3)
        assert handle.wait(timeout=30).result == 5  # woken by the hub, waited on through it
        waiting = ChannelEndWatch(PgChannels(ratchet.runtime.engine.url))
        try:
            assert listening_connections(app) == 1  # not one for each
        finally:
            waiting.close()
    finally:
        worker.request_stop()
        thread.join(30)
    assert not thread.is_alive()


def test_a_listener_that_cannot_connect_is_tried_again_only_after_a_pause(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import psycopg

    tries: list[str] = []
    connect = psycopg.connect

    def counted(*args: Any, **kwargs: Any) -> Any:
        tries.append("connect")
        return connect(*args, **kwargs)

    monkeypatch.setattr(psycopg, "connect", counted)
    hub = Hub(PgChannels(sa.make_url("postgresql://root@127.0.0.1:9/nothing_listens_here")))
    assert hub.join(5) is None  # refused: the waiter reads without it
    # Waiters going on (each read followed by a wait) neither wake at once nor make the hub
    # try again and again: a failed try is no notice, and the next comes after RETRY_AFTER.
    started = time.monotonic()
    seen = 0
    for _ in range(10):
        seen = hub.wait_past(seen, 0.05)
    assert seen == 0 and time.monotonic() - started >= 0.5
    assert tries == ["connect"] and not hub.listening
    hub.leave()


# SQLite waiters watch the file for commits instead: PostgreSQL only.
@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_a_script_that_cancels_and_exits_at_once_still_tells_waiters(
    app: Flask, database_url: str
) -> None:
    import psycopg

    job_id = add.enqueue(1, 2).id
    script = (
        "import sys\n"
        "from tests.apps import create_app, ratchet\n"
        "with create_app(sys.argv[1]).app_context():\n"
        "    assert ratchet.cancel_job(sys.argv[2])\n"  # and the process ends at once
    )
    with psycopg.connect(conninfo(sa.make_url(database_url)), autocommit=True) as listener:
        listener.execute("LISTEN ratchet_ended")
        done = subprocess.run(
            [sys.executable, "-c", script, database_url, str(job_id)],
            cwd=Path(__file__).resolve().parents[2],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        heard = [n.channel for n in listener.notifies(timeout=10, stop_after=1)]
    assert heard == ["ratchet_ended"]  # sent before the process exited
