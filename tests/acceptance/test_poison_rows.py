"""Rows a worker cannot run, written straight into the tables beside good jobs in one claim: the
worker survives, the good jobs succeed, each poison job fails for good naming its column; a
recurring master it cannot fire is set aside while the others fire; a damaged condition or batch
row leaves every job's own outcome written."""

from __future__ import annotations

import signal
import uuid

import sqlalchemy as sa
from flask import Flask

from flask_ratchet import JobStatus, RecurringStatus
from flask_ratchet.schema import batch, job, recurring, workflow_condition
from tests.acceptance.conftest import PATIENT, Workers, wait_until
from tests.acceptance.test_recurring import EVERY_SECOND
from tests.apps import db, ratchet, record_run
from tests.flow_tasks import batch_item, follow_up, produce

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


def succeeded_children(recurring_id: str) -> int:
    with db.engine.connect() as conn:
        return int(
            conn.execute(
                sa.select(sa.func.count()).where(
                    job.c.recurring_id == recurring_id,
                    job.c.terminal_status == JobStatus.SUCCEEDED,
                )
            ).scalar_one()
        )


def test_a_damaged_recurring_master_is_set_aside_and_the_others_fire(
    app: Flask, workers: Workers, dialect: str
) -> None:
    good, bad = (
        ratchet.schedule_recurring(EVERY_SECOND, "UTC", record_run, n)
        .with_business_key(name)
        .submit()
        for n, name in ((1, "good"), (2, "bad"))
    )
    with db.engine.begin() as conn:
        conn.execute(
            sa.update(recurring)
            .where(recurring.c.recurring_id == bad.id)
            .values(options="<b>not json")
        )
    proc = workers.start("--concurrency", "2", **(PATIENT if dialect == "sqlite" else {}))
    wait_until(lambda: succeeded_children(good.id) >= 3, what="three children of the good master")
    assert proc.poll() is None, workers.output(proc)
    set_aside = ratchet.get_recurring(bad.id)
    assert set_aside is not None and set_aside.status == RecurringStatus.PAUSED
    assert {j.recurring_id for j in ratchet.find_jobs().items} == {good.id}
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0, workers.output(proc)
    logged = workers.output(proc)
    assert logged.count("recurring job bad cannot be evaluated (column 'options'") == 1, logged


def test_damaged_condition_and_batch_rows_leave_every_outcome_written(
    app: Flask, workers: Workers
) -> None:
    chain = ratchet.enqueue(produce, 20).then(follow_up, "next").then(follow_up, "last").submit()
    root, damaged_step, last = chain.ids
    builder = ratchet.enqueue_batch("damaged")
    for i in range(1, 6):
        builder.add(batch_item, i)
    handle = builder.on_success(follow_up, "all good").submit()
    good = [ratchet.enqueue_now(record_run, i).id for i in range(10)]
    with db.engine.begin() as conn:
        conn.execute(
            sa.update(workflow_condition)
            .where(workflow_condition.c.job_id == damaged_step)
            .values(kind="SIDEWAYS")
        )
        conn.execute(sa.update(batch).where(batch.c.batch_id == handle.id).values(total=-1))
    # Room for every job in the first claim: the damaged rows' jobs share it with the good ones.
    proc = workers.start("--burst", "--concurrency", "32")
    assert proc.wait(timeout=120) == 0, workers.output(proc)
    for job_id in [root, *good]:
        found = ratchet.get_job(job_id)
        assert found is not None and found.status == JobStatus.SUCCEEDED, found
    for job_id in (damaged_step, last):
        found = ratchet.get_job(job_id)
        assert found is not None and found.status == JobStatus.CANCELED, found
    parent = ratchet.get_job(handle.id)
    assert parent is not None and parent.status == JobStatus.SUCCEEDED, parent
    assert parent.result == {"total": 5, "succeeded": 5, "failed": 0}
    assert {j.status for j in ratchet.find_jobs(limit=100).items} == {
        JobStatus.SUCCEEDED,
        JobStatus.CANCELED,
    }
    logged = workers.output(proc)
    assert logged.count(f"dependent {damaged_step} is canceled: column 'kind'") == 1, logged
