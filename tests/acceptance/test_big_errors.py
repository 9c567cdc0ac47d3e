"""A worker given a job with a huge error or a flood of log lines keeps working: the error is
cut and masked, the log stays within its budget, and the other jobs run meanwhile."""

from __future__ import annotations

import uuid
from datetime import datetime

import sqlalchemy as sa
from flask import Flask

from flask_ratchet import JobStatus
from flask_ratchet.context import MAX_LOG_BYTES, MAX_LOG_LINES
from flask_ratchet.job import Job
from flask_ratchet.retry import MAX_ERROR, MAX_TRACEBACK
from flask_ratchet.schema import node
from tests.acceptance.conftest import Workers, wait_until
from tests.apps import db, log_lines, raise_huge, ratchet, record_run
from tests.integration.helpers import stored_id


def job(job_id: uuid.UUID) -> Job:
    found = ratchet.get_job(job_id)
    assert found is not None
    return found


def rows(sql: str, job_id: uuid.UUID) -> list[sa.Row[tuple[object, ...]]]:
    key = stored_id(job_id, db.engine)
    with db.engine.connect() as conn:
        return list(conn.execute(sa.text(sql), {"id": key}))


def heartbeat() -> datetime:
    """The worker's last heartbeat, read as the library reads it (aware UTC on both databases)."""
    with db.engine.connect() as conn:
        return conn.execute(sa.select(sa.func.max(node.c.last_heartbeat))).scalar_one()


def test_a_ten_megabyte_error_does_not_stall_the_worker(app: Flask, workers: Workers) -> None:
    huge = ratchet.enqueue_now(raise_huge, 10_000_000).id
    chatty = ratchet.enqueue_now(log_lines, MAX_LOG_LINES + 1, 5000).id
    others = [ratchet.enqueue_now(record_run, i).id for i in range(20)]
    proc = workers.start("--concurrency", "2")
    wait_until(
        lambda: all(job(i).is_terminal for i in (huge, chatty, *others)),
        timeout=60,
        what="every job to end",
    )
    failed = job(huge)
    assert (failed.status, failed.attempts) == (JobStatus.FAILED, 1)
    error = failed.error or ""
    assert len(error) <= MAX_ERROR and error.endswith("more]")
    assert error.startswith("ValueError: postgresql://app:***@db/prod password=***")
    (run,) = rows("SELECT error, traceback FROM ratchet_execution WHERE job_id = :id", huge)
    assert len(run.traceback) <= MAX_TRACEBACK and "in raise_huge" in run.traceback
    assert "hunter" not in run.traceback
    assert all(job(i).status == JobStatus.SUCCEEDED for i in (chatty, *others))

    messages = [
        r.message
        for r in rows(
            "SELECT message FROM ratchet_job_log WHERE job_id = :id ORDER BY log_id", chatty
        )
    ]
    assert sum(len(m.encode()) for m in messages) <= MAX_LOG_BYTES
    assert messages[0] == "connecting to postgresql://app:***@db/prod"
    assert "more log lines were dropped" in messages[-1]

    ended = failed.finished_at
    assert ended is not None
    wait_until(lambda: heartbeat() > ended, what="a heartbeat after the job failed")
    assert proc.poll() is None, workers.output(proc)
