"""Signals with ``flask ratchet worker`` processes: a WAITING job runs once its signal comes,
and a wait that outlasts its timeout is failed by the workers' maintenance."""

from __future__ import annotations

import uuid
from datetime import timedelta

from flask import Flask

from flask_ratchet import JobStatus
from tests.acceptance.conftest import Workers, wait_until
from tests.apps import approve, db, ratchet
from tests.integration.helpers import count


def status(job_id: uuid.UUID) -> JobStatus:
    found = ratchet.get_job(job_id)
    assert found is not None
    return found.status  # type: ignore[return-value]


def test_workers_run_a_signaled_job_and_time_out_a_forgotten_one(
    app: Flask, workers: Workers
) -> None:
    signaled = ratchet.enqueue(approve, "go").await_signal("go", timeout=timedelta(hours=1))
    forgotten = ratchet.enqueue(approve, "late").await_signal("late", timeout=1)
    ids = [signaled.submit().id, forgotten.submit().id]
    db.session.commit()
    workers.start()
    wait_until(lambda: status(ids[1]) == JobStatus.FAILED, what="the forgotten wait to fail")
    assert status(ids[0]) == JobStatus.WAITING and count("run") == 0
    assert ratchet.deliver_signal("go", {"by": "ops"}) == 1
    db.session.commit()
    wait_until(lambda: status(ids[0]) == JobStatus.SUCCEEDED, what="the signaled job to run")
    done, late = ratchet.get_job(ids[0]), ratchet.get_job(ids[1])
    assert done is not None and done.result == {"name": "go", "signal": {"by": "ops"}}
    assert late is not None and late.error == "signal 'late' not delivered within 1 s"
    assert count("run") == 1
