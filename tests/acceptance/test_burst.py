"""``flask ratchet worker --burst`` ends once nothing it can run is due, also when jobs it cannot
run are left: jobs of a task it does not know (handed back), of a paused queue, of a queue it
does not take. It says so in its log, and waits out no grace."""

from __future__ import annotations

import uuid

import sqlalchemy as sa
from flask import Flask

from flask_ratchet import JobStatus
from tests.acceptance.conftest import PATIENT, Workers
from tests.apps import db, ratchet, record_run
from tests.integration.helpers import count, stored_id

#: Seconds a test waits for the burst worker to end at most: far below the grace it used to
#: wait out (ten minutes), and a bound that only says "never" on a loaded machine.
ENDS_WITHIN = 120


def unknown(job_id: uuid.UUID, task: str) -> None:
    """Make ``job_id`` a job of a task no worker knows."""
    with db.engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE ratchet_job SET task = :task WHERE job_id = :id"),
            {"task": task, "id": stored_id(job_id, db.engine)},
        )


def job_of(job_id: uuid.UUID) -> tuple[JobStatus | str, int]:
    found = ratchet.get_job(job_id)
    assert found is not None
    return found.status, found.attempts


def test_a_burst_worker_ends_leaving_what_it_cannot_run(
    app: Flask, workers: Workers, dialect: str
) -> None:
    gone = [ratchet.enqueue_now(record_run, i).id for i in range(3)]
    for job_id in gone:
        unknown(job_id, "gone.module:task")
    held = ratchet.enqueue(record_run, 10).with_queue("emails").submit().id
    assert ratchet.pause_queue("emails")
    elsewhere = ratchet.enqueue(record_run, 20).with_queue("reports").submit().id
    ran = ratchet.enqueue_now(record_run, 30).id

    config = PATIENT if dialect == "sqlite" else {}
    proc = workers.start(
        "--burst", "--queues", "default,emails", RATCHET_UNKNOWN_TASK_GRACE=600, **config
    )
    assert proc.wait(timeout=ENDS_WITHIN) == 0, workers.output(proc)

    out = workers.output(proc)
    assert (
        "burst: nothing due that this worker can run (3 jobs of unknown task "
        "'gone.module:task' handed back; queue 'emails' paused (1 due); 1 due in queue "
        "'reports', which this worker does not take); stopping"
    ) in out
    assert job_of(ran)[0] == JobStatus.SUCCEEDED
    assert count("run") == 1
    for job_id in [*gone, held, elsewhere]:
        assert job_of(job_id) == (JobStatus.PENDING, 0)


def test_a_burst_worker_with_nothing_to_do_says_so(app: Flask, workers: Workers) -> None:
    proc = workers.start("--burst")
    assert proc.wait(timeout=ENDS_WITHIN) == 0, workers.output(proc)
    assert "burst: nothing due; stopping" in workers.output(proc)
