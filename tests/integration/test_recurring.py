"""Recurring masters on SQLite and PostgreSQL: registration, firing, misfires and operations."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from flask import Flask

from flask_ratchet import (
    CronError,
    JobStatus,
    Misfire,
    PayloadError,
    Priority,
    Ratchet,
    RecurringJob,
    RecurringStatus,
)
from flask_ratchet.cron import next_fire, next_fire_times
from flask_ratchet.ids import uuid7
from flask_ratchet.maintenance.recurring import RecurringFirer, start_recurring
from flask_ratchet.schema import job, recurring
from flask_ratchet.store.recurring import FirePass
from tests.apps import add, create_app, db, new_year_2099, ratchet
from tests.integration.helpers import count

MONTHLY = "0 0 12 1 * ?"  # noon UTC on the 1st of every month


def master(recurring_id: str) -> RecurringJob:
    found = ratchet.get_recurring(recurring_id)
    assert found is not None
    return found


def set_next_fire(recurring_id: str, when: datetime) -> None:
    """Pretend the workers were down since ``when``: the master's next occurrence is due then."""
    with db.engine.begin() as conn:
        conn.execute(
            sa.update(recurring)
            .where(recurring.c.recurring_id == recurring_id)
            .values(next_fire=when)
        )


def children(recurring_id: str) -> list[datetime | None]:
    """The fire times of a master's children, oldest first (run-now children last, as None)."""
    with db.engine.connect() as conn:
        rows = conn.execute(
            sa.select(job.c.fire_time).where(job.c.recurring_id == recurring_id)
        ).scalars()
        times = list(rows)
    return sorted(t for t in times if t is not None) + [t for t in times if t is None]


def firer(threshold: float = 60.0, disabled: tuple[str, ...] = ()) -> RecurringFirer:
    state = ratchet.state
    config = dataclasses.replace(
        state.config, recurring_misfire_threshold=threshold, recurring_disabled=disabled
    )
    return RecurringFirer(state.store, state.engine, config, threading.Event())


def db_now() -> datetime:
    state = ratchet.state
    with state.engine.connect() as conn:
        return state.store.now(conn)


def monthly_before(now: datetime, months: int) -> datetime:
    """The occurrence of MONTHLY ``months`` occurrences before the last one due at ``now``."""
    start = datetime(now.year - 1, now.month, 1, tzinfo=UTC)
    due = [t for t in next_fire_times(MONTHLY, "UTC", start, 30) if t <= now]
    return due[-1 - months]


# -- registration ----------------------------------------------------------------------------------


def test_schedule_recurring_creates_one_active_master(app: Flask) -> None:
    before = db_now()
    created = (
        ratchet.schedule_recurring("0 0 2 * * ?", "Europe/Berlin", add, 1, 2)
        .with_priority(Priority.HIGH)
        .with_max_retries(1)
        .with_tags("nightly")
        .with_business_key("nightly-add")
        .with_name("Nightly add")
        .with_misfire_policy(Misfire.SKIP)
        .submit()
    )
    assert created.id == "nightly-add"
    assert created.name == "Nightly add"
    assert created.status == RecurringStatus.ACTIVE
    assert created.task == "tests.apps:add"
    assert (created.args, created.kwargs) == ([1, 2], {})
    assert created.options.priority == Priority.HIGH
    assert created.options.tags == ("nightly",)
    assert created.misfire == Misfire.SKIP
    assert created.next_fire == next_fire("0 0 2 * * ?", "Europe/Berlin", before)
    assert ratchet.list_recurring() == [created]
    assert count("ratchet_job") == 0  # a master is not a job


def test_the_id_defaults_to_module_and_qualname(app: Flask) -> None:
    assert ratchet.schedule_recurring(MONTHLY, "UTC", add, 1, 1).submit().id == "tests.apps:add"


@pytest.mark.parametrize(
    ("cron", "zone", "names"),
    [
        ("0 0 2 * *", "UTC", "needs 6 or 7"),
        ("0 0 2 * * ? 1900", "UTC", "year field"),
        ("0 0 2 ? * 8", "UTC", "day-of-week field '8'"),
        ("0 0 2 * * MON", "UTC", "day-of-month and day-of-week"),
        ("0 0 2 * * ?", "Europe/Atlantis", "time zone 'Europe/Atlantis'"),
    ],
)
def test_bad_schedules_are_refused_and_nothing_is_written(
    app: Flask, cron: str, zone: str, names: str
) -> None:
    with pytest.raises(CronError, match=names):
        ratchet.schedule_recurring(cron, zone, add, 1, 2)
    with pytest.raises(ValueError, match=names):
        ratchet.recurring(cron, zone=zone)
    assert count("ratchet_recurring") == 0


