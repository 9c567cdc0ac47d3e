"""Named queues as users run them: ``flask ratchet worker --queues`` processes on disjoint queues,
per-queue thread limits, pausing a queue under running workers, prefetch, and two apps sharing
one database (with and without queues of their own)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask

from flask_ratchet import JobStatus
from tests import second_app
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
    wait_until(lambda: succeeded(ids), what="every job to succeed")

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
    wait_until(lambda: succeeded(slow + fast), what="every job to succeed")

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
    wait_until(lambda: succeeded(held), what="the paused jobs after resume")
    assert sorted(r.job_id for r in spans("mail")) == sorted(str(i) for i in running + held)


@pytest.mark.parametrize("prefetch", [["--prefetch", "0"], []], ids=["prefetch-0", "adaptive"])
def test_two_workers_share_long_jobs_from_the_start(
    app: Flask, workers: Workers, dialect: str, prefetch: list[str]
) -> None:
    config = config_for(dialect)
    procs = [workers.start("--concurrency", "10", *prefetch, **config) for _ in range(2)]
    wait_until(lambda: live_nodes() == 2, what="both workers to start")
    ids = enqueue("default", 20, 2.0)
    wait_until(lambda: succeeded(ids), what="every job to succeed")

    ran = spans()
    by_worker = {p.pid: [r for r in ran if r.pid == p.pid] for p in procs}
    # Neither worker held jobs it had no thread for: ten each, all started in the first round.
    assert sorted(len(v) for v in by_worker.values()) == [10, 10]
    first = min(r.started for r in ran)
    assert max(r.started for r in ran) - first < 1.5


# -- two apps on one database ----------------------------------------------------------------------


@pytest.fixture
def second(database_url: str) -> Iterator[Flask]:
    """The second app (``tests.second_app``), for submitting its jobs from this process."""
    other = second_app.create_app(database_url)
    yield other
    with other.app_context():
        second_app.db.engine.dispose()


def submit_second(other: Flask, task: Any, count: int) -> list[uuid.UUID]:
    with other.app_context():
        r = second_app.ratchet
        return [h.id for h in r.enqueue_many(r.enqueue(task, i) for i in range(count))]


SECOND = "tests.second_app:create_app()"


def test_two_apps_on_one_queue_hand_back_what_they_do_not_know(
    app: Flask, second: Flask, workers: Workers, dialect: str
) -> None:
    config = config_for(dialect)
    ours = workers.start("--concurrency", "2", **config)
    theirs_jobs = submit_second(second, second_app.only_here, 4)
    # Alone, our worker claims their jobs, cannot run them, and hands them back unspent.
    wait_until(lambda: "handed back" in workers.output(ours), what="our worker to hand back")
    assert all(status(i) != JobStatus.FAILED for i in theirs_jobs)
    theirs = workers.start("--concurrency", "2", app=SECOND, **config)
    our_jobs = enqueue("default", 4, 0.05)  # which their worker does not know either
    wait_until(lambda: succeeded(our_jobs + theirs_jobs), what="every job")

    for job_id in theirs_jobs:
        found = ratchet.get_job(job_id)
        assert found is not None and (found.result, found.attempts) == (theirs.pid, 1)
    assert {r.pid for r in spans()} == {ours.pid}
    assert all(ratchet.get_job(i).attempts == 1 for i in our_jobs)  # type: ignore[union-attr]


def test_two_apps_on_their_own_queues_never_touch_each_others_jobs(
    app: Flask, second: Flask, workers: Workers, dialect: str
) -> None:
    config = config_for(dialect)
    ours = workers.start("--queues", "default", **config)
    theirs = workers.start("--queues", "second", app=SECOND, **config)
    theirs_jobs = submit_second(second, second_app.only_here_queued, 4)
    our_jobs = enqueue("default", 4, 0.0)
    wait_until(lambda: succeeded(our_jobs + theirs_jobs), what="every job")
    assert {ratchet.get_job(i).result for i in theirs_jobs} == {theirs.pid}  # type: ignore[union-attr]
    assert "handed back" not in workers.output(ours) + workers.output(theirs)


def test_a_task_no_worker_knows_is_dead_lettered_after_the_grace_naming_who_refused_it(
    app: Flask, second: Flask, workers: Workers, dialect: str
) -> None:
    ours = workers.start(RATCHET_UNKNOWN_TASK_GRACE=1.5, **config_for(dialect))
    (job_id,) = submit_second(second, second_app.only_here, 1)
    wait_until(lambda: status(job_id) == JobStatus.FAILED, what="the dead letter")

    found = ratchet.get_job(job_id)
    assert found is not None and found.finished_at is not None
    assert found.attempts == 1  # the hand-backs spent nothing
    assert (found.finished_at - found.created_at).total_seconds() >= 1.5
    error = found.error or ""
    assert "UnknownTask: no worker ran task 'tests.second_app:only_here' within 1.5s" in error
    assert f":{ours.pid}: task 'tests.second_app:only_here' is not registered" in error
