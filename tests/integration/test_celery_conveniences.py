"""What an app moved from Celery reaches for: ``task.delay()``, ``wait(raise_on_failure=True)``,
a named error for a malformed job id, and ``flask ratchet queues list`` listing every queue the
console's Queues page lists."""

from __future__ import annotations

import uuid

import pytest
from flask import Flask

from flask_ratchet import InvalidJobId, JobFailed, JobStatus
from flask_ratchet.console.reads.queues import queue_names
from flask_ratchet.testing import run_jobs
from tests.apps import add, db, ratchet, refuse, send_mail


def test_delay_is_enqueue_under_celerys_name(app: Flask) -> None:
    handle = add.delay(2, b=3)
    job = ratchet.get_job(handle.id)
    assert job is not None and (job.task, job.args, job.kwargs) == ("tests.apps:add", [2], {"b": 3})
    assert job.queue == "default" and job.status == JobStatus.PENDING
    (ran,) = run_jobs(app)
    assert (ran.id, ran.result) == (handle.id, 5)


def test_wait_raises_job_failed_for_a_failed_or_canceled_job_when_asked(app: Flask) -> None:
    works, fails, canceled = add.enqueue(1, 1), refuse.enqueue("corrupt"), add.enqueue(2, 2)
    assert ratchet.cancel_job(canceled.id)
    run_jobs(app)
    assert works.wait(timeout=5, raise_on_failure=True).result == 2
    said = rf"job {fails.id} \(tests.apps:refuse\) ended FAILED: "
    with pytest.raises(JobFailed, match=said) as f:
        fails.wait(timeout=5, raise_on_failure=True)
    assert f.value.job.id == fails.id and f.value.status == JobStatus.FAILED
    assert f.value.error == "RuntimeError: could not process" == f.value.job.error
    with pytest.raises(JobFailed, match="ended CANCELED") as c:
        ratchet.wait(str(canceled.id), timeout=5, raise_on_failure=True)
    assert (c.value.job.id, c.value.status, c.value.error) == (
        canceled.id,
        JobStatus.CANCELED,
        None,
    )
    # Without it, the ended job is returned whatever its end, as before.
    assert fails.wait(timeout=5).status == JobStatus.FAILED


@pytest.mark.parametrize("bad", ["42", "", "0190-not-a-uuid", 42, None])
def test_a_malformed_job_id_is_invalid_job_id_a_value_error(app: Flask, bad: object) -> None:
    for call in (ratchet.get_job, ratchet.cancel_job, ratchet.retry_job, ratchet.wait):
        with pytest.raises(InvalidJobId, match="is not a job id") as refused:
            call(bad)  # type: ignore[operator]
        assert isinstance(refused.value, ValueError)
    assert ratchet.get_job(uuid.uuid4()) is None  # well formed, no such job: None


def test_the_cli_says_so_of_a_malformed_job_id_in_one_line(app: Flask) -> None:
    runner = app.test_cli_runner()
    for command in ("show", "cancel", "retry", "logs"):
        result = runner.invoke(args=["ratchet", "jobs", command, "not-a-job"])
        assert result.exit_code == 1, result.output
        assert "'not-a-job' is not a job id" in result.output
        assert "Traceback" not in result.output


def test_queues_list_shows_every_queue_the_console_lists(app: Flask) -> None:
    send_mail.enqueue("a@example.org")  # mail: ends, and is still known
    run_jobs(app)
    ratchet.enqueue(add, 1, 1).with_queue("reports").submit()  # live
    ratchet.pause_queue("idle")  # no job at all, paused
    assert ratchet.resume_queue("idle")
    found = [q.name for q in ratchet.queues()]
    store = ratchet.runtime.store
    with db.engine.connect() as conn:
        console_names, truncated = queue_names(conn, store.queues, store.queues.states(conn))
    assert found == console_names == ["default", "idle", "mail", "reports"] and not truncated
    listed = app.test_cli_runner().invoke(args=["ratchet", "queues", "list"])
    assert listed.exit_code == 0, listed.output
    rows = [line.split()[:2] for line in listed.output.splitlines()[1:]]
    assert rows == [
        ["default", "active"],
        ["idle", "active"],
        ["mail", "active"],
        ["reports", "active"],
    ]
    summary = {q.name: q for q in ratchet.queues()}
    assert (summary["reports"].pending, summary["mail"].pending) == (1, 0)
