"""The worker, as users run it: ``flask ratchet worker`` processes on SQLite and PostgreSQL."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from flask import Flask

from flask_ratchet import JobStatus
from flask_ratchet.job import Job, Progress
from tests.acceptance.conftest import PATIENT, SHARED, Workers, wait_until
from tests.apps import (
    context_receivers,
    create_app,
    db,
    fail_until,
    frozen_objects,
    never_returns,
    ratchet,
    record_run,
    refuse,
    report,
    sleep_for,
    wait_for_file,
)
from tests.conftest import truncate_all
from tests.integration.helpers import count, stored_id


def job(job_id: uuid.UUID) -> Job:
    found = ratchet.get_job(job_id)
    assert found is not None
    return found


def status(job_id: uuid.UUID) -> JobStatus:
    return job(job_id).status


def scalar(sql: str, **params: object) -> object:
    with db.engine.connect() as conn:
        return conn.execute(sa.text(sql), params).scalar()


@pytest.mark.slow
def test_no_job_is_lost_or_run_twice(app: Flask, workers: Workers, dialect: str) -> None:
    processes, jobs = (4, 10_000) if dialect == "postgresql" else (2, 4_000)
    ratchet.enqueue_many(ratchet.enqueue(record_run, i) for i in range(jobs))
    # Sixteen job threads committing to one SQLite file: give the jobs' own writes the same
    # patient busy timeout the worker's engine has (SQLite's lock waits are not fair).
    config = {"sqlite": PATIENT, "postgresql": SHARED}.get(dialect, {})
    procs = [workers.start("--burst", "--concurrency", "8", **config) for _ in range(processes)]
    for proc in procs:
        assert proc.wait(timeout=600) == 0, workers.output(proc)
    failures = scalar("SELECT count(*) FROM ratchet_execution WHERE status <> 'SUCCEEDED'")
    assert failures == 0, scalar("SELECT max(error) FROM ratchet_execution")
    assert count("run") == jobs
    assert scalar("SELECT count(DISTINCT job_id) FROM run") == jobs
    assert ratchet.queue_health()["counts"]["SUCCEEDED"] == jobs
    pids = scalar("SELECT count(DISTINCT pid) FROM run")
    assert pids == processes, "every worker took a share"


def test_a_worker_freezes_what_it_built_before_its_first_job(app: Flask, workers: Workers) -> None:
    # gc.freeze(): the app, its modules and the worker's parts are never walked again by the
    # collector (see flask_ratchet.cli.worker). The worker is a process of its own: what this
    # test process froze (tests/conftest.py) is not counted there.
    job_id = ratchet.enqueue_now(frozen_objects).id
    # The app context a worker pushes for each job is heard by no receiver: the guard that
    # hides ratchet's tables from Flask-Migrate (flask_ratchet.migrate) is for `flask db`.
    receivers = ratchet.enqueue_now(context_receivers).id
    # A new interpreter, as in production: what the worker froze is all its own start's, with
    # no module imported before it (every other test forks its workers, tests/preloaded.py).
    proc = workers.start("--burst", fresh=True)
    assert proc.wait(timeout=120) == 0, workers.output(proc)
    assert job(job_id).result > 10_000
    assert job(receivers).result == 0


def test_outcomes_retries_and_dead_letters(app: Flask, workers: Workers) -> None:
    ok = ratchet.enqueue_now(record_run, 1).id
    third_time = ratchet.enqueue_now(fail_until, 3).id  # max_retries=2: runs 3 times, works
    never = ratchet.enqueue_now(fail_until, 9).id  # 3 runs, then the dead-letter queue
    refused = ratchet.enqueue_now(refuse, "card expired").id  # DoNotRetry in the cause chain
    progress = ratchet.enqueue_now(report, 5).id
    workers.start()
    wait_until(
        lambda: all(job(i).is_terminal for i in (ok, third_time, never, refused, progress)),
        what="every job to end",
    )
    assert job(ok).result == 1
    assert job(progress).result == "reported"
    assert job(progress).progress == Progress(5, 10, "half way")  # kept after the end
    assert job(ok).progress is None
    worked = job(third_time)
    assert (worked.status, worked.attempts, worked.result) == (
        JobStatus.SUCCEEDED,
        3,
        "worked on attempt 3",
    )
    dead = job(never)
    assert (dead.status, dead.attempts) == (JobStatus.FAILED, 3)
    assert dead.error == "ConnectionError: attempt 3 failed, password=***"
    assert job(refused).status == JobStatus.FAILED and job(refused).attempts == 1
    assert "RuntimeError: could not process" in (job(refused).error or "")
    executions = sa.text(
        "SELECT attempt, status, started_at, error, traceback FROM ratchet_execution "
        "WHERE job_id = :id ORDER BY attempt"
    )
    with db.engine.connect() as conn:
        key = stored_id(third_time, db.engine)
        runs = conn.execute(executions, {"id": key}).all()
        logs = conn.execute(
            sa.text("SELECT count(*) FROM ratchet_job_log WHERE job_id = :id"), {"id": key}
        ).scalar()
        alerts = conn.execute(sa.text("SELECT task FROM ratchet_dlq_alert ORDER BY task")).all()
    assert [(r.attempt, r.status) for r in runs] == [(1, "FAILED"), (2, "FAILED"), (3, "SUCCEEDED")]
    assert "hunter2" not in (runs[0].traceback or "") and "ConnectionError" in runs[0].traceback
    assert logs == 3  # one warning per attempt, stored with the attempt
    assert [a.task for a in alerts] == ["tests.apps:fail_until", "tests.apps:refuse"]


def test_backoff_is_measured_on_the_database_clock(app: Flask, workers: Workers) -> None:
    never = ratchet.enqueue(fail_until, 9).with_max_retries(1).with_backoff("FIXED", 2).submit().id
    workers.start()
    wait_until(lambda: status(never) == JobStatus.FAILED, what="the job to fail twice")
    with db.engine.connect() as conn:
        key = stored_id(never, db.engine)
        starts = (
            conn.execute(
                sa.text(
                    "SELECT started_at FROM ratchet_execution WHERE job_id = :id ORDER BY attempt"
                ),
                {"id": key},
            )
            .scalars()
            .all()
        )
    gap = (_as_datetime(starts[1]) - _as_datetime(starts[0])).total_seconds()
    assert 2.0 <= gap < 10, gap  # the retry was not due before its backoff ran out


def _as_datetime(value: object):  # type: ignore[no-untyped-def]
    from datetime import datetime

    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value))


def test_sigkill_mid_job_runs_it_again_elsewhere(
    app: Flask, workers: Workers, tmp_path: Path
) -> None:
    flag = tmp_path / "go"
    job_id = ratchet.enqueue(wait_for_file, str(flag)).submit().id
    first = workers.start(RATCHET_ORPHAN_GRACE=2, RATCHET_MAINTENANCE_INTERVAL=0.5)
    wait_until(lambda: "waiting for" in workers.output(first), what="the first worker to start it")
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    second = workers.start(RATCHET_ORPHAN_GRACE=2, RATCHET_MAINTENANCE_INTERVAL=0.5)
    wait_until(
        lambda: job(job_id).attempts == 2 and status(job_id) == JobStatus.RUNNING,
        what="orphan recovery to hand the job to the second worker",
    )
    flag.touch()
    wait_until(lambda: status(job_id) == JobStatus.SUCCEEDED, what="the second run to finish")
    assert job(job_id).result == second.pid
    assert "WorkerLost" not in (job(job_id).error or "")


def test_a_stalled_workers_late_completion_changes_nothing(
    app: Flask, workers: Workers, tmp_path: Path
) -> None:
    flag = tmp_path / "go"
    job_id = ratchet.enqueue(wait_for_file, str(flag)).submit().id
    config = {"RATCHET_ORPHAN_GRACE": 2, "RATCHET_MAINTENANCE_INTERVAL": 0.5}
    stalled = workers.start(**config)
    # Running its code, not only claimed: the job logs a line as it starts.
    wait_until(lambda: "waiting for" in workers.output(stalled), what="the first run to start")
    freeze(stalled, workers.url)  # no heartbeats, no completions: as if partitioned
    healthy = workers.start(**config)
    wait_until(lambda: job(job_id).attempts == 2, what="recovery to hand the job on")
    flag.touch()
    wait_until(lambda: status(job_id) == JobStatus.SUCCEEDED, what="the second run to finish")
    stalled.send_signal(signal.SIGCONT)  # it finishes its copy too, and tries to report it
    # It notices the job is no longer its own before writing (or the write's fence drops it).
    wait_until(lambda: "discarded" in workers.output(stalled), what="the late result's discard")
    assert job(job_id).result == healthy.pid  # the stalled worker's result was discarded
    assert job(job_id).status == JobStatus.SUCCEEDED


def freeze(proc: subprocess.Popen[bytes], url: str) -> None:
    """Stop ``proc`` (SIGSTOP) at a moment it holds no lock of the database.

    A process frozen inside a SQLite write transaction (its heartbeat's, say) keeps the whole
    file locked, and every other worker's writes fail with "database is locked": a frozen
    process on one host, not a partition. On SQLite it is thawed and stopped again until a
    write can begin; a server's row locks are not taken by a worker that only waits."""
    path = sa.make_url(url).database if url.startswith("sqlite") else None
    for _ in range(200):
        proc.send_signal(signal.SIGSTOP)
        if path is None:
            return
        probe = sqlite3.connect(path, timeout=0.2, isolation_level=None)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
            return
        except sqlite3.OperationalError:
            proc.send_signal(signal.SIGCONT)
            time.sleep(0.01)
        finally:
            probe.close()
    raise AssertionError("the worker held the SQLite file's lock at every try")


def test_sigterm_drains(app: Flask, workers: Workers) -> None:
    short = ratchet.enqueue_now(sleep_for, 0.5).id
    long = ratchet.enqueue_now(sleep_for, 60).id
    proc = workers.start("--drain-timeout", "2", "--concurrency", "2")
    wait_until(lambda: workers.output(proc).count("sleeping for") == 2, what="both to start")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0, workers.output(proc)
    assert status(short) == JobStatus.SUCCEEDED
    released = job(long)
    assert (released.status, released.attempts, released.picked_by) == (JobStatus.PENDING, 0, None)
    assert count("ratchet_node") == 0  # a clean stop removes the node's row


def test_timeouts_end_the_attempt(app: Flask, workers: Workers) -> None:
    job_id = ratchet.enqueue(never_returns).with_timeout(1).submit().id
    workers.start()
    wait_until(lambda: status(job_id) == JobStatus.FAILED, what="the timeout")
    assert (job(job_id).error or "").startswith("JobTimeout: ran longer than its timeout of 1s")


def test_cancel_while_running_stops_the_job_and_discards_its_result(
    app: Flask, workers: Workers, tmp_path: Path
) -> None:
    job_id = ratchet.enqueue(wait_for_file, str(tmp_path / "never")).submit().id
    proc = workers.start()
    wait_until(lambda: "waiting for" in workers.output(proc), what="the job to start")
    assert ratchet.cancel_job(job_id)
    wait_until(
        lambda: "canceled while running" in workers.output(proc), what="the worker to see it"
    )
    assert status(job_id) == JobStatus.CANCELED and job(job_id).result is None


def test_unknown_tasks_go_to_the_dead_letter_queue(app: Flask, workers: Workers) -> None:
    job_id = ratchet.enqueue_now(record_run, 1).id
    with db.engine.begin() as conn:
        key = stored_id(job_id, db.engine)
        conn.execute(
            sa.text("UPDATE ratchet_job SET task = 'gone.module:task' WHERE job_id = :id"),
            {"id": key},
        )
    # Handed back for a worker that knows the task, then dead-lettered once none ran it.
    proc = workers.start(RATCHET_UNKNOWN_TASK_GRACE=1)
    wait_until(lambda: status(job_id) == JobStatus.FAILED, what="the job to be refused")
    error = job(job_id).error or ""
    assert "UnknownTask: no worker ran task 'gone.module:task' within 1s" in error
    assert f":{proc.pid}: task 'gone.module:task' is not registered in this worker" in error
    assert job(job_id).attempts == 1


@pytest.mark.parametrize(
    "name",
    [
        "tests.apps:os.popen",  # through a module the allowed module imported
        "tests.apps:mapped_column",  # a function it imported from elsewhere
        "tests.apps:Order",  # a class
    ],
)
def test_the_allow_list_runs_only_functions_defined_in_the_module(
    app: Flask, workers: Workers, tmp_path: Path, name: str
) -> None:
    proof = tmp_path / "ran"
    job_id = ratchet.enqueue_now(record_run, 1).id
    with db.engine.begin() as conn:
        key = stored_id(job_id, db.engine)
        conn.execute(
            sa.text("UPDATE ratchet_job SET task = :task, payload = :payload WHERE job_id = :id"),
            {"task": name, "payload": f'{{"args":["touch {proof}"],"kwargs":{{}}}}', "id": key},
        )
    workers.start(RATCHET_ALLOWED_MODULES=["tests.apps"])
    wait_until(lambda: status(job_id) == JobStatus.FAILED, what="the job to be refused")
    assert "TaskNotAllowed" in (job(job_id).error or "")
    assert job(job_id).attempts == 1
    assert not proof.exists()
    assert count("run") == 0


def test_the_listen_connection_recovers(pg_url: str, tmp_path: Path) -> None:
    """PostgreSQL only: SQLite workers watch ``PRAGMA data_version`` instead."""
    truncate_all(pg_url)
    app = create_app(pg_url)
    pool = Workers(pg_url, tmp_path)
    try:
        with app.app_context():
            # Slow polling: a job that runs quickly afterwards was woken up, not found by a poll.
            pool.start(RATCHET_POLL_INTERVAL=20, RATCHET_POLL_MAX_INTERVAL=30)
            listener = (
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                "AND query LIKE 'LISTEN %'"
            )
            first = wait_until(lambda: scalar(listener), what="the LISTEN connection")
            scalar("SELECT pg_terminate_backend(:pid)", pid=first)
            second = wait_until(
                lambda: (p := scalar(listener)) != first and p,
                timeout=20,
                what="the LISTEN connection to come back",
            )
            assert second != first
            job_id = ratchet.enqueue_now(record_run, 1).id
            wait_until(
                lambda: status(job_id) == JobStatus.SUCCEEDED,
                timeout=10,
                what="the woken worker to run the job",
            )
            db.engine.dispose()
    finally:
        pool.stop_all()


def test_sigterm_hands_back_claimed_jobs_that_never_started(app: Flask, workers: Workers) -> None:
    running = ratchet.enqueue_now(sleep_for, 60).id
    waiting = ratchet.enqueue_now(sleep_for, 60).id  # claimed with it, waits for the one thread
    proc = workers.start("--drain-timeout", "1", "--concurrency", "1", "--prefetch", "1")
    wait_until(lambda: status(running) == status(waiting) == JobStatus.RUNNING, what="the claim")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0, workers.output(proc)
    for job_id in (running, waiting):
        released = job(job_id)
        assert (released.status, released.attempts) == (JobStatus.PENDING, 0)
    with db.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM ratchet_execution")).scalar() == 0


def test_errors_with_nul_characters_are_stored(app: Flask, workers: Workers) -> None:
    # PostgreSQL text cannot hold NUL: stored as U+FFFD, the outcome is written at once instead
    # of being refused by the database (and retried for ever).
    job_id = ratchet.enqueue_now(refuse, "bad\x00byte").id
    workers.start()
    wait_until(lambda: status(job_id) == JobStatus.FAILED, what="the job to fail")
    with db.engine.connect() as conn:
        trace = conn.execute(
            sa.text("SELECT traceback FROM ratchet_execution WHERE job_id = :id"),
            {"id": stored_id(job_id, db.engine)},
        ).scalar_one()
    assert "DoNotRetry: bad\ufffdbyte" in trace
