"""Recurring jobs fired by real ``flask ratchet worker`` processes on SQLite and PostgreSQL."""

from __future__ import annotations

import signal
import statistics
import subprocess
from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa
from flask import Flask

from flask_ratchet import Misfire
from flask_ratchet.schema import job
from tests.acceptance.conftest import PATIENT, Workers, wait_until
from tests.apps import db, ratchet, record_run
from tests.integration.helpers import count

EVERY_SECOND = "* * * * * ?"
SECOND = timedelta(seconds=1)


def children(recurring_id: str) -> list[tuple[datetime, datetime]]:
    """``(fire_time, created_at)`` of a master's children, by fire time."""
    with db.engine.connect() as conn:
        rows = conn.execute(
            sa.select(job.c.fire_time, job.c.created_at)
            .where(job.c.recurring_id == recurring_id)
            .order_by(job.c.fire_time)
        ).all()
    return [(r.fire_time, r.created_at) for r in rows]


def db_now() -> datetime:
    runtime = ratchet.runtime
    with runtime.engine.connect() as conn:
        return runtime.store.now(conn)


def stop(workers: Workers, procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        assert proc.wait(timeout=60) == 0, workers.output(proc)


def contiguous(times: list[datetime]) -> bool:
    return times == [times[0] + i * SECOND for i in range(len(times))]


@pytest.mark.slow
def test_three_workers_fire_every_second_exactly_once(
    app: Flask, workers: Workers, dialect: str
) -> None:
    master = (
        ratchet.schedule_recurring(EVERY_SECOND, "UTC", record_run, 7)
        .with_business_key("every-second")
        .submit()
    )
    assert master.next_fire is not None
    config = PATIENT if dialect == "sqlite" else {}
    procs = [workers.start("--concurrency", "2", **config) for _ in range(3)]
    wait_until(lambda: count("ratchet_node") == 3, what="three workers to start")
    # Declared masters are registered by the workers as they start.
    assert wait_until(lambda: ratchet.get_recurring("tests.new-year-2099"), what="registration")
    # Ten seconds with all three workers up.
    last = wait_until(lambda: children(master.id), what="the first children")[-1][0]
    wait_until(lambda: children(master.id)[-1][0] >= last + 10 * SECOND, what="ten seconds")
    stop(workers, procs)

    fired = children(master.id)
    times = [t for t, _ in fired]
    assert times[0] == master.next_fire  # none missing since registration
    assert contiguous(times), "exactly one child per second, none missing"
    assert len(times) >= 11
    # Once the workers are up, each child is created moments after its second.
    settled = [(created - t).total_seconds() for t, created in fired if t > last]
    assert statistics.median(settled) < 0.5, settled
    assert min(settled) >= 0
    # Each child ran at most once (those claimed before the stop ran to the end).
    runs = count("run")
    assert runs == sa_scalar("SELECT count(DISTINCT job_id) FROM run")
    assert runs >= len(times) // 2


def sa_scalar(sql: str) -> object:
    with db.engine.connect() as conn:
        return conn.execute(sa.text(sql)).scalar()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("policy", "missed_runs"), [(Misfire.SKIP, 0), (Misfire.FIRE_ONCE, 1), (Misfire.catch_up(2), 2)]
)
def test_restart_after_downtime_applies_the_misfire_policy(
    app: Flask, workers: Workers, dialect: str, policy: Misfire, missed_runs: int
) -> None:
    master = (
        ratchet.schedule_recurring(EVERY_SECOND, "UTC", record_run, 1)
        .with_business_key("misfire")
        .with_misfire_policy(policy)
        .submit()
    )
    # Two seconds: a busy machine may hold a scheduler pass back a second; a missed occurrence
    # then would be a misfire, and the skipped second would read as a gap after the restart.
    config = {"RATCHET_RECURRING_MISFIRE_THRESHOLD": 2} | (PATIENT if dialect == "sqlite" else {})
    first = workers.start(**config)
    wait_until(lambda: count("ratchet_node") == 1, what="the worker to start")
    wait_until(lambda: len(children(master.id)) >= 2, what="the first children")
    stop(workers, [first])
    before = children(master.id)
    assert before and contiguous([t for t, _ in before])
    last = before[-1][0]
    # Down for a while: several occurrences pass with no worker, more than the threshold ago.
    wait_until(lambda: db_now() > last + 6 * SECOND, what="downtime")
    proc = workers.start(**config)
    wait_until(lambda: count("ratchet_node") == 1, what="the worker to start again")
    wait_until(lambda: len(children(master.id)) >= len(before) + missed_runs + 3, what="restart")
    stop(workers, [proc])

    after = children(master.id)[len(before) :]
    # Several occurrences were due at the restart, some misfired: the policy decided among all
    # of them (the merely late ones too). The first pass wrote the newest ``missed_runs`` as one
    # batch; under SKIP it wrote none, and the first child is the next second's, on time.
    first_batch = [t for t, created in after if created == after[0][1]]
    assert len(first_batch) == max(missed_runs, 1)
    assert first_batch[0] > last + 2 * SECOND  # the older ones never ran
    assert contiguous([t for t, _ in after]), "then one child per second again"
