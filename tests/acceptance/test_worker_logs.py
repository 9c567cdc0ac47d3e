"""What a real worker tells its operator: one line per failure (with the retry's due time) and
per job failed for good, quiet successes, and JSON lines for a log shipper."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import sqlalchemy as sa
from flask import Flask

from flask_ratchet import JobStatus
from flask_ratchet.schema import job_log
from tests.acceptance.conftest import Workers, wait_until
from tests.apps import (
    db,
    fail_until,
    logs_secrets,
    ratchet,
    record_run,
    refuse,
    wait_for_file,
)


def ended(*job_ids: object) -> bool:
    return all(ratchet.get_job(i).is_terminal for i in job_ids)  # type: ignore[arg-type,union-attr]


def test_failures_are_logged_one_json_line_each(app: Flask, workers: Workers) -> None:
    retried = ratchet.enqueue_now(fail_until, 2).id  # fails once, then works
    dead = ratchet.enqueue_now(refuse, "card expired").id  # fails for good
    quiet = ratchet.enqueue_now(record_run, 1).id
    proc = workers.start("--log-format", "json")
    wait_until(lambda: ended(retried, dead, quiet), what="the jobs to end")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    lines = [json.loads(line) for line in workers.output(proc).splitlines() if line.strip()]
    assert all({"time", "level", "logger", "message"} <= line.keys() for line in lines)
    messages = {line["level"] + " " + line["message"] for line in lines}
    retry = next(m for m in messages if m.startswith(f"WARNING job {retried} "))
    assert "(tests.apps:fail_until) failed on attempt 1; retry due at 20" in retry
    assert retry.endswith("ConnectionError: attempt 1 failed, password=***")  # masked
    assert (
        f"ERROR job {dead} (tests.apps:refuse) failed for good on attempt 1 (dead-letter queue): "
        "RuntimeError: could not process"
    ) in messages
    assert not any(str(quiet) in m for m in messages)  # a success says nothing
    # A job's own lines, and the worker's lines about it, carry the job's fields.
    node = next(line["node"] for line in lines if "node" in line)
    assert node.endswith(f":{proc.pid}")
    own = [line for line in lines if line["message"] == "attempt 1"]
    failed = [line for line in lines if line["message"].startswith(f"job {retried} ")]
    for line in (*own, *failed):
        fields = {k: line.get(k) for k in ("job_id", "task", "queue", "attempt", "node")}
        assert fields == {
            "job_id": str(retried),
            "task": "tests.apps:fail_until",
            "queue": "default",
            "attempt": 1,
            "node": node,
        }, line
    assert own and failed
    dead_line = next(line for line in lines if line["message"].startswith(f"job {dead} "))
    assert (dead_line["attempt"], dead_line["queue"], dead_line["node"]) == (1, "default", node)


def test_log_level_warning_hides_the_workers_info_lines(app: Flask, workers: Workers) -> None:
    dead = ratchet.enqueue_now(refuse, "card expired").id
    proc = workers.start("--burst", "--log-level", "warning")
    assert proc.wait(120) == 0
    wait_until(lambda: ended(dead), what="the job to end")
    output = workers.output(proc)
    assert f"job {dead} (tests.apps:refuse) failed for good" in output
    assert " INFO " not in output, output  # "worker … started" and the like are INFO


@pytest.mark.parametrize("form", ["text", "json"])
def test_the_workers_lines_mask_what_jobs_log(app: Flask, workers: Workers, form: str) -> None:
    password, token = "hunter" + "9", "t0k-" + "77"  # made here: no source line holds them
    job_id = logs_secrets.enqueue(f"postgresql://shop:{password}@db/prod", token).id
    proc = workers.start("--burst", "--log-format", form)
    assert proc.wait(120) == 0, workers.output(proc)
    assert ended(job_id)
    out = workers.output(proc)
    assert password not in out and token not in out, out
    assert "connecting to postgresql://shop:***@db/prod with token=***" in out  # ctx.logger
    assert "retrying postgresql://shop:***@db/prod, password=***" in out  # a module's logger
    with db.engine.connect() as conn:
        stored = conn.execute(
            sa.select(job_log.c.message).where(job_log.c.job_id == job_id)
        ).scalars()
        assert sorted(stored) == [
            "connecting to postgresql://shop:***@db/prod with token=***",
            "retrying postgresql://shop:***@db/prod, password=***",
        ]


def test_a_running_jobs_log_lines_are_stored_while_it_runs(
    app: Flask, workers: Workers, tmp_path: Path
) -> None:
    flag = tmp_path / "go"
    job_id = ratchet.enqueue(wait_for_file, str(flag)).submit().id

    def stored() -> list[tuple[int, str]]:
        with db.engine.connect() as conn:
            rows = conn.execute(
                sa.select(job_log.c.attempt, job_log.c.message).where(job_log.c.job_id == job_id)
            ).all()
        return [(r.attempt, r.message) for r in rows]

    workers.start()
    # The line the job logged as it began is there while it still runs (it waits for the flag).
    wait_until(lambda: stored(), what="the running job's first line")
    assert ratchet.get_job(job_id).status == JobStatus.RUNNING  # type: ignore[union-attr]
    flag.touch()
    wait_until(lambda: ended(job_id), what="the job to end")
    # Written once: the early write took it, the outcome's write did not repeat it.
    assert stored() == [(1, f"waiting for {flag}")]
