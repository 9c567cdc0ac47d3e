"""Bulk operations in the library: ``cancel_jobs``, ``retry_jobs`` and ``delete_jobs`` over a
filter, a chunk at a time, with one audit row and one aggregate event."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask

from flask_ratchet import JobStatus, events
from flask_ratchet.schema import audit
from flask_ratchet.store import bulk
from tests.apps import add, create_app, db, ratchet
from tests.flow_tasks import batch_item
from tests.integration.helpers import count, finish, heard, job_in


def audit_rows() -> list[Any]:
    with db.engine.connect() as conn:
        return list(conn.execute(sa.select(audit)).all())


def status(job_id: uuid.UUID) -> JobStatus:
    found = ratchet.get_job(job_id)
    assert found is not None
    return JobStatus(found.status)


def test_cancel_jobs_cancels_the_live_jobs_a_filter_matches(app: Flask) -> None:
    running = ratchet.enqueue(add, 0, 0).with_tags("t-1").submit().id
    assert [c.job_id for c in ratchet.claim_due(10, "node-a")] == [running]
    pending = ratchet.enqueue(add, 1, 1).with_tags("t-1").submit().id
    paused = ratchet.enqueue(add, 2, 2).with_tags("t-1").submit().id
    assert ratchet.pause_job(paused)
    other = ratchet.enqueue(add, 3, 3).with_tags("t-2").submit().id
    with heard(events.jobs_bulk_canceled) as got, heard(events.job_canceled) as each:
        assert ratchet.cancel_jobs(tag="t-1", actor="ops@example.com") == 3
    assert [status(i) for i in (running, pending, paused, other)] == [
        JobStatus.CANCELED,
        JobStatus.CANCELED,
        JobStatus.CANCELED,
        JobStatus.PENDING,
    ]
    assert got == [{"count": 3, "filter": {"tag": "t-1"}}]
    assert each == []  # one aggregate event, not one per job
    (row,) = audit_rows()
    assert (row.actor, row.role, row.action, row.scope) == (
        "ops@example.com",
        "app",
        "cancel",
        "filter",
    )
    assert (row.requested, row.changed, json.loads(row.target)) == (
        3,
        3,
        {"filter": {"tag": "t-1"}},
    )
    assert not finish(running, JobStatus.SUCCEEDED)  # the running attempt's outcome is fenced out
    assert ratchet.cancel_jobs(tag="t-1") == 0  # nothing live matches any more


def test_a_status_filter_narrows_and_ended_jobs_are_never_canceled(app: Flask) -> None:
    done = job_in(JobStatus.SUCCEEDED)
    pending = job_in(JobStatus.PENDING)
    paused = job_in(JobStatus.PAUSED)
    assert ratchet.cancel_jobs(task=add, status="SUCCEEDED") == 0
    assert ratchet.cancel_jobs(task="tests.apps:add", status=["PAUSED"]) == 1
    assert (status(done), status(pending), status(paused)) == (
        JobStatus.SUCCEEDED,
        JobStatus.PENDING,
        JobStatus.CANCELED,
    )


def test_cancel_jobs_works_a_chunk_at_a_time(app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bulk, "BULK_CHUNK", 7)
    monkeypatch.setattr(bulk, "READ_AHEAD", 2)  # reads of 14 ids: three reads, five chunks
    ids = [
        h.id
        for h in ratchet.enqueue_many(
            ratchet.enqueue(add, i, i).with_tags("many") for i in range(30)
        )
    ]
    assert ratchet.cancel_jobs(tag="many") == 30
    assert {status(i) for i in ids} == {JobStatus.CANCELED}
    assert count("ratchet_job_queue") == 0 and count("ratchet_business_key") == 0


def test_a_canceled_batch_child_counts_in_its_batch(app: Flask) -> None:
    builder = ratchet.enqueue_batch("nightly")
    for i in range(3):
        builder.add(batch_item, i)
    parent = builder.submit().id
    assert ratchet.cancel_jobs(batch=parent) == 3
    progress = ratchet.batch_progress(parent)
    # A canceled child counts as failed: the batch has settled.
    assert progress is not None and (progress.failed, progress.finished) == (3, True)


def test_retry_jobs_retries_failed_jobs_and_leaves_a_taken_key_alone(app: Flask) -> None:
    failed = job_in(JobStatus.FAILED)
    keyed = job_in(JobStatus.FAILED, business_key="order-7")
    done = job_in(JobStatus.SUCCEEDED)
    ratchet.enqueue(add, 9, 9).with_business_key("order-7").submit()  # holds the key now
    with heard(events.jobs_bulk_retried) as got:
        assert ratchet.retry_jobs(status="FAILED", task=add) == 1
    again = ratchet.get_job(failed)
    assert again is not None and (again.status, again.attempts) == (JobStatus.PENDING, 0)
    assert (status(keyed), status(done)) == (JobStatus.FAILED, JobStatus.SUCCEEDED)
    assert got == [{"count": 1, "filter": {"status": ["FAILED"], "task": "tests.apps:add"}}]


def test_a_retried_batch_child_no_longer_counts_as_failed(app: Flask) -> None:
    builder = ratchet.enqueue_batch("nightly")
    for i in range(2):
        builder.add(batch_item, i)
    parent = builder.submit().id
    children = [c.job_id for c in ratchet.claim_due(10, "node-a")]
    assert finish(children[0], JobStatus.FAILED)
    before = ratchet.batch_progress(parent)
    assert before is not None and before.failed == 1
    assert ratchet.retry_jobs(batch=parent) == 1
    after = ratchet.batch_progress(parent)
    assert after is not None and after.failed == 0


def test_delete_jobs_deletes_ended_jobs_with_their_rows(app: Flask) -> None:
    ended = [job_in(JobStatus.FAILED), job_in(JobStatus.SUCCEEDED)]
    canceled = job_in(JobStatus.CANCELED)
    live = job_in(JobStatus.PENDING)
    with heard(events.jobs_bulk_deleted) as got:
        assert ratchet.delete_jobs(task=add, status=["FAILED", "SUCCEEDED", "PENDING"]) == 2
    assert [ratchet.get_job(i) for i in ended] == [None, None]
    assert status(canceled) == JobStatus.CANCELED and status(live) == JobStatus.PENDING
    assert count("ratchet_execution") == 0 and count("ratchet_dlq_alert") == 0
    assert got[0]["count"] == 2


def test_bad_filters_are_refused_before_anything_is_written(app: Flask) -> None:
    job_in(JobStatus.PENDING)
    with pytest.raises(ValueError, match="at least one filter"):
        ratchet.cancel_jobs()
    with pytest.raises(ValueError, match="status must be one of"):
        ratchet.cancel_jobs(status="LOST")
    with pytest.raises(ValueError, match="created_after must be a datetime"):
        ratchet.cancel_jobs(created_after="yesterday")  # type: ignore[typeddict-item]
    with pytest.raises(ValueError):
        ratchet.cancel_jobs(batch="not-an-id")
    assert count("ratchet_job_queue") == 1 and audit_rows() == []


def test_a_bulk_cancel_in_a_rolled_back_request_changes_nothing(database_url: str) -> None:
    app = create_app(database_url)

    @app.post("/stop-all")
    def stop_all() -> str:
        assert ratchet.cancel_jobs(tag="t") == 2
        raise RuntimeError("the request fails after the cancel")

    with app.app_context():
        app.extensions["ratchet"].ensure_schema()
        ids = [ratchet.enqueue(add, i, i).with_tags("t").submit().id for i in range(2)]
    app.config["PROPAGATE_EXCEPTIONS"] = False
    with heard(events.jobs_bulk_canceled) as got:
        assert app.test_client().post("/stop-all").status_code == 500
    with app.app_context():
        assert {status(i) for i in ids} == {JobStatus.PENDING}
        assert audit_rows() == [] and got == []


def test_the_cli_cancels_by_filter_and_dry_runs(app: Flask) -> None:
    ids = [ratchet.enqueue(add, i, i).with_tags("cli").submit().id for i in range(3)]
    runner = app.test_cli_runner()
    dry = runner.invoke(args=["ratchet", "jobs", "cancel", "--tag", "cli", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "3 jobs would be canceled" in dry.output
    assert {status(i) for i in ids} == {JobStatus.PENDING}
    done = runner.invoke(args=["ratchet", "jobs", "cancel", "--tag", "cli"])
    assert done.exit_code == 0 and "3 jobs canceled" in done.output, done.output
    assert {status(i) for i in ids} == {JobStatus.CANCELED}
    (row,) = audit_rows()
    assert row.role == "cli"
    one = runner.invoke(args=["ratchet", "jobs", "retry", str(ids[0])])
    assert one.exit_code == 1 and "was not retried" in one.output  # one job by id, as before
    bare = runner.invoke(args=["ratchet", "jobs", "delete"])
    assert bare.exit_code == 2 and "a job id or at least one filter" in bare.output
