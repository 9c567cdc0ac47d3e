"""A task's retry rules (``retry_on``, ``dont_retry_on``, ``max_backoff``, ``jitter``), kept in
the registry of the process that runs it, and a retry a task asks for (``raise Retry(in_=…)``,
``ctx.retry(in_=…)``): run by the worker's own code (``run_jobs``) on every database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from flask import Flask

from flask_ratchet import JobStatus
from flask_ratchet.schema import execution
from flask_ratchet.testing import run_jobs
from tests.apps import db, ratchet
from tests.celery_tasks import asks_again, capped_backoff, fails_with, refused_by


def executions(job_id: object) -> list[tuple[int, str, str | None]]:
    """(attempt, status, error) of each of the job's executions, in order."""
    with db.engine.connect() as conn:
        rows = conn.execute(
            sa.select(execution.c.attempt, execution.c.status, execution.c.error)
            .where(execution.c.job_id == job_id)
            .order_by(execution.c.attempt)
        )
        return [(r.attempt, str(r.status), r.error) for r in rows]


def test_retry_on_retries_only_the_listed_exceptions(app: Flask) -> None:
    other = fails_with.enqueue("value")
    listed = fails_with.enqueue("connection")
    ran = run_jobs(app)
    assert [j.id for j in ran].count(other.id) == 1  # failed for good at once
    assert [j.id for j in ran].count(listed.id) == 4  # max_retries=3: four runs
    ended = {j.id: j for j in ran}
    assert (ended[other.id].status, ended[other.id].error) == (
        JobStatus.FAILED,
        "ValueError: value",
    )
    assert ended[listed.id].status == JobStatus.FAILED and ended[listed.id].attempts == 4


def test_dont_retry_on_fails_for_good_from_anywhere_in_the_chain(app: Flask) -> None:
    handle = refused_by.enqueue("/reports")
    (ran,) = run_jobs(app)
    assert (ran.id, ran.status, ran.attempts) == (handle.id, JobStatus.FAILED, 1)
    assert ran.error == "RuntimeError: cannot write the report"


def test_max_backoff_and_jitter_set_when_the_retry_is_due(app: Flask) -> None:
    handle = capped_backoff.enqueue()
    before = datetime.now(UTC)
    (ran,) = run_jobs(app, retry_delays=True)  # the retry waits for its backoff
    after = datetime.now(UTC)
    assert (ran.id, ran.status, ran.attempts) == (handle.id, JobStatus.PENDING, 1)
    # An hour's backoff capped at a minute, less a random part of up to half of it.
    assert before + timedelta(seconds=29) <= ran.scheduled_at <= after + timedelta(seconds=61)


def test_a_retry_the_task_asks_for_reschedules_it_and_counts(app: Flask) -> None:
    handle = asks_again.enqueue(2)
    before = datetime.now(UTC)
    (first,) = run_jobs(app, retry_delays=True)
    after = datetime.now(UTC)
    assert (first.status, first.attempts, first.error) == (
        JobStatus.PENDING,
        1,
        "Retry: rate limited",
    )
    # Its own delay (an hour), not its backoff; retry_on and dont_retry_on do not stop it.
    hour = timedelta(hours=1)
    assert before + hour - timedelta(seconds=1) <= first.scheduled_at <= after + hour
    store = ratchet.runtime.store
    with store.begin(db.engine) as conn:
        store.jobs.make_due(conn, handle.id)  # the hour has passed
    ran = run_jobs(app)  # retries due at once from here
    assert [j.id for j in ran] == [handle.id] * 2  # attempts 2 (asks again) and 3
    assert (ran[-1].status, ran[-1].attempts) == (JobStatus.SUCCEEDED, 3)
    assert ran[-1].result == "done on attempt 3"
    # Each asked-for retry is a failed execution, saying why.
    assert executions(handle.id) == [
        (1, "FAILED", "Retry: rate limited"),
        (2, "FAILED", "Retry: asked to run again in 3600s"),
        (3, "SUCCEEDED", None),
    ]


def test_a_job_that_keeps_asking_ends_failed_once_its_retries_are_spent(app: Flask) -> None:
    handle = asks_again.enqueue(9)  # max_retries=2
    ran = run_jobs(app)
    assert [j.id for j in ran] == [handle.id] * 3
    ended = ratchet.get_job(handle.id)
    assert ended is not None and (ended.status, ended.attempts) == (JobStatus.FAILED, 3)
    assert ended.error == "Retry: rate limited"  # what its last attempt asked
