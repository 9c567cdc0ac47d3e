"""The claim: effective-priority order, due times, and disjoint sets under concurrency."""

from __future__ import annotations

import multiprocessing
import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from flask import Flask

from flask_ratchet import JobStatus, Priority
from tests.apps import add, create_app, db, ratchet
from tests.integration.helpers import job_in


def submit(priority: Priority, minutes_ago: float = 0) -> uuid.UUID:
    when = datetime.now(UTC) - timedelta(minutes=minutes_ago)
    return ratchet.schedule_at(when, add, 1, 1).with_priority(priority).submit().id


def test_claim_orders_by_priority_then_due_time(app: Flask) -> None:
    low = submit(Priority.LOW, 3)
    critical = submit(Priority.CRITICAL, 1)
    normal_old = submit(Priority.NORMAL, 2)
    normal_new = submit(Priority.NORMAL, 1)
    high = submit(Priority.HIGH, 1)
    order = [c.job_id for c in ratchet.claim_due(2, "n")]
    order += [c.job_id for c in ratchet.claim_due(10, "n")]
    assert order == [critical, high, normal_old, normal_new, low]


def test_age_boost_lets_old_low_priority_work_go_first(app: Flask) -> None:
    old_lowest = submit(Priority.LOWEST, 61)  # 0 + floor(61 / 15) = 4 > HIGH's 3
    fresh_high = submit(Priority.HIGH)
    assert [c.job_id for c in ratchet.claim_due(1, "n")] == [old_lowest]
    assert [c.job_id for c in ratchet.claim_due(1, "n")] == [fresh_high]


def test_boost_zero_is_raw_priority(database_url: str) -> None:
    app = create_app(database_url, RATCHET_PRIORITY_BOOST_MINUTES=0)
    with app.app_context():
        old_lowest = submit(Priority.LOWEST, 600)
        fresh_high = submit(Priority.HIGH)
        claimed = [c.job_id for c in ratchet.claim_due(2, "n")]
        assert claimed == [fresh_high, old_lowest]
        db.engine.dispose()


def test_claim_marks_running_and_returns_what_a_worker_needs(app: Flask) -> None:
    handle = ratchet.enqueue(add, 4, b=5).with_param("p", 1).submit()
    future = ratchet.schedule(timedelta(hours=1), add, 1, 1).submit()
    (claimed,) = ratchet.claim_due(10, "node-7")
    assert (claimed.job_id, claimed.task, claimed.attempt) == (handle.id, "tests.apps:add", 1)
    assert claimed.payload == '{"args":[4],"kwargs":{"b":5}}' and claimed.params == '{"p":1}'
    job = ratchet.get_job(handle.id)
    assert job is not None
    assert (job.status, job.picked_by, job.attempts) == (JobStatus.RUNNING, "node-7", 1)
    assert job.picked_at is not None
    assert ratchet.claim_due(10, "node-7") == []  # running and future jobs are not due
    assert ratchet.get_job(future.id).status == JobStatus.PENDING  # type: ignore[union-attr]


def test_terminal_and_paused_jobs_are_never_claimed(app: Flask) -> None:
    for status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELED, JobStatus.PAUSED):
        job_in(status)
    assert ratchet.claim_due(100, "n") == []


def test_concurrent_thread_claimers_get_disjoint_sets(app: Flask) -> None:
    ratchet.enqueue_many(ratchet.enqueue(add, i, i) for i in range(400))
    claimed: dict[str, list[uuid.UUID]] = {f"t{i}": [] for i in range(4)}
    rounds = 400 // (4 * 7) + 2  # enough rounds of 4 claims of 7 to take every job
    barrier = threading.Barrier(4)

    def claimer(node: str) -> None:
        # Every round, all four claim at the same moment: each claim really races the others.
        with app.app_context():
            for _ in range(rounds):
                barrier.wait()
                claimed[node] += [c.job_id for c in ratchet.claim_due(7, node)]

    threads = [threading.Thread(target=claimer, args=(node,)) for node in claimed]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [job_id for ids in claimed.values() for job_id in ids]
    assert len(every) == len(set(every)) == 400
    assert all(ids for ids in claimed.values())  # every claimer won some races


def claim_in_process(url: str, node: str, start: Any, out: Any) -> None:
    """Run in a child process: claim until nothing is due, report the ids."""
    app = create_app(url)
    mine: list[str] = []
    with app.app_context():
        start.wait()
        while batch := ratchet.claim_due(5, node):
            mine += [str(c.job_id) for c in batch]
        db.engine.dispose()
    out.put(mine)


def test_concurrent_process_claimers_get_disjoint_sets(app: Flask, database_url: str) -> None:
    """Four claimers at once: disjoint sets, and no deadlock (a claim the database gave up
    would end its process with an error)."""
    ratchet.enqueue_many(ratchet.enqueue(add, i, i) for i in range(300))
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=claim_in_process, args=(database_url, f"p{i}", start, out))
        for i in range(4)
    ]
    for p in procs:
        p.start()
    start.set()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    every = [job_id for ids in results for job_id in ids]
    assert len(every) == len(set(every)) == 300