def test_bad_arguments_and_options_are_refused_before_writing(app: Flask) -> None:
    with pytest.raises(PayloadError):
        ratchet.schedule_recurring(MONTHLY, "UTC", add, object(), 2)
    builder = ratchet.schedule_recurring(MONTHLY, "UTC", add, 1, 2)
    with pytest.raises(ValueError, match="priority"):
        builder.with_priority(9)
    with pytest.raises(ValueError, match="misfire"):
        builder.with_misfire_policy("SOMETIMES")
    with pytest.raises(ValueError, match="catch_up"):
        Misfire.catch_up(0)
    builder.submit()  # the builder is still good
    assert count("ratchet_recurring") == 1


def test_declared_functions_must_take_no_arguments() -> None:
    other = Ratchet()

    def takes_one(x: int) -> None: ...

    takes_one.__qualname__ = "takes_one"  # a module-level name, as if defined at the top
    with pytest.raises(TypeError, match="takes argument 'x'"):
        other.recurring("0 0 2 * * ?")(takes_one)
    assert other.recurring_definitions == {}


def test_same_definition_keeps_next_fire(app: Flask) -> None:
    first = ratchet.schedule_recurring(MONTHLY, "UTC", add, 1, 2).submit()
    earlier = datetime(2020, 1, 1, 12, tzinfo=UTC)
    set_next_fire(first.id, earlier)
    again = ratchet.schedule_recurring(MONTHLY, "UTC", add, 1, 2).submit()
    assert again.next_fire == earlier
    assert again.updated_at == first.updated_at  # not written at all


def test_changed_options_update_the_master_and_keep_next_fire(app: Flask) -> None:
    first = ratchet.schedule_recurring(MONTHLY, "UTC", add, 1, 2).submit()
    earlier = datetime(2020, 1, 1, 12, tzinfo=UTC)
    set_next_fire(first.id, earlier)
    changed = ratchet.schedule_recurring(MONTHLY, "UTC", add, 5, 6).with_max_retries(0).submit()
    assert changed.args == [5, 6]
    assert changed.options.max_retries == 0
    assert changed.next_fire == earlier  # the same schedule: its due occurrence still fires


@pytest.mark.parametrize(("cron", "zone"), [("0 0 3 * * ?", "UTC"), (MONTHLY, "America/New_York")])
def test_a_changed_cron_or_zone_recomputes_next_fire(app: Flask, cron: str, zone: str) -> None:
    first = ratchet.schedule_recurring(MONTHLY, "UTC", add, 1, 2).submit()
    set_next_fire(first.id, datetime(2020, 1, 1, 12, tzinfo=UTC))
    before = db_now()
    changed = ratchet.schedule_recurring(cron, zone, add, 1, 2).submit()
    assert (changed.cron, changed.zone) == (cron, zone)
    assert changed.next_fire == next_fire(cron, zone, before)
    assert ratchet.list_recurring() == [changed]


def test_many_registrations_at_once_make_one_master(app: Flask) -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def register() -> None:
        try:
            with app.app_context():
                barrier.wait()
                ratchet.schedule_recurring(MONTHLY, "UTC", add, 1, 2).submit()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=register) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert count("ratchet_recurring") == 1


def test_declared_masters_register_on_demand_not_at_init_app(app: Flask) -> None:
    assert count("ratchet_recurring") == 0  # init_app (and first use) wrote none
    (registered,) = ratchet.register_recurring()
    assert registered.id == "tests.new-year-2099"
    assert registered.task == "tests.apps:new_year_2099"
    assert registered.next_fire == datetime(2099, 1, 1, tzinfo=UTC)
    assert ratchet.register_recurring() == [registered]  # unchanged: not even updated_at
    assert new_year_2099.__name__ == "new_year_2099"  # the decorator returns the function


# -- firing ----------------------------------------------------------------------------------------


def test_a_due_master_fires_one_child_and_advances(app: Flask) -> None:
    m = ratchet.schedule_recurring(MONTHLY, "UTC", add, 1, 2).with_tags("monthly").submit()
    now = db_now()
    due = monthly_before(now, 0)
    set_next_fire(m.id, due)
    result = firer().fire_pass()
    assert [(f.recurring_id, f.fire_time) for f in result.fired] == [(m.id, due)]
    assert children(m.id) == [due]
    child = ratchet.get_job(result.fired[0].job_id)
    assert child is not None
    assert child.status == JobStatus.PENDING
    assert (child.task, child.args, child.tags) == ("tests.apps:add", [1, 2], ("monthly",))
    assert child.recurring_id == m.id
    after = master(m.id)
    assert after.last_fire == due
    assert after.next_fire is not None and after.next_fire > now
    assert after.next_fire == next_fire(MONTHLY, "UTC", result.now)
    assert firer().fire_pass().fired == []  # nothing is due any more


