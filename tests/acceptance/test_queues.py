"""Named queues as users run them: ``flask ratchet worker --queues`` processes on disjoint queues,
per-queue thread limits, pausing a queue under running workers, and prefetch."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask

from flask_ratchet import JobStatus
from tests.acceptance.conftest import PATIENT, Workers, most_at_once, wait_until
from tests.apps import db, ratchet, timed


def spans(queue: str | None = None) -> list[Any]:
    """What each run of ``timed`` recorded (``job_id, queue, pid, started, ended``)."""
    sql = "SELECT job_id, queue, pid, started, ended FROM span"
    with db.engine.connect() as conn:
        rows = conn.execute(sa.text(sql)).all()
    return [r for r in rows if queue is None or r.queue == queue]


def enqueue(queue: str, count: int, seconds: float) -> list[uuid.UUID]:
    return [
        h.id
        for h in ratchet.enqueue_many(
            ratchet.enqueue(timed, seconds).with_queue(queue) for _ in range(count)
        )
    ]


def status(job_id: uuid.UUID) -> JobStatus:
    found = ratchet.get_job(job_id)
    assert found is not None and isinstance(found.status, JobStatus)
    return found.status


def succeeded(ids: list[uuid.UUID]) -> bool:
    return all(status(i) == JobStatus.SUCCEEDED for i in ids)


def live_nodes() -> int:
    with db.engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT count(*) FROM ratchet_node")).scalar_one())


def config_for(dialect: str) -> dict[str, Any]:
    return PATIENT if dialect == "sqlite" else {}


def test_workers_on_disjoint_queues_never_run_each_others_jobs(
    app: Flask, workers: Workers, dialect: str
) -> None:
    config = config_for(dialect)
    alpha = workers.start("--queues", "alpha", "--concurrency", "2", **config)
    beta = workers.start("--queues", "beta,gamma=1", "--concurrency", "3", **config)
    ids = enqueue("alpha", 6, 0.05) + enqueue("beta", 6, 0.05) + enqueue("gamma", 3, 0.1)
    wait_until(lambda: succeeded(ids), timeout=60, what="every job to succeed")

    ran = spans()
    assert sorted(r.job_id for r in ran) == sorted(str(i) for i in ids)  # each ran once
    assert {r.pid for r in ran if r.queue == "alpha"} == {alpha.pid}
    assert {r.pid for r in ran if r.queue in ("beta", "gamma")} == {beta.pid}
    assert most_at_once([(r.started, r.ended) for r in spans("gamma")]) == 1
    assert "queues beta,gamma=1" in workers.output(beta)


def test_a_queues_thread_limit_holds_and_its_jobs_never_take_every_thread(
    app: Flask, workers: Workers, dialect: str
) -> None:
    slow = enqueue("slow", 4, 0.4)
    fast = enqueue("fast", 12, 0.15)
    workers.start("--queues", "slow=1,fast", "--concurrency", "4", **config_for(dialect))
    wait_until(lambda: succeeded(slow + fast), timeout=60, what="every job to succeed")

    # The probe: never two slow jobs at once, while fast jobs used the other threads at once.
    assert most_at_once([(r.started, r.ended) for r in spans("slow")]) == 1
    assert most_at_once([(r.started, r.ended) for r in spans("fast")]) >= 2
    assert most_at_once([(r.started, r.ended) for r in spans()]) <= 4


def test_a_paused_queue_waits_under_running_workers_and_resumes_with_nothing_lost(
    app: Flask, workers: Workers, dialect: str
) -> None:
    running = enqueue("mail", 1, 1.0)
    workers.start("--concurrency", "2", **config_for(dialect))  # every queue
    wait_until(lambda: status(running[0]) == JobStatus.RUNNING, what="the first job to start")
    assert ratchet.pause_queue("mail")
    held = enqueue("mail", 3, 0.0)
    other = enqueue("default", 2, 0.0)
    wait_until(lambda: succeeded(other + running), what="the other queue and the running job")
    wait_until(lambda: len(spans("default")) == 2, what="the other queue's spans")
    # Several polls (0.2 s apart) and a wake-up per submission later, still untouched.
    before = {i: ratchet.get_job(i) for i in held}
    assert all(
        j is not None and (j.status, j.attempts) == (JobStatus.PENDING, 0) for j in before.values()
    )
    assert len(spans("mail")) == 1

    assert ratchet.resume_queue("mail")
    wait_until(lambda: succeeded(held), timeout=10, what="the paused jobs after resume")
    assert sorted(r.job_id for r in spans("mail")) == sorted(str(i) for i in running + held)


@pytest.mark.parametrize("prefetch", [["--prefetch", "0"], []], ids=["prefetch-0", "adaptive"])
def test_two_workers_share_long_jobs_from_the_start(
    app: Flask, workers: Workers, dialect: str, prefetch: list[str]
) -> None:
    config = config_for(dialect)
    procs = [workers.start("--concurrency", "10", *prefetch, **config) for _ in range(2)]
    wait_until(lambda: live_nodes() == 2, what="both workers to start")
    ids = enqueue("default", 20, 2.0)
    wait_until(lambda: succeeded(ids), timeout=60, what="every job to succeed")

    ran = spans()
    by_worker = {p.pid: [r for r in ran if r.pid == p.pid] for p in procs}
    # Neither worker held jobs it had no thread for: ten each, all started in the first round.
    assert sorted(len(v) for v in by_worker.values()) == [10, 10]
    first = min(r.started for r in ran)
    assert max(r.started for r in ran) - first < 1.5
