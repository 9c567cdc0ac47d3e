"""Interval schedules (``every=``) on every database: stored beside cron in one column, fired by
the same firer with the same once-only guarantee and misfire policies, run by a real worker."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from flask import Flask

from flask_ratchet import CronError, JobStatus, Misfire, RecurringStatus
from flask_ratchet.cron import next_fire
from flask_ratchet.maintenance.recurring import RecurringFirer
from flask_ratchet.worker.runner import Worker
from tests.apps import add, ratchet, record_context
from tests.integration.helpers import count
from tests.integration.test_recurring import (
    children,
    db_now,
    firer,
    master,
    poll_until,
    ran_children,
    set_next_fire,
)


def test_every_makes_a_master_whose_next_fire_is_the_next_multiple(app: Flask) -> None:
    before = db_now()
    m = ratchet.schedule_recurring(timedelta(seconds=5), "UTC", add, 1, 2).submit()
    after = db_now()
    assert m.cron == "@every 5s"
    assert m.status == RecurringStatus.ACTIVE
    # The next multiple of 5 s after the submission's time, which lies between the two reads
    # (a multiple may pass between them).
    earliest, latest = next_fire("@every 5s", "UTC", before), next_fire("@every 5s", "UTC", after)
    assert m.next_fire is not None and earliest <= m.next_fire <= latest
    assert m.next_fire is not None and m.next_fire.timestamp() % 5 == 0
    written = ratchet.schedule_recurring("@every 90s", "UTC", add, 1, 3)
    assert written.with_business_key("ninety").submit().cron == "@every 1m30s"


def test_a_declared_interval_registers_like_a_cron_master(app: Flask) -> None:
    ratchet.recurring(every=timedelta(minutes=15), id="quarter-hourly")(record_context)
    try:
        definition = ratchet.recurring_definitions["quarter-hourly"]
        assert (definition.cron, definition.zone) == ("@every 15m", "UTC")
        registered = {m.id: m for m in ratchet.register_recurring()}["quarter-hourly"]
    finally:
        del ratchet.recurring_definitions["quarter-hourly"]
    assert registered.cron == "@every 15m"
    assert registered.next_fire is not None
    assert registered.next_fire.timestamp() % 900 == 0


def test_bad_intervals_are_refused_before_anything_is_written(app: Flask) -> None:
    for cron, zone in [
        (timedelta(milliseconds=500), "UTC"),
        (timedelta(0), "UTC"),
        ("@every 5 s", "UTC"),
        (timedelta(hours=1), "Europe/Berlin"),
    ]:
        with pytest.raises(CronError):
            ratchet.schedule_recurring(cron, zone, add, 1, 2)
    with pytest.raises(CronError, match="one schedule"):
        ratchet.recurring("* * * * *", every=timedelta(seconds=5))
    with pytest.raises(CronError, match="one schedule"):
        ratchet.recurring()
    assert count("ratchet_recurring") == 0


def test_a_changed_interval_recomputes_next_fire(app: Flask) -> None:
    first = ratchet.schedule_recurring(timedelta(hours=1), "UTC", add, 1, 2).submit()
    same = ratchet.schedule_recurring(timedelta(minutes=60), "UTC", add, 1, 2).submit()
    assert same.updated_at == first.updated_at  # one definition: not written again
    changed = ratchet.schedule_recurring(timedelta(seconds=7), "UTC", add, 1, 2).submit()
    assert changed.cron == "@every 7s"
    assert changed.next_fire is not None and changed.next_fire.timestamp() % 7 == 0
    assert changed.next_fire <= db_now() + timedelta(seconds=7)  # from now, not from the hour


def test_a_due_interval_master_fires_one_child_and_advances(app: Flask) -> None:
    m = ratchet.schedule_recurring(timedelta(seconds=10), "UTC", add, 1, 2).submit()
    due = next_fire("@every 10s", "UTC", db_now() - timedelta(seconds=10))
    assert due is not None
    if due + timedelta(seconds=10) - db_now() < timedelta(seconds=5):
        # The next occurrence is near: one pass on a busy machine could see both due. Take the
        # next one, once it has come.
        due += timedelta(seconds=10)
        while db_now() < due:
            time.sleep(0.05)
    set_next_fire(m.id, due)
    result = firer().fire_pass()
    assert [(f.recurring_id, f.fire_time) for f in result.fired] == [(m.id, due)]
    child = ratchet.get_job(result.fired[0].job_id)
    assert child is not None and child.status == JobStatus.PENDING
    assert (child.task, child.args, child.recurring_id) == ("tests.apps:add", [1, 2], m.id)
    after = master(m.id)
    assert after.last_fire == due
    assert after.next_fire == next_fire("@every 10s", "UTC", result.now)


@pytest.mark.parametrize(
    ("policy", "runs"), [(Misfire.SKIP, 0), (Misfire.FIRE_ONCE, 1), (Misfire.catch_up(4), 4)]
)
def test_misfire_policies_after_downtime(app: Flask, policy: Misfire, runs: int) -> None:
    m = ratchet.schedule_recurring(timedelta(seconds=1), "UTC", add, 1, 2)
    m = m.with_misfire_policy(policy).submit()
    since = db_now().replace(microsecond=0) - timedelta(minutes=10)  # ten minutes without workers
    set_next_fire(m.id, since)
    result = firer(threshold=60).fire_pass()
    fired = children(m.id)
    assert len(fired) == runs
    newest = next_fire("@every 1s", "UTC", result.now - timedelta(seconds=1))
    assert fired == [newest - timedelta(seconds=runs - 1 - i) for i in range(runs)]  # type: ignore[operator]
    assert master(m.id).next_fire == next_fire("@every 1s", "UTC", result.now)


def test_two_firers_racing_create_each_child_once(app: Flask) -> None:
    m = ratchet.schedule_recurring(timedelta(seconds=1), "UTC", add, 1, 2).submit()
    start = db_now().replace(microsecond=0) - timedelta(seconds=3)
    set_next_fire(m.id, start)
    errors: list[BaseException] = []
    barrier = threading.Barrier(3)

    def fire(mine: RecurringFirer) -> None:
        try:
            barrier.wait()
            for _ in range(5):
                mine.fire_pass()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=fire, args=(firer(),)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    fired = children(m.id)
    assert fired == [start + timedelta(seconds=i) for i in range(len(fired))]  # none twice
    assert len(fired) >= 4


def test_a_declared_interval_fires_in_a_worker_and_its_children_run(app: Flask) -> None:
    declared = "tests.every-second-interval"
    ratchet.recurring(every=timedelta(seconds=1), id=declared)(record_context)
    worker = Worker(app, concurrency=1)
    thread = threading.Thread(target=worker.run, name="test-worker")
    try:
        thread.start()
        assert worker.started.wait_for(timeout=30), "the worker did not start"
        assert master(declared).cron == "@every 1s"
        poll_until(lambda: len(ran_children(declared)) >= 2, "two children to run", timeout=30)
    finally:
        del ratchet.recurring_definitions[declared]
        worker.request_stop()
        thread.join(30)
    assert not thread.is_alive()
    fired = [t for t in children(declared) if t is not None]
    assert len(fired) == len(set(fired)) >= 2
    assert all(t.microsecond == 0 for t in fired)  # whole seconds: multiples of the span


def test_the_cli_previews_an_interval(app: Flask) -> None:
    runner = app.test_cli_runner()
    preview = runner.invoke(args=["ratchet", "recurring", "preview", "@every 90s", "-n", "3"])
    assert preview.exit_code == 0, preview.output
    lines = preview.output.splitlines()
    assert lines[0].startswith("Interval: @every days hours minutes seconds")
    assert len(lines) == 4
    zoned = ["ratchet", "recurring", "preview", "@every 1h", "--zone", "Europe/Berlin"]
    refused = runner.invoke(args=zoned)
    assert refused.exit_code != 0
    assert "zone 'UTC'" in refused.output