@pytest.mark.parametrize(
    ("policy", "runs"),
    [
        (Misfire.SKIP, 0),
        (Misfire.FIRE_ONCE, 1),
        (Misfire.catch_up(3), 3),
        (Misfire.catch_up(50), 7),
    ],
)
def test_misfire_policies_after_downtime(app: Flask, policy: Misfire, runs: int) -> None:
    m = ratchet.schedule_recurring(MONTHLY, "UTC", add, 1, 2).with_misfire_policy(policy).submit()
    now = db_now()
    set_next_fire(m.id, monthly_before(now, 6))  # seven occurrences missed
    firer().fire_pass()
    newest = [monthly_before(now, i) for i in range(6, -1, -1)][7 - runs :] if runs else []
    assert children(m.id) == newest
    assert master(m.id).next_fire == next_fire(MONTHLY, "UTC", db_now())


def test_a_single_due_occurrence_always_runs(app: Flask) -> None:
    m = ratchet.schedule_recurring(MONTHLY, "UTC", add, 1, 2).with_misfire_policy("skip").submit()
    due = monthly_before(db_now(), 0)  # days late: misfired, but alone
    set_next_fire(m.id, due)
    firer().fire_pass()
    assert children(m.id) == [due]


def test_late_occurrences_within_the_threshold_all_run(app: Flask) -> None:
    m = ratchet.schedule_recurring("* * * * * ?", "UTC", add, 1, 2)
    m = m.with_misfire_policy(Misfire.SKIP).submit()
    start = db_now().replace(microsecond=0) - timedelta(seconds=5)
    set_next_fire(m.id, start)
    result = firer(threshold=60).fire_pass()
    fired = children(m.id)
    assert fired[:5] == [start + timedelta(seconds=i) for i in range(5)]
    assert fired == [start + timedelta(seconds=i) for i in range(len(fired))]
    assert fired[-1] <= result.now < fired[-1] + timedelta(seconds=1)


def test_two_firers_racing_create_each_child_once(app: Flask) -> None:
    m = ratchet.schedule_recurring("* * * * * ?", "UTC", add, 1, 2).submit()
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


def test_the_database_refuses_a_second_child_for_one_occurrence(app: Flask) -> None:
    m = ratchet.schedule_recurring(MONTHLY, "UTC", add, 1, 2).submit()
    set_next_fire(m.id, monthly_before(db_now(), 0))
    (fired,) = firer().fire_pass().fired
    with pytest.raises(sa.exc.IntegrityError), db.engine.begin() as conn:
        row = conn.execute(sa.select(job).where(job.c.job_id == fired.job_id)).one()._asdict()
        conn.execute(sa.insert(job).values(row | {"job_id": uuid7()}))


def test_a_master_that_cannot_be_evaluated_does_not_stop_the_others(app: Flask) -> None:
    good = ratchet.schedule_recurring(MONTHLY, "UTC", add, 1, 2).submit()
    bad = ratchet.schedule_recurring(MONTHLY, "UTC", add, 3, 4).with_business_key("bad").submit()
    due = monthly_before(db_now(), 0)
    for m in (good, bad):
        set_next_fire(m.id, due)
    with db.engine.begin() as conn:  # e.g. written by another version, or a zone that went away
        conn.execute(
            sa.update(recurring).where(recurring.c.recurring_id == bad.id).values(zone="Nowhere/X")
        )
    assert [f.recurring_id for f in firer().fire_pass().fired] == [good.id]
    assert master(bad.id).next_fire == due  # untouched, and still listed


def test_disabled_ids_do_not_fire(app: Flask) -> None:
    m = ratchet.schedule_recurring(MONTHLY, "UTC", add, 1, 2).submit()
    set_next_fire(m.id, monthly_before(db_now(), 0))
    assert firer(disabled=(m.id,)).fire_pass().fired == []
    assert children(m.id) == []
    assert len(firer().fire_pass().fired) == 1


def test_recurring_can_be_switched_off_for_a_whole_app(database_url: str) -> None:
    off = create_app(database_url, RATCHET_RECURRING_ENABLED=False)
    with off.app_context():
        state = off.extensions["ratchet"]
        assert start_recurring(off, state.store, state.engine, threading.Event()) is None
        db.engine.dispose()


def test_the_firer_sleeps_until_the_next_occurrence_but_at_most_a_second() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    delay: Callable[[FirePass], float] = RecurringFirer._delay
    assert delay(FirePass(now, [], None)) == 1.0
    assert delay(FirePass(now, [], now + timedelta(milliseconds=300))) == pytest.approx(0.302)
    assert delay(FirePass(now, [], now + timedelta(hours=1))) == 1.0
    assert 0 < delay(FirePass(now, [], now)) < 0.1  # held by another node: look again soon


# -- operations ------------------------------------------------------------------------------------


