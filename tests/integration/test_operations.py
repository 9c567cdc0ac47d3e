"""cancel / pause / resume / retry / replace: legal paths, illegal paths, and races."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from flask import Flask

from flask_ratchet import Backoff, IllegalTransition, JobNotFound, JobStatus, Priority, events
from flask_ratchet.job import Job
from flask_ratchet.options import JobOptions
from flask_ratchet.states import C, F, P, R, S, Z
from tests.apps import add, charge, ratchet
from tests.integration.helpers import count, finish, job_in


def get(job_id: uuid.UUID) -> Job:
    job = ratchet.get_job(job_id)
    assert job is not None
    return job


@pytest.mark.parametrize(
    ("start", "op", "ok", "end"),
    [
        (P, "cancel", True, C),
        (Z, "cancel", True, C),
        (R, "cancel", True, C),
        (S, "cancel", False, S),
        (F, "cancel", False, F),
        (C, "cancel", False, C),
        (P, "pause", True, Z),
        (F, "pause", True, Z),
        (Z, "pause", True, Z),
        (R, "pause", False, R),
        (S, "pause", False, S),
        (C, "pause", False, C),
        (Z, "resume", True, P),
        (P, "resume", False, P),
        (R, "resume", False, R),
        (F, "resume", False, F),
        (F, "retry", True, P),
        (P, "retry", False, P),
        (R, "retry", False, R),
        (S, "retry", False, S),
        (C, "retry", False, C),
        (Z, "retry", False, Z),
    ],
)
def test_transitions(app: Flask, start: JobStatus, op: str, ok: bool, end: JobStatus) -> None:
    job_id = job_in(start)
    before = get(job_id)
    assert getattr(ratchet, f"{op}_job")(job_id) is ok
    after = get(job_id)
    assert after.status == end
    if not ok:
        assert after == before  # an illegal transition changes nothing at all


def test_pause_remembers_failed_and_resume_restores_it(app: Flask) -> None:
    job_id = job_in(F)
    assert ratchet.pause_job(job_id)
    paused = get(job_id)
    assert (paused.status, paused.paused_from, paused.error) == (Z, F, "boom")
    assert not ratchet.retry_job(job_id)  # resume first
    assert ratchet.claim_due(10, "n") == []  # a paused job is invisible to the poller
    assert ratchet.resume_job(job_id)
    resumed = get(job_id)
    assert (resumed.status, resumed.paused_from, resumed.error) == (F, None, "boom")
    assert count("ratchet_job_queue") == 0


def test_retry_resets_attempts_clears_the_error_and_is_due_now(app: Flask) -> None:
    job_id = job_in(F)
    assert get(job_id).attempts == 1
    assert ratchet.retry_job(job_id)
    job = get(job_id)
    assert (job.status, job.attempts, job.error, job.finished_at) == (P, 0, None, None)
    assert [c.job_id for c in ratchet.claim_due(10, "n")] == [job_id]


def test_retry_sends_its_event_after_the_commit(app: Flask) -> None:
    heard: list[tuple[uuid.UUID, JobStatus]] = []

    def receive(sender: Flask, job_id: uuid.UUID, **data: Any) -> None:
        heard.append((job_id, get(job_id).status))  # from another connection: committed

    failed, pending = job_in(F), job_in(P)
    with events.job_retried.connected_to(receive):
        assert ratchet.retry_job(failed)
        assert not ratchet.retry_job(pending)  # refused: nothing to announce
    assert heard == [(failed, P)]


def test_cancel_of_a_running_job_fences_out_its_worker(app: Flask) -> None:
    job_id = job_in(R)
    assert ratchet.cancel_job(job_id)
    assert not finish(job_id, S)  # the worker's late success changes nothing
    assert get(job_id).status == C


def test_completion_is_fenced_by_the_claiming_node(app: Flask) -> None:
    job_id = job_in(R)
    assert not finish(job_id, S, node="someone-else")
    assert get(job_id).status == R
    assert finish(job_id, S)
    assert not finish(job_id, S)
    assert get(job_id).status == S


@pytest.mark.parametrize("op", ["cancel", "pause", "resume", "retry"])
def test_unknown_ids_are_false_and_malformed_ids_are_errors(app: Flask, op: str) -> None:
    assert getattr(ratchet, f"{op}_job")(uuid.uuid4()) is False
    with pytest.raises(ValueError, match="not a job id"):
        getattr(ratchet, f"{op}_job")("not-a-uuid")
    assert ratchet.get_job(uuid.uuid4()) is None


def test_concurrent_cancels_exactly_one_wins(app: Flask) -> None:
    job_ids = [job_in(P) for _ in range(5)]
    wins: list[bool] = []
    lock = threading.Lock()

    def cancel(job_id: uuid.UUID, barrier: threading.Barrier) -> None:
        with app.app_context():
            barrier.wait()
            won = ratchet.cancel_job(job_id)
            with lock:
                wins.append(won)

    for job_id in job_ids:
        barrier = threading.Barrier(3)
        threads = [threading.Thread(target=cancel, args=(job_id, barrier)) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert wins.count(True) == 5 and wins.count(False) == 10


def test_replace_supersedes_the_old_job_in_one_transaction(app: Flask) -> None:
    old = (
        ratchet.enqueue(add, 1, 1)
        .with_queue("reports")
        .with_priority(Priority.HIGH)
        .with_max_retries(7)
        .with_backoff(Backoff.FIXED, 3)
        .with_timeout(40)
        .with_resource("api")
        .with_param("region", "eu")
        .with_business_key("debounce-1")
        .with_tags("t", "u")
        .submit()
    )
    new = ratchet.replace(old.id, timedelta(minutes=5), add, 2, 2)
    old_job, new_job = get(old.id), get(new.id)
    assert (old_job.status, old_job.superseded_by) == (C, new.id)
    assert (new_job.status, new_job.args, new_job.business_key) == (P, [2, 2], "debounce-1")
    # Every option, the queue included, as the replaced job had it.
    assert (
        new_job.options
        == old_job.options
        == JobOptions(
            queue="reports",
            priority=Priority.HIGH,
            max_retries=7,
            backoff=Backoff.FIXED,
            backoff_base=3.0,
            timeout=40.0,
            resource="api",
            tags=("t", "u"),
            params={"region": "eu"},
        )
    )
    assert new_job.scheduled_at > old_job.scheduled_at + timedelta(minutes=4)


def test_replace_of_an_ended_job_writes_nothing(app: Flask) -> None:
    done = job_in(S)
    before = count("ratchet_job")
    with pytest.raises(IllegalTransition, match="SUCCEEDED"):
        ratchet.replace(done, 0, add, 2, 2)
    assert count("ratchet_job") == before
    with pytest.raises(JobNotFound):
        ratchet.replace(uuid.uuid4(), 0, add, 2, 2)


def test_find_jobs_filters(app: Flask) -> None:
    failed = job_in(F)
    paused_failed = job_in(F)
    ratchet.pause_job(paused_failed)
    pending = job_in(P, business_key="bk")
    billing = ratchet.enqueue_now(charge, 1).id

    def ids(**filters: object) -> set[uuid.UUID]:
        return {j.id for j in ratchet.find_jobs(**filters).items}  # type: ignore[arg-type]

    assert ids(status="FAILED") == {failed}  # a paused FAILED job is PAUSED, not FAILED
    assert ids(status=[P, Z]) == {pending, billing, paused_failed}
    assert ids(tag="billing") == {billing}
    assert ids(task=charge) == ids(task="billing.charge") == {billing}
    assert ids(business_key="bk") == {pending}
    assert ids(status="PENDING", tag="billing") == {billing}
    long_ago = datetime(2000, 1, 1, tzinfo=UTC)
    assert ids(status="FAILED", ended_after=long_ago) == {failed}
    assert ids(ended_before=long_ago) == set()
    assert ids(tag=None) == ids()  # None is any
    with pytest.raises(ValueError, match="unknown filter state: the filters are status"):
        ratchet.find_jobs(state="FAILED")  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="status must be one of"):
        ratchet.find_jobs(status="DONE")
    with pytest.raises(ValueError, match="limit"):
        ratchet.find_jobs(limit=0)
    with pytest.raises(ValueError, match="cursor"):
        ratchet.find_jobs(cursor="nope")


def test_cursor_paging_is_stable_under_inserts(app: Flask) -> None:
    original = [ratchet.enqueue_now(add, i, i).id for i in range(12)]
    first = ratchet.find_jobs(limit=5)
    assert [j.id for j in first.items] == original[::-1][:5]
    newer = [ratchet.enqueue_now(add, 99, i).id for i in range(3)]  # arrive between pages
    seen = [j.id for j in first.items]
    cursor = first.next_cursor
    while cursor:
        page = ratchet.find_jobs(limit=5, cursor=cursor)
        seen += [j.id for j in page.items]
        cursor = page.next_cursor
    assert seen == original[::-1]
    assert not set(newer) & set(seen)


def test_queue_health_counts_every_status(app: Flask) -> None:
    for status in (S, F, R, P, P, Z, C):  # running and ended first: job_in claims all due jobs
        job_in(status)
    ratchet.enqueue(add, 1, 1).await_signal("k", timeout=60).submit()  # WAITING: never due
    health = ratchet.queue_health()
    assert health["counts"] == {
        "PENDING": 2,
        "RUNNING": 1,
        "SUCCEEDED": 1,
        "FAILED": 1,
        "PAUSED": 1,
        "CANCELED": 1,
        "WAITING": 1,
    }
    assert health["due"] == 2
    assert health["oldest_pending_age"] is not None and health["oldest_pending_age"] >= 0


def test_delete_job_takes_ended_jobs_only(app: Flask) -> None:
    failed = job_in(JobStatus.FAILED)
    pending = ratchet.enqueue_now(add, 1, 2).id
    assert ratchet.delete_job(str(failed))
    assert ratchet.get_job(failed) is None
    assert not ratchet.delete_job(failed)  # gone already
    assert not ratchet.delete_job(pending)  # live: refused, nothing changed
    assert get(pending).status == JobStatus.PENDING


def test_find_jobs_refuses_a_cursor_of_another_list(app: Flask) -> None:
    for i in range(3):
        ratchet.enqueue_now(add, i, i)
    page = ratchet.find_jobs(limit=2)
    assert page.next_cursor is not None and not page.partial
    with pytest.raises(ValueError, match="does not belong to this list"):
        ratchet.find_jobs(cursor="n" + page.next_cursor[1:])  # the console's job list's kind
    assert len(ratchet.find_jobs(limit=2, cursor=page.next_cursor).items) == 1
