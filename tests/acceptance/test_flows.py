"""Batches and chains run by real ``flask ratchet worker`` processes."""

from __future__ import annotations

import json
import signal

import sqlalchemy as sa
from flask import Flask

from flask_ratchet import JobStatus
from tests.acceptance.conftest import Workers, wait_until
from tests.apps import db, ratchet
from tests.flow_tasks import FlowNote, follow_up, slow_item, step

CONFIG = {
    "FLOW_NOTES": True,
    "RATCHET_ORPHAN_GRACE": 2,
    "RATCHET_MAINTENANCE_INTERVAL": 0.5,
}


def noted(kind: str) -> list[tuple[str, object]]:
    with db.engine.connect() as conn:
        rows = conn.execute(
            sa.select(FlowNote.job_id, FlowNote.value).where(FlowNote.kind == kind)
        ).all()
    return [(r.job_id, json.loads(r.value)) for r in rows]


def test_a_batch_across_three_workers_survives_a_killed_worker(
    app: Flask, workers: Workers
) -> None:
    builder = ratchet.enqueue_batch("thousand")
    for i in range(1, 1001):
        builder.add(slow_item, i, 100)  # 100, 200, … 1000 fail for good
    handle = (
        builder.on_success(follow_up, "all succeeded")
        .on_failure(follow_up, "some failed")
        .when_failure_count(10, follow_up, "ten failed")
        .when_success_rate(0.999, follow_up, "99.9%")
        .submit()
    )
    procs = [workers.start("--concurrency", "4", **CONFIG) for _ in range(3)]
    wait_until(lambda: len(noted("item")) >= 100, what="the workers to get going")
    procs[0].send_signal(signal.SIGKILL)  # mid-batch: its running children are orphaned
    procs[0].wait(10)
    wait_until(
        lambda: (ratchet.batch_progress(handle.id) or handle.progress()).finished,
        timeout=90,
        what="the batch to settle",
    )
    # The signal is noted by the settling worker's announcer, which may wait on the SQLite
    # file's write lock longer than the follow-up jobs take to run: wait for both.
    wait_until(
        lambda: len(noted("follow-up")) >= 2 and noted("signal:batch_completed"),
        what="the follow-ups to run and batch_completed to be heard",
    )
    progress = handle.progress()
    assert (progress.total, progress.succeeded, progress.failed) == (1000, 990, 10)
    assert len({job_id for job_id, _ in noted("item")}) == 990  # every child that succeeded
    parent = ratchet.get_job(handle.id)
    assert parent is not None and parent.status == JobStatus.FAILED
    assert parent.error == "10 of 1000 children failed"
    assert [b for b, _ in noted("signal:batch_completed")] == [str(handle.id)]  # settled once
    assert sorted(v for _, v in noted("follow-up")) == ["some failed", "ten failed"]
    for proc in procs[1:]:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0


def test_a_chain_runs_across_workers(app: Flask, workers: Workers) -> None:
    handle = ratchet.enqueue(step, "a").then(step, "b").then(step, "c").submit()
    for _ in range(2):
        workers.start("--concurrency", "2", **CONFIG)
    wait_until(
        lambda: all(
            (j := ratchet.get_job(i)) is not None and j.status == JobStatus.SUCCEEDED
            for i in handle.ids
        ),
        what="the chain to finish",
    )
    seen = {v["label"]: v["previous"] for _, v in noted("step")}  # type: ignore[index]
    assert seen == {"a": None, "b": "a-done", "c": "b-done"}
    # Heard after the commit, by the worker's announcer: it may come a moment later.
    wait_until(lambda: noted("signal:chain_completed"), what="chain_completed to be heard")
    assert [j for j, _ in noted("signal:chain_completed")] == [str(handle.last)]
