"""``expires``: a job not started by its deadline ends CANCELED ("expired") instead of running
late. The deadline is ``ratchet_job.expires_at``, written at submission by every rendering,
carried by the claim, and checked by the worker (here the testing kit's in-process run, the
worker's own code) as the attempt starts, through the store's guarded cancel."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask

from flask_ratchet import InvalidOption, JobFailed, JobStatus, events
from flask_ratchet.schema import execution
from flask_ratchet.testing import run_jobs
from tests.apps import add, db, ratchet, record_run
from tests.celery_tasks import expiring
from tests.integration.helpers import stored_id

AN_HOUR_AGO = timedelta(hours=-1)


def runs_of(job_id: uuid.UUID) -> int:
    with db.engine.connect() as conn:
        return int(
            conn.execute(
                sa.select(sa.func.count()).where(execution.c.job_id == job_id)
            ).scalar_one()
        )


def test_a_job_past_its_deadline_is_canceled_as_expired_instead_of_run(app: Flask) -> None:
    deadline = datetime.now(UTC) - timedelta(minutes=1)
    late = record_run.builder(1).with_expires(deadline).submit()
    on_time = record_run.builder(2).with_expires(timedelta(hours=1)).submit()
    heard: list[dict[str, Any]] = []

    def receive(sender: Flask, **data: Any) -> None:
        heard.append(data)

    with events.job_canceled.connected_to(receive):
        ran = {job.id: job for job in run_jobs(app)}
    expired = ran[late.id]
    assert (expired.status, expired.error, expired.attempts) == (JobStatus.CANCELED, "expired", 0)
    assert expired.expires_at is not None and abs(expired.expires_at - deadline) < timedelta(
        milliseconds=1
    )
    assert runs_of(late.id) == 0  # never ran: no execution, no record_run row
    assert heard == [{"job_id": late.id, "task": "tests.apps:record_run", "cascade": False}]
    assert (ran[on_time.id].status, ran[on_time.id].result) == (JobStatus.SUCCEEDED, 2)
    with pytest.raises(JobFailed, match="ended CANCELED: expired"):
        late.wait(timeout=5, raise_on_failure=True)


def test_a_relative_deadline_counts_from_the_due_time(app: Flask) -> None:
    before = datetime.now(UTC)
    due_later = ratchet.schedule(timedelta(hours=2), add, 1, 2).with_expires(300).submit()
    due_long_ago = (
        ratchet.schedule_at(before + AN_HOUR_AGO, add, 3, 4)
        .with_expires(timedelta(minutes=10))
        .submit()
    )
    after = datetime.now(UTC)
    later = ratchet.get_job(due_later.id)
    assert later is not None and later.expires_at is not None
    window = timedelta(hours=2, minutes=5)
    assert before + window - timedelta(seconds=1) <= later.expires_at <= after + window
    (ran,) = run_jobs(app)  # the one due two hours from now waits; the other is past
    assert (ran.id, ran.status, ran.error) == (due_long_ago.id, JobStatus.CANCELED, "expired")
    assert ran.expires_at is not None
    assert ran.expires_at - ran.scheduled_at == timedelta(minutes=10)


def test_a_tasks_expires_is_every_jobs_default_and_a_builder_changes_it(app: Flask) -> None:
    due_long_ago = datetime.now(UTC) + AN_HOUR_AGO
    expired = expiring.schedule_at(due_long_ago, 1)
    kept = expiring.builder(2).with_expires(timedelta(days=1)).submit()
    runs = expiring.enqueue(3)
    ran = {job.id: job for job in run_jobs(app)}
    assert (ran[expired.id].status, ran[expired.id].error) == (JobStatus.CANCELED, "expired")
    assert ran[kept.id].status == JobStatus.SUCCEEDED  # not due long ago, but a day's grace
    assert (ran[runs.id].status, ran[runs.id].result) == (JobStatus.SUCCEEDED, 3)
    job = ratchet.get_job(runs.id)
    assert job is not None and job.expires_at is not None
    assert job.expires_at - job.scheduled_at == timedelta(minutes=10)


def test_chains_batches_recurring_and_replace_carry_deadlines(app: Flask) -> None:
    at = datetime.now(UTC) + timedelta(days=3)
    chain = (
        ratchet.enqueue(add, 1, 1)
        .then(ratchet.enqueue(add, 2, 2).with_expires(timedelta(minutes=1)))
        .then(ratchet.enqueue(add, 3, 3).with_expires(at))
        .submit()
    )
    steps = [ratchet.get_job(i) for i in chain.ids]
    # A step's due time is not known when it is written: only a time gives it a deadline.
    assert [s.expires_at for s in steps if s] == [None, None, at]
    ratchet.enqueue_batch("b").add(add, 1, 1).with_expires(60).submit()
    child = ratchet.find_jobs(task=add, status="PENDING", limit=1).items[0]
    assert child.expires_at is not None
    assert child.expires_at - child.scheduled_at == timedelta(seconds=60)
    master = ratchet.schedule_recurring("@daily", "UTC", add, 1, 1).with_expires(45).submit()
    assert master.options.expires == 45.0  # type: ignore[union-attr]
    made = ratchet.run_recurring_now(master.id)
    assert made is not None
    fired = ratchet.get_job(made.id)
    assert fired is not None and fired.expires_at is not None
    assert fired.expires_at - fired.scheduled_at == timedelta(seconds=45)
    replaced = ratchet.replace(chain.ids[2], 0, add, 9, 9)
    again = ratchet.get_job(replaced.id)
    assert again is not None and again.expires_at == at


def test_a_deadline_is_checked_against_the_claim_and_fenced_by_it(app: Flask) -> None:
    handle = ratchet.enqueue(add, 1, 1).with_expires(timedelta(hours=1)).submit()
    store = ratchet.runtime.store
    with store.begin(db.engine) as conn:  # not claimed: the worker's expiry does not apply
        assert not store.jobs.expire(conn, handle.id, "node-a", "expired")
    (claimed,) = ratchet.claim_due(1, "node-a")
    assert claimed.expires_at is not None and claimed.expires_at > claimed.picked_at
    with store.begin(db.engine) as conn:  # another node's claim is not this one's to end
        assert not store.jobs.expire(conn, handle.id, "node-b", "expired")
    with store.begin(db.engine) as conn:
        assert store.jobs.expire(conn, handle.id, "node-a", "expired")
    job = ratchet.get_job(handle.id)
    assert job is not None and (job.status, job.error, job.attempts) == (
        JobStatus.CANCELED,
        "expired",
        0,  # the claim's attempt is given back: it never started
    )


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda: add.builder(1, 2).with_expires(0), "expires must be positive"),
        (lambda: add.builder(1, 2).with_expires(-5), "expires must be a timedelta"),
        (lambda: add.builder(1, 2).with_expires(datetime(2030, 1, 1)), "aware datetime"),
        (
            lambda: ratchet.schedule_recurring("@daily", "UTC", add, 1, 1).with_expires(
                datetime.now(UTC)
            ),
            "belongs to one job",
        ),
        (lambda: ratchet.task(expires=timedelta(0)), "expires must be positive"),
    ],
)
def test_bad_deadlines_are_refused_before_anything_is_written(
    app: Flask, make: Any, said: str
) -> None:
    with pytest.raises(InvalidOption, match=said):
        make()
    assert ratchet.find_jobs().items == []


def test_the_console_shows_a_jobs_deadline(app: Flask) -> None:
    handle = add.builder(1, 2).with_expires(datetime(2031, 5, 4, 3, 2, 1, tzinfo=UTC)).submit()
    page = app.test_client().get(f"/ratchet/jobs/{handle.id}", headers={"X-Role": "read"})
    assert page.status_code == 200
    assert "<dt>Expires</dt><dd>not started by" in page.text and "2031-05-04" in page.text


#: A deadline no ratchet wrote, as each database lets a hand write one: past what Python holds.
FAR_DEADLINE = {
    "postgresql": "UPDATE ratchet_job SET expires_at = 'infinity' WHERE job_id = :id",
    "sqlite": "UPDATE ratchet_job SET expires_at = '12025-01-01 00:00:00' WHERE job_id = :id",
    "mariadb": "UPDATE ratchet_job SET expires_at = '9999-12-31 23:59:59' WHERE job_id = :id",
}


def test_a_deadline_past_what_python_holds_never_breaks_the_claim(app: Flask, dialect: str) -> None:
    far = add.builder(1, 1).with_expires(timedelta(hours=1)).submit()
    other = add.enqueue(2, 2)
    with db.engine.begin() as conn:
        conn.execute(sa.text(FAR_DEADLINE[dialect]), {"id": stored_id(far.id, dialect)})
    ran = {job.id: job for job in run_jobs(app)}  # the claim read both rows
    assert (ran[far.id].status, ran[far.id].result) == (JobStatus.SUCCEEDED, 2)
    assert ran[other.id].status == JobStatus.SUCCEEDED
    assert ran[far.id].expires_at is not None and ran[far.id].expires_at.year == 9999
