"""``async def`` tasks in real ``flask ratchet worker`` processes, beside sync ones."""

from __future__ import annotations

import uuid
from pathlib import Path

import sqlalchemy as sa
from flask import Flask

from flask_ratchet import JobStatus
from flask_ratchet.job import Job, Progress
from flask_ratchet.schema import execution, job_log
from tests.acceptance.conftest import Workers, wait_until
from tests.apps import add, db, ratchet
from tests.async_tasks import async_add, async_fail_until, async_sleep


def job(job_id: uuid.UUID) -> Job:
    found = ratchet.get_job(job_id)
    assert found is not None
    return found


def test_async_and_sync_tasks_share_a_worker(app: Flask, workers: Workers) -> None:
    handles = [async_add.enqueue(i, 1) for i in range(20)]
    sync = [add.enqueue(i, 1) for i in range(20)]
    workers.start("--concurrency", "4")
    for i, handle in enumerate(handles):
        done = handle.wait(timeout=60)
        assert done.status == JobStatus.SUCCEEDED, done.error
        assert done.result == {
            "sum": i + 1,
            "app": "tests.apps",
            "setting": 0.5,  # the worker's app config, through current_app
            "job_id": str(handle.id),  # JobContext.current() inside the coroutine
            "attempt": 1,
        }
        assert done.progress == Progress(1, 1, "added")
    assert [h.wait(timeout=60).result for h in sync] == [i + 1 for i in range(20)]
    with db.engine.connect() as conn:
        messages = conn.execute(
            sa.select(job_log.c.message).where(job_log.c.job_id == handles[0].id)
        ).scalars()
        assert list(messages) == ["adding 0 and 1"]  # the job's logger, from the coroutine


def test_async_tasks_retry_like_sync_ones(app: Flask, workers: Workers) -> None:
    third = async_fail_until.enqueue(3)
    never = async_fail_until.enqueue(9)
    workers.start()
    assert third.wait(timeout=60).result == 3
    failed = never.wait(timeout=60)
    assert failed.status == JobStatus.FAILED
    assert failed.error == "ConnectionError: async attempt 3 failed"
    with db.engine.connect() as conn:
        runs = conn.execute(
            sa.select(sa.func.count()).select_from(execution).where(execution.c.job_id == never.id)
        ).scalar_one()
    assert runs == 3


def test_a_timeout_cancels_the_coroutine(app: Flask, workers: Workers, tmp_path: Path) -> None:
    marker = tmp_path / "timed-out"
    handle = async_sleep.builder(30, str(marker)).with_timeout(1).submit()
    proc = workers.start()
    ended = handle.wait(timeout=60)
    assert ended.status == JobStatus.FAILED
    assert (ended.error or "").startswith("JobTimeout: ran longer than its timeout of 1s")
    wait_until(lambda: marker.read_text() == "cancelled", what="CancelledError in the task")
    # The loop survives: the same worker runs the next async job.
    assert async_add.enqueue(1, 1).wait(timeout=60).status == JobStatus.SUCCEEDED
    assert proc.poll() is None


def test_cancel_job_cancels_the_coroutine(app: Flask, workers: Workers, tmp_path: Path) -> None:
    marker = tmp_path / "canceled"
    handle = async_sleep.enqueue(30, str(marker))
    proc = workers.start()
    wait_until(lambda: marker.exists(), what="the job to start")
    assert ratchet.cancel_job(handle.id)
    wait_until(lambda: marker.read_text() == "cancelled", what="CancelledError in the task")
    wait_until(
        lambda: "its coroutine was cancelled" in workers.output(proc), what="the worker to see it"
    )
    assert job(handle.id).status == JobStatus.CANCELED and job(handle.id).result is None
    assert async_add.enqueue(2, 2).wait(timeout=60).result["sum"] == 4  # type: ignore[index]
