"""What an app moved from Celery relies on, run by a real ``flask ratchet worker`` process: a
task under the app's own decorator found by its registered name, retry rules and an asked-for
retry read from the worker's own registry, and a job past its deadline canceled, not run."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from flask import Flask

from flask_ratchet import JobStatus
from tests.acceptance.conftest import PATIENT, Workers
from tests.apps import ratchet, record_run
from tests.celery_tasks import asks_again, fails_with, tenfold_add


def test_a_worker_runs_decorated_tasks_keeps_retry_rules_and_expires_late_jobs(
    app: Flask, workers: Workers, dialect: str
) -> None:
    decorated = ratchet.enqueue_now("tests.tenfold_add", 2, 3)
    typed = tenfold_add.delay(1, 1)
    not_listed = fails_with.enqueue("value")  # retry_on=(ConnectionError,): fails for good
    asked = asks_again.enqueue(1)  # asks to run again in an hour
    late = record_run.builder(7).with_expires(datetime.now(UTC) - timedelta(seconds=1)).submit()
    proc = workers.start("--burst", **(PATIENT if dialect == "sqlite" else {}))
    assert proc.wait(timeout=120) == 0, workers.output(proc)
    jobs = {h.id: ratchet.get_job(h.id) for h in (decorated, typed, not_listed, asked, late)}
    assert all(j is not None for j in jobs.values())
    ended = {i: (j.status, j.result, j.error, j.attempts) for i, j in jobs.items() if j}
    assert ended[decorated.id] == (JobStatus.SUCCEEDED, 50, None, 1)
    assert ended[typed.id] == (JobStatus.SUCCEEDED, 20, None, 1)
    assert ended[not_listed.id] == (JobStatus.FAILED, None, "ValueError: value", 1)
    assert ended[asked.id] == (JobStatus.PENDING, None, "Retry: rate limited", 1)
    assert ended[late.id] == (JobStatus.CANCELED, None, "expired", 0)
    later = jobs[asked.id]
    assert later is not None and later.scheduled_at > datetime.now(UTC) + timedelta(minutes=50)
    assert "canceled: expired, not started by its deadline" in workers.output(proc)
