"""Rows a worker cannot run, written straight into the tables beside good jobs in one claim: the
worker survives, the good jobs succeed, each poison job fails for good naming its column."""

from __future__ import annotations

import uuid

import sqlalchemy as sa
from flask import Flask

from flask_ratchet import JobStatus
from flask_ratchet.schema import job
from tests.acceptance.conftest import Workers
from tests.apps import db, ratchet, record_run

#: (column of ratchet_job, what it holds): each unreadable in turn.
POISON: list[tuple[str, object]] = [
    ("payload", "not json"),
    ("payload", "[]"),
    ("payload", '{"args": 5, "kwargs": {}}'),
    ("payload", '"x"'),
    ("payload", "[" * 100_000),
    ("params", "not json"),
    ("params", "[1]"),
    ("backoff", "SIDEWAYS"),
    ("backoff_base", -5.0),
    ("timeout", -1.0),
]


def test_poison_rows_fail_alone_and_the_worker_goes_on(app: Flask, workers: Workers) -> None:
    good: list[uuid.UUID] = []
    poison: dict[uuid.UUID, str] = {}
    for i, (column, value) in enumerate(POISON):
        good.append(ratchet.enqueue_now(record_run, i).id)
        job_id = ratchet.enqueue_now(record_run, 100 + i).id
        with db.engine.begin() as conn:
            conn.execute(sa.update(job).where(job.c.job_id == job_id).values({column: value}))
        poison[job_id] = column
    good.append(ratchet.enqueue_now(record_run, 99).id)
    # Room for every job in the first claim: the poison rows share it with the good ones.
    proc = workers.start("--burst", "--concurrency", "32")
    assert proc.wait(timeout=120) == 0, workers.output(proc)
    for job_id in good:
        found = ratchet.get_job(job_id)
        assert found is not None and found.status == JobStatus.SUCCEEDED, found
    for job_id, column in poison.items():
        found = ratchet.get_job(job_id)
        assert found is not None and found.status == JobStatus.FAILED, (column, found)
        assert found.error is not None
        assert found.error.startswith(f"UnreadableJob: column {column!r} "), found.error
        assert found.attempts == 1  # for good: the same row would fail the same way again
    assert ratchet.queue_health()["counts"]["RUNNING"] == 0
