"""A worker goes on after an error that is not the database's (a row holding what ratchet never
writes): the claim loop logs it and polls again."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask
from sqlalchemy.exc import OperationalError

from flask_ratchet import JobStatus
from flask_ratchet.store.types import NodeInfo
from flask_ratchet.worker.runner import Worker
from tests.apps import add, db, ratchet
from tests.integration.helpers import count


def run_burst(app: Flask) -> None:
    """A burst worker in a thread: it runs until nothing is due."""
    worker = Worker(app, concurrency=1, burst=True)
    thread = threading.Thread(target=worker.run, name="test-worker")
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "the burst worker did not finish"


def test_a_claim_failing_on_what_it_read_is_logged_and_polling_goes_on(
    app: Flask, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    job_id = ratchet.enqueue_now(add, 1, 2).id
    store = ratchet.runtime.store
    claim = store.jobs.claim_due
    failures = [ValueError("badly formed hexadecimal UUID string")]

    def damaged_once(*args: Any, **kwargs: Any) -> Any:
        if failures:
            raise failures.pop()
        return claim(*args, **kwargs)

    monkeypatch.setattr(store.jobs, "claim_due", damaged_once)
    run_burst(app)
    found = ratchet.get_job(job_id)
    assert found is not None and found.status == JobStatus.SUCCEEDED
    logged = [r for r in caplog.records if "claim failed on what it read" in r.message]
    assert len(logged) == 1 and logged[0].exc_info is not None


# Servers only: a SQLite claim commits in this process's own file, with no connection to break
# between the commit and its answer (and a second writer would wait for the claim's lock).
@pytest.mark.parametrize("database_url", ["postgresql", "mariadb"], indirect=True)
def test_a_claim_that_committed_unseen_is_taken_back_and_its_jobs_run(
    app: Flask, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The connection breaks as a claim commits: the worker gets an error, the database has
    the jobs RUNNING under the worker's node id. They must not wait for the process to end."""
    job_ids = [ratchet.enqueue_now(add, i, i).id for i in range(3)]
    store = ratchet.runtime.store
    claim = store.jobs.claim_due
    engine = db.engine
    lost = [True]

    def committed_unseen(conn: Any, *args: Any, **kwargs: Any) -> Any:
        if lost:
            lost.pop()
            with store.begin(engine) as other:  # committed, and never handed to the worker
                assert claim(other, *args, **kwargs)
            raise OperationalError("COMMIT", {}, Exception("server closed the connection"))
        return claim(conn, *args, **kwargs)

    monkeypatch.setattr(store.jobs, "claim_due", committed_unseen)
    run_burst(app)
    for job_id in job_ids:
        found = ratchet.get_job(job_id)
        assert found is not None and found.status == JobStatus.SUCCEEDED, found
    taken = [r for r in caplog.records if "a claim this worker could not confirm" in r.message]
    assert len(taken) == 1


# Servers only: SQLite has no server to end a transaction (its lock ends with the process).
@pytest.mark.parametrize("database_url", ["postgresql", "mariadb"], indirect=True)
def test_a_stalled_workers_transaction_is_ended_and_its_locks_freed(app: Flask) -> None:
    """A worker stopped inside one of its transactions (SIGSTOP, a pause, a partition) holds
    row locks: the server ends that transaction once it has sat idle for the orphan grace, so
    the live workers' recovery is not held up behind it."""
    store = ratchet.runtime.store
    url = ratchet.runtime.engine.url
    stalled = store.dialect.worker_engine(url, 1, stalled_after=1)
    info = NodeInfo("stalled-node", "host", 1, "0", 1)
    with store.begin(db.engine) as conn:
        store.cluster.heartbeat(conn, info)
    frozen = stalled.connect()
    try:
        frozen.begin()
        store.cluster.heartbeat(frozen, info)  # the node row locked
        with store.begin(db.engine) as live:
            started = time.monotonic()
            # Waits for the frozen transaction's lock until the server ends it.
            assert store.cluster.delete_dead_nodes(live, silent_for=-1) == 1
            waited = time.monotonic() - started
        assert waited < 30, f"the live transaction waited {waited:.0f}s for the lock"
        with pytest.raises(sa.exc.DBAPIError):
            frozen.execute(sa.text("SELECT 1"))
            frozen.commit()
    finally:
        # The server ended the session: nothing to roll back (a rollback would raise).
        frozen.invalidate()
        frozen.close()
        stalled.dispose()
    assert count("ratchet_node") == 0
