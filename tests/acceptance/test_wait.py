"""``JobHandle.wait`` against real ``flask ratchet worker`` processes, on both databases."""

from __future__ import annotations

import time

import pytest
import sqlalchemy as sa
from flask import Flask

from flask_ratchet import JobStatus
from flask_ratchet.wakeups.channels import PgChannels
from flask_ratchet.wakeups.end_watches import ChannelEndWatch
from tests.acceptance.conftest import Workers
from tests.apps import add, fail_until, ratchet, sleep_for


def test_wait_returns_the_ended_job_with_its_result_or_error(app: Flask, workers: Workers) -> None:
    ok = add.enqueue(2, 3)
    broken = fail_until.enqueue(9)  # max_retries=2, 1 s apart: fails for good on the third run
    workers.start()
    done = ok.wait(timeout=60)
    assert (done.status, done.result) == (JobStatus.SUCCEEDED, 5)
    failed = ratchet.wait(broken.id, timeout=60)
    assert failed.status == JobStatus.FAILED
    assert failed.error is not None and "attempt 3 failed" in failed.error


def test_a_waiter_reads_the_job_a_few_times_not_in_a_tight_loop(
    app: Flask, workers: Workers
) -> None:
    workers.start()
    slow = sleep_for.enqueue(2.5)
    reads: list[str] = []

    def count_reads(conn: object, cursor: object, statement: str, *args: object) -> None:
        if statement.startswith("SELECT ratchet_job.job_id"):  # one per read of the job
            reads.append(statement)

    engine = ratchet.runtime.engine
    sa.event.listen(engine, "before_cursor_execute", count_reads)
    started = time.monotonic()
    try:
        assert slow.wait(timeout=60).status == JobStatus.SUCCEEDED
    finally:
        sa.event.remove(engine, "before_cursor_execute", count_reads)
    waited = time.monotonic() - started
    # About 3 s of waiting on a quiet machine (longer on a loaded one): a read a second, and one
    # per notice or commit that may be the end (on SQLite any commit: the worker's heartbeat
    # commits every 0.5 s here, and the claim and the outcome once each), so about 4 reads a
    # second at most. A tight poll every 10 ms would read 100 a second.
    assert 2 <= len(reads) <= 8 + 4 * waited, (len(reads), waited)


# SQLite waiters watch the file for commits instead: PostgreSQL only.
@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_on_postgresql_a_worker_tells_waiters_that_jobs_ended(app: Flask, workers: Workers) -> None:
    workers.start()
    add.enqueue(0, 0).wait(timeout=60)  # the worker is up
    watch = ChannelEndWatch(PgChannels(ratchet.runtime.engine.url))
    try:
        add.enqueue(1, 1)
        started = time.monotonic()
        watch.wait(30)
        # Without the worker's NOTIFY the watch would sleep the full 30 s.
        assert time.monotonic() - started < 15
    finally:
        watch.close()
