"""Recurring masters on SQLite and PostgreSQL: registration, firing, misfires and operations."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator
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
from flask_ratchet.store.types import FirePass
from flask_ratchet.worker.runner import Worker
from tests.apps import Run, add, create_app, db, new_year_2099, ratchet, record_context
from tests.conftest import truncate_all
from tests.integration.helpers import count, lock_waits

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
    runtime = ratchet.runtime
    config = dataclasses.replace(
        runtime.config, recurring_misfire_threshold=threshold, recurring_disabled=disabled
    )
    return RecurringFirer(runtime.store, runtime.engine, config, threading.Event())


def db_now() -> datetime:
    runtime = ratchet.runtime
    with runtime.engine.connect() as conn:
        return runtime.store.now(conn)


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
        ("0 0 2 * * * * *", "UTC", "has 8 fields"),
        ("0 0 L * *", "UTC", "belong to Quartz cron"),
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


def test_the_cron_is_stored_normalised(app: Flask) -> None:
    first = ratchet.schedule_recurring(" 0 0 12  1 * ? ", "UTC", add, 1, 2).submit()
    assert first.cron == MONTHLY
    again = ratchet.schedule_recurring(MONTHLY.lower(), "UTC", add, 1, 2).submit()
    assert again.updated_at == first.updated_at  # the same definition: not written


def test_the_builders_share_their_option_setters(app: Flask) -> None:
    recurring_builder = ratchet.schedule_recurring(MONTHLY, "UTC", add, 1, 2)
    job_builder = ratchet.enqueue(add, 1, 2)
    for builder in (recurring_builder, job_builder):
        same = (
            builder.with_priority(Priority.HIGH)
            .with_max_retries(2)
            .with_backoff("FIXED", 3)
            .with_timeout(9)
            .with_tags("a", "b")
            .with_param("k", 1)
            .with_resource("r")
        )
        assert same is builder
    assert type(recurring_builder.with_name("x")) is type(recurring_builder)
    made = recurring_builder.submit()
    job_builder.submit()
    assert made.options.tags == ("a", "b")
    assert (made.options.max_retries, made.options.timeout) == (2, 9)
    assert made.options.params == {"k": 1}
    assert made.options.resource == "r"


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


def test_a_unix_cron_master_fires_and_advances_like_a_quartz_one(app: Flask) -> None:
    m = ratchet.schedule_recurring("0 12 1 * *", "UTC", add, 1, 2).submit()
    assert m.cron == "0 12 1 * *"
    now = db_now()
    due = monthly_before(now, 0)  # the same instants as MONTHLY, in Unix cron
    set_next_fire(m.id, due)
    result = firer().fire_pass()
    assert [(f.recurring_id, f.fire_time) for f in result.fired] == [(m.id, due)]
    assert master(m.id).next_fire == next_fire(MONTHLY, "UTC", result.now)
    daily = ratchet.schedule_recurring(" @DAILY ", "Europe/Berlin", add, 1, 3)
    stored = daily.with_business_key("daily").submit()
    assert stored.cron == "@daily"
    assert stored.next_fire == next_fire("0 0 0 * * ?", "Europe/Berlin", db_now())


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


def two_masters() -> tuple[RecurringJob, RecurringJob, datetime]:
    """A good master, one called "bad" that a test breaks, and their newest due occurrence."""
    good = ratchet.schedule_recurring(MONTHLY, "UTC", add, 1, 2).submit()
    bad = ratchet.schedule_recurring(MONTHLY, "UTC", add, 3, 4).with_business_key("bad").submit()
    return good, bad, monthly_before(db_now(), 0)


def test_a_master_that_cannot_be_evaluated_is_paused_and_the_others_fire(
    app: Flask, caplog: pytest.LogCaptureFixture
) -> None:
    good, bad, due = two_masters()
    for m in (good, bad):
        set_next_fire(m.id, due)
    with db.engine.begin() as conn:  # e.g. written by another version, or a zone that went away
        conn.execute(
            sa.update(recurring).where(recurring.c.recurring_id == bad.id).values(zone="Nowhere/X")
        )
    mine = firer()
    assert [f.recurring_id for f in mine.fire_pass().fired] == [good.id]
    # Out of the due set in the same pass: no worker picks it up again and again.
    set_aside = master(bad.id)
    assert (set_aside.status, set_aside.next_fire) == (RecurringStatus.PAUSED, None)
    assert mine.step().next_due == master(good.id).next_fire
    assert mine.fire_pass().fired == []
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1
    assert "bad cannot be evaluated" in errors[0].getMessage()
    assert "Nowhere/X" in errors[0].getMessage()
    # Registered again with a valid definition and resumed, it fires again.
    ratchet.schedule_recurring(MONTHLY, "UTC", add, 3, 4).with_business_key("bad").submit()
    assert ratchet.resume_recurring(bad.id)
    assert master(bad.id).next_fire == next_fire(MONTHLY, "UTC", db_now())


def test_a_conflicting_child_does_not_stop_the_other_masters(
    app: Flask, caplog: pytest.LogCaptureFixture
) -> None:
    good, bad, due = two_masters()
    set_next_fire(bad.id, due)
    assert [f.recurring_id for f in firer().fire_pass().fired] == [bad.id]
    # Its next_fire and last_fire put back by hand: the due occurrence already has its child.
    with db.engine.begin() as conn:
        conn.execute(
            sa.update(recurring)
            .where(recurring.c.recurring_id.in_([good.id, bad.id]))
            .values(next_fire=due, last_fire=None)
        )
    result = firer().fire_pass()
    assert [(f.recurring_id, f.fire_time) for f in result.fired] == [(good.id, due)]
    assert children(bad.id) == [due]
    assert children(good.id) == [due]
    # The conflicting master moved on too: it does not come back at every pass.
    assert master(bad.id).next_fire == next_fire(MONTHLY, "UTC", result.now)
    assert firer().fire_pass().fired == []
    assert "bad: an occurrence" in caplog.text


def test_occurrences_up_to_last_fire_are_not_fired_again(app: Flask) -> None:
    m = ratchet.schedule_recurring(MONTHLY, "UTC", add, 1, 2).submit()
    due = monthly_before(db_now(), 0)
    set_next_fire(m.id, due)
    firer().fire_pass()
    set_next_fire(m.id, due)  # back to an occurrence at or before last_fire
    assert firer().fire_pass().fired == []
    assert children(m.id) == [due]
    assert master(m.id).next_fire == next_fire(MONTHLY, "UTC", db_now())


@pytest.fixture
def pg_app(pg_url: str) -> Iterator[Flask]:
    """The test app on the clean PostgreSQL database only."""
    truncate_all(pg_url)
    app = create_app(pg_url)
    with app.app_context():
        yield app
        db.session.remove()
        db.engine.dispose()


def test_a_registration_that_waited_for_a_firer_does_not_schedule_its_occurrence_again(
    pg_app: Flask,
) -> None:
    """PostgreSQL's now() is when the transaction began: the registration below reads it, waits
    for the firer's row lock, and must not put next_fire back to the occurrence just fired.
    (SQLite serialises whole write transactions: there a registration never waits.)"""
    runtime = ratchet.runtime
    m = ratchet.schedule_recurring("* * * * * ?", "UTC", add, 1, 2).submit()
    changed = ratchet.schedule_recurring("* * * * * ?", "Europe/Berlin", add, 1, 2).build()
    pinned, go = threading.Event(), threading.Event()
    began: list[datetime] = []
    registered: list[RecurringJob] = []
    errors: list[BaseException] = []

    def register() -> None:
        try:
            with pg_app.app_context(), runtime.store.begin(runtime.engine) as conn:
                began.append(runtime.store.now(conn))  # the transaction's clock from here on
                pinned.set()
                go.wait(30)
                registered.append(runtime.store.recurring.register(conn, changed)[0])
        except BaseException as exc:  # reported below
            errors.append(exc)

    registration = threading.Thread(target=register)
    registration.start()
    assert pinned.wait(30), errors
    occurrence = next_fire("* * * * * ?", "UTC", began[0])
    assert occurrence is not None
    set_next_fire(m.id, occurrence)
    poll_until(lambda: db_now() >= occurrence, "the occurrence after the registration began")
    with runtime.store.begin(runtime.engine) as conn:
        fired = runtime.store.recurring.fire_due(conn, timedelta(seconds=60)).fired
        assert [f.fire_time for f in fired] == [occurrence]
        go.set()
        poll_until(lambda: lock_waits(db.engine) == 1, "the registration to wait for the row")
    registration.join(30)
    assert errors == []
    assert registered[0].zone == "Europe/Berlin"
    assert registered[0].next_fire is not None and registered[0].next_fire > occurrence
    poll_until(lambda: db_now() >= registered[0].next_fire, "the next occurrence")
    fired_next = firer().fire_pass().fired  # before the fix: an IntegrityError
    assert fired_next[0].fire_time == registered[0].next_fire
    times = children(m.id)
    assert len(times) == len(set(times))


def poll_until(check: Callable[[], object], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_disabled_ids_do_not_fire(app: Flask) -> None:
    m = ratchet.schedule_recurring(MONTHLY, "UTC", add, 1, 2).submit()
    set_next_fire(m.id, monthly_before(db_now(), 0))
    assert firer(disabled=(m.id,)).fire_pass().fired == []
    assert children(m.id) == []
    assert len(firer().fire_pass().fired) == 1


def test_recurring_can_be_switched_off_for_a_whole_app(database_url: str) -> None:
    off = create_app(database_url, RATCHET_RECURRING_ENABLED=False)
    with off.app_context():
        runtime = off.extensions["ratchet"]
        assert start_recurring(off, runtime.store, runtime.engine, threading.Event()) is None
        db.engine.dispose()


def test_a_burst_worker_does_not_fire(app: Flask) -> None:
    runtime = ratchet.runtime
    stop = threading.Event()
    assert start_recurring(app, runtime.store, runtime.engine, stop, burst=True) is None
    assert count("ratchet_recurring") == 0  # nor registers


def test_one_failing_declared_job_does_not_keep_the_others_out(
    app: Flask, caplog: pytest.LogCaptureFixture
) -> None:
    runtime = ratchet.runtime
    broken = dataclasses.replace(
        ratchet.recurring_definitions["tests.new-year-2099"], id="tests.broken", zone="Nowhere/X"
    )
    ratchet.recurring_definitions[broken.id] = broken  # e.g. a zone this machine lacks
    stop = threading.Event()
    try:
        started = start_recurring(app, runtime.store, runtime.engine, stop)
        # Registered before start_recurring returned, i.e. before the worker says "started".
        assert ratchet.get_recurring("tests.new-year-2099") is not None
        assert ratchet.get_recurring(broken.id) is None
        assert "could not register recurring job tests.broken" in caplog.text
        # The firer runs regardless, and stops (and can be joined) when told to.
        assert started is not None
        m = ratchet.schedule_recurring(MONTHLY, "UTC", add, 1, 2).submit()
        set_next_fire(m.id, monthly_before(db_now(), 0))
        poll_until(lambda: children(m.id), "the firer to fire")
    finally:
        del ratchet.recurring_definitions[broken.id]
        stop.set()
    assert started is not None
    started.join(10)
    assert not started.is_alive()


def outage_engine(url: str) -> sa.Engine:
    """An engine that gives up on a lock after 0.1 s: a held lock makes every pass fail."""
    backend = sa.make_url(url).get_backend_name()
    if backend == "sqlite":
        return sa.create_engine(url, connect_args={"timeout": 0.1})
    if backend == "mariadb":  # a table lock is a metadata lock there: a second at least
        return sa.create_engine(
            url, connect_args={"init_command": "SET SESSION lock_wait_timeout = 1"}
        )
    return sa.create_engine(
        url,
        connect_args={"application_name": "ratchet-outage", "options": "-c lock_timeout=100"},
    )


class MasterTableLock:
    """A lock on the masters no firer gets past, held from creation until :meth:`release`."""

    def __init__(self, url: str) -> None:
        self._engine = sa.create_engine(url)
        self._conn: sa.Connection | None = self._engine.connect()
        if self._engine.dialect.name == "sqlite":
            self._conn.exec_driver_sql("BEGIN EXCLUSIVE")
        elif self._engine.dialect.name == "mariadb":
            self._conn.exec_driver_sql("LOCK TABLES ratchet_recurring WRITE")
        else:
            self._conn.exec_driver_sql("BEGIN")
            self._conn.exec_driver_sql("LOCK TABLE ratchet_recurring IN ACCESS EXCLUSIVE MODE")

    def release(self) -> None:
        """Roll back and close; a no-op the second time."""
        if self._conn is not None:
            if self._engine.dialect.name == "mariadb":
                self._conn.exec_driver_sql("UNLOCK TABLES")
            self._conn.exec_driver_sql("ROLLBACK")
            self._conn.close()
            self._conn = None
            self._engine.dispose()


def test_the_firer_survives_a_database_outage_and_logs_it_once(
    app: Flask, database_url: str, dialect: str, caplog: pytest.LogCaptureFixture
) -> None:
    runtime = ratchet.runtime
    engine = outage_engine(database_url)
    stop = threading.Event()
    mine = RecurringFirer(runtime.store, engine, runtime.config, stop)
    caplog.set_level(logging.INFO, logger="flask_ratchet.worker")
    m = ratchet.schedule_recurring(MONTHLY, "UTC", add, 1, 2).submit()
    set_next_fire(m.id, monthly_before(db_now(), 1))
    held = MasterTableLock(database_url)  # the database refuses the firer for a while
    try:
        mine.start()
        # Every pass fails while the lock is held: the first pass is a failed one.
        assert mine.passed.wait_for(1, timeout=30) and mine.failures >= 1
        if dialect == "postgresql":  # and its connections are cut
            with db.engine.connect() as conn:
                conn.execute(
                    sa.text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE application_name = 'ratchet-outage'"
                    )
                )
        assert mine.passed.wait_for(3, timeout=30) and mine.failures >= 3
        assert children(m.id) == []
        held.release()
        poll_until(lambda: children(m.id), "the firer to fire after the outage")
        assert mine.is_alive()
    finally:
        held.release()
        stop.set()
        mine.join(10)
        engine.dispose()
    assert not mine.is_alive()
    outage = [r for r in caplog.records if "recurring jobs: database error" in r.getMessage()]
    assert len(outage) == 1  # once, not at every failed pass
    assert outage[0].exc_info is None  # a line, not a traceback
    assert "the database is back" in caplog.text


def test_a_declared_job_taking_a_context_fires_and_runs(app: Flask) -> None:
    declared = "tests.every-second-context"
    ratchet.recurring("* * * * * ?", id=declared)(record_context)
    worker = Worker(app, concurrency=1)
    thread = threading.Thread(target=worker.run, name="test-worker")
    try:
        thread.start()
        assert worker.started.wait_for(timeout=30), "the worker did not start"
        assert ratchet.get_recurring(declared) is not None  # registered before "started"
        poll_until(lambda: ran_children(declared), "a child to run", timeout=30)
    finally:
        del ratchet.recurring_definitions[declared]
        worker.request_stop()
        thread.join(30)
    assert not thread.is_alive()
    assert worker.recurring is not None
    worker.recurring.join(10)  # it stopped firing when the worker began to drain
    assert not worker.recurring.is_alive()


def ran_children(recurring_id: str) -> list[str]:
    """Ids of the master's children that ran (recorded by their own JobContext)."""
    with db.engine.connect() as conn:
        made = {
            str(i)
            for i in conn.execute(
                sa.select(job.c.job_id).where(job.c.recurring_id == recurring_id)
            ).scalars()
        }
        ran = set(conn.execute(sa.select(Run.job_id)).scalars())
    return sorted(made & ran)


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
    assert preview.output.startswith("Quartz cron: second minute hour")
    unix = runner.invoke(args=["ratchet", "recurring", "preview", "@weekly", "-n", "2"])
    assert unix.exit_code == 0, unix.output
    lines = unix.output.splitlines()
    assert lines[0].startswith("Unix cron: minute hour day-of-month month day-of-week")
    assert len(lines) == 3 and all("T00:00:00+00:00  (" in line for line in lines[1:])
    bad = runner.invoke(args=["ratchet", "recurring", "preview", "0 0 2 ? * 8"])
    assert bad.exit_code != 0
    assert "day-of-week field '8'" in bad.output