def test_pause_resume_cancel(app: Flask) -> None:
    m = ratchet.schedule_recurring(MONTHLY, "UTC", add, 1, 2).submit()
    assert ratchet.resume_recurring(m.id) is False  # not paused
    assert ratchet.pause_recurring(m.id) is True
    assert ratchet.pause_recurring(m.id) is True  # already paused: a no-op that succeeds
    paused = master(m.id)
    assert (paused.status, paused.next_fire) == (RecurringStatus.PAUSED, None)
    assert firer().fire_pass().fired == []
    # Re-registering a paused master keeps it paused.
    assert ratchet.schedule_recurring(MONTHLY, "UTC", add, 1, 2).submit().status == "PAUSED"
    before = db_now()
    assert ratchet.resume_recurring(m.id) is True
    resumed = master(m.id)
    assert resumed.status == RecurringStatus.ACTIVE
    assert resumed.next_fire == next_fire(MONTHLY, "UTC", before)  # the paused time is not made up
    assert ratchet.cancel_recurring(m.id) is True
    assert ratchet.cancel_recurring(m.id) is False
    assert ratchet.pause_recurring(m.id) is False
    assert ratchet.resume_recurring(m.id) is False
    assert ratchet.run_recurring_now(m.id) is None
    assert ratchet.list_recurring() == []
    (canceled,) = ratchet.list_recurring(include_canceled=True)
    assert (canceled.status, canceled.next_fire) == (RecurringStatus.CANCELED, None)


def test_cancel_frees_the_id(app: Flask) -> None:
    m = ratchet.schedule_recurring(MONTHLY, "UTC", add, 1, 2).submit()
    assert ratchet.cancel_recurring(m.id)
    again = ratchet.schedule_recurring(MONTHLY, "UTC", add, 1, 2).submit()
    assert again.status == RecurringStatus.ACTIVE
    assert again.next_fire is not None
    assert count("ratchet_recurring") == 1


def test_run_now_adds_one_child_and_keeps_the_schedule(app: Flask) -> None:
    m = ratchet.schedule_recurring(MONTHLY, "UTC", add, 1, 2).submit()
    handle = ratchet.run_recurring_now(m.id)
    assert handle is not None
    child = ratchet.get_job(handle.id)
    assert child is not None
    assert (child.status, child.recurring_id, child.args) == (JobStatus.PENDING, m.id, [1, 2])
    assert children(m.id) == [None]  # outside the schedule: no fire time
    assert ratchet.run_recurring_now(m.id) is not None  # as often as asked
    assert master(m.id).next_fire == m.next_fire
    assert ratchet.pause_recurring(m.id)
    assert ratchet.run_recurring_now(m.id) is not None  # a paused master too
    assert count("ratchet_job") == 3


def test_unknown_ids(app: Flask) -> None:
    assert ratchet.pause_recurring("nope") is False
    assert ratchet.resume_recurring("nope") is False
    assert ratchet.cancel_recurring("nope") is False
    assert ratchet.run_recurring_now("nope") is None
    assert ratchet.get_recurring("nope") is None
    with pytest.raises(ValueError, match="id"):
        ratchet.pause_recurring("")


def test_operations_join_the_request_transaction(app: Flask) -> None:
    with app.test_request_context():
        ratchet.schedule_recurring(MONTHLY, "UTC", add, 1, 2).submit()
        db.session.rollback()
    assert count("ratchet_recurring") == 0


def test_the_recurring_commands(app: Flask) -> None:
    runner = app.test_cli_runner()
    assert "no recurring jobs" in runner.invoke(args=["ratchet", "recurring", "list"]).output
    registered = runner.invoke(args=["ratchet", "recurring", "register"])
    assert "tests.new-year-2099  ACTIVE" in registered.output
    listed = runner.invoke(args=["ratchet", "recurring", "list"]).output
    assert "tests.new-year-2099  ACTIVE    next 2099-01-01T00:00:00+00:00" in listed
    for verb in ("pause", "resume", "run-now", "cancel"):
        done = runner.invoke(args=["ratchet", "recurring", verb, "tests.new-year-2099"])
        assert done.exit_code == 0, done.output
    refused = runner.invoke(args=["ratchet", "recurring", "resume", "tests.new-year-2099"])
    assert refused.exit_code != 0
    assert "was not resumed" in refused.output
    preview = runner.invoke(
        args=["ratchet", "recurring", "preview", "0 30 2 * * ?", "--zone", "Europe/Berlin"]
    )
    assert preview.exit_code == 0
    assert preview.output.count("Europe/Berlin") == 5
    bad = runner.invoke(args=["ratchet", "recurring", "preview", "0 0 2 ? * 8"])
    assert bad.exit_code != 0
    assert "day-of-week field '8'" in bad.output
