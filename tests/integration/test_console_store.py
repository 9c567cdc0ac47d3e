"""The console's store layer on both databases: the guarded delete and the bounded reads."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from flask import Flask

from flask_ratchet.console.reads import jobs as queries
from flask_ratchet.console.reads import overview as reports
from flask_ratchet.ids import uuid7
from flask_ratchet.schema import job_log, job_tag
from flask_ratchet.states import JobStatus
from flask_ratchet.store import health
from tests.acceptance.conftest import wait_until
from tests.apps import add, ratchet
from tests.integration.helpers import add_execution, count, job_in, lock_waits


def delete(job_id: uuid.UUID) -> bool:
    with ratchet.transaction() as conn:
        return ratchet.runtime.store.jobs.delete_ended(conn, job_id)


def test_delete_takes_ended_jobs_with_everything_that_belongs_to_them(app: Flask) -> None:
    failed = job_in(JobStatus.FAILED)
    succeeded = job_in(JobStatus.SUCCEEDED)
    with ratchet.transaction() as conn:
        conn.execute(sa.insert(job_tag).values(job_id=failed, tag="t"))
        add_execution(conn, failed, datetime.now(UTC), "FAILED", node_id="node-a")
        conn.execute(
            sa.insert(job_log).values(
                job_id=failed, attempt=1, logged_at=datetime.now(UTC), level="INFO", message="m"
            )
        )
    assert delete(failed) and delete(succeeded)
    assert ratchet.get_job(failed) is None and ratchet.get_job(succeeded) is None
    for table in ("ratchet_job", "ratchet_job_tag", "ratchet_execution", "ratchet_job_log"):
        assert count(table) == 0, table
    assert not delete(failed)  # already gone


@pytest.mark.parametrize("status", [JobStatus.PENDING, JobStatus.PAUSED])
def test_delete_refuses_live_jobs(app: Flask, status: JobStatus) -> None:
    job_id = job_in(status)
    assert not delete(job_id)
    assert ratchet.get_job(job_id).status == status  # type: ignore[union-attr]


def test_delete_refuses_running_and_paused_failed_jobs(app: Flask) -> None:
    failed = job_in(JobStatus.FAILED)
    running = job_in(JobStatus.RUNNING)
    assert ratchet.pause_job(failed)  # a FAILED job paused has a hot row again: it is live
    assert not delete(failed) and not delete(running)
    assert ratchet.get_job(failed).status == JobStatus.PAUSED  # type: ignore[union-attr]
    assert ratchet.get_job(running).status == JobStatus.RUNNING  # type: ignore[union-attr]
    assert ratchet.resume_job(failed) and delete(failed)


def test_counts_stop_at_the_cap(app: Flask, dialect: str) -> None:
    ratchet.enqueue_many(ratchet.enqueue(add, i, i) for i in range(12))
    with ratchet.transaction() as conn:
        exact = reports.status_counts(conn, ratchet.runtime.store.dialect, cap=100)
        capped = reports.status_counts(conn, ratchet.runtime.store.dialect, cap=10)
    assert exact[JobStatus.PENDING] == queries.Count(12)
    assert exact[JobStatus.FAILED] == queries.Count(0)
    assert not capped[JobStatus.PENDING].exact
    if dialect == "sqlite":
        assert capped[JobStatus.PENDING] == queries.Count(10, exact=False)


def test_past_the_cap_postgres_estimates_from_statistics(app: Flask, dialect: str) -> None:
    ratchet.enqueue_many(ratchet.enqueue(add, i, i) for i in range(300))
    with ratchet.transaction() as conn:
        if dialect == "postgresql":
            conn.exec_driver_sql("ANALYZE ratchet_job_queue")
        counts = reports.status_counts(conn, ratchet.runtime.store.dialect, cap=50)
    pending = counts[JobStatus.PENDING]
    if dialect == "postgresql":
        assert pending.estimated and 250 <= pending.value <= 350
    else:  # SQLite keeps no such statistics: the count is a lower bound
        assert pending == queries.Count(50, exact=False)


def test_throughput_buckets_the_last_hour_by_minute(app: Flask) -> None:
    failed = job_in(JobStatus.FAILED)
    with ratchet.transaction() as conn:
        now = ratchet.runtime.store.now(conn)
        for minutes_ago, status in ((0, "SUCCEEDED"), (0, "FAILED"), (5, "SUCCEEDED"), (90, "OK")):
            started = now - timedelta(minutes=minutes_ago)
            add_execution(conn, failed, started, status, queue_wait_ms=100.0 * (minutes_ago + 1))
        minutes = reports.throughput(conn, now)
        p95 = health.p95_queue_wait(conn, now)
    assert len(minutes) == 60
    assert (minutes[-1].succeeded, minutes[-1].failed) == (1, 1)
    assert (minutes[-6].succeeded, minutes[-6].failed) == (1, 0)
    assert sum(m.succeeded + m.failed for m in minutes) == 3
    assert p95 == pytest.approx(0.1)


def test_a_cursor_only_fits_its_own_sort(app: Flask) -> None:
    ratchet.enqueue_many(ratchet.enqueue(add, i, i) for i in range(3))
    with ratchet.transaction() as conn:
        page = queries.list_jobs(conn, queries.JobQuery(), 2)
        assert page.next_cursor is not None
        with pytest.raises(ValueError):
            queries.list_jobs(conn, queries.JobQuery(sort="priority"), 2, page.next_cursor)
        rest = queries.list_jobs(conn, queries.JobQuery(), 2, page.next_cursor)
        with pytest.raises(ValueError):  # one query per level: a made-up level is refused
            queries.list_jobs(conn, queries.JobQuery(sort="priority"), 2, f"p.99.{uuid7()}")
    assert len(rest.items) == 1 and rest.next_cursor is None


def test_a_delete_waits_for_a_concurrent_pause_and_then_leaves_the_job(
    app: Flask, dialect: str
) -> None:
    """A pause of a FAILED job puts a hot row back; a delete running meanwhile must not take
    the job from under it. The delete locks the cold row first (SQLite: its write lock), so it
    waits for the pause to commit, and then sees the hot row."""
    failed = job_in(JobStatus.FAILED)
    store, engine = ratchet.runtime.store, ratchet.runtime.engine
    outcome: list[bool] = []
    with store.begin(engine) as pausing:
        assert store.jobs.pause(pausing, failed)  # hot row written, not yet committed

        def delete_meanwhile() -> None:
            with store.begin(engine) as conn:
                outcome.append(store.jobs.delete_ended(conn, failed))

        deleter = threading.Thread(target=delete_meanwhile)
        deleter.start()
        if dialect == "postgresql":
            wait_until(lambda: lock_waits(engine), 10, "the delete to wait")
        else:  # SQLite shows no lock waits: the delete must simply not finish meanwhile
            deleter.join(0.3)
        assert deleter.is_alive() and outcome == []
    deleter.join(10)
    assert outcome == [False]
    assert ratchet.get_job(failed).status == JobStatus.PAUSED  # type: ignore[union-attr]
