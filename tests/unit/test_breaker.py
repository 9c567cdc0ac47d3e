"""The circuit breaker's state machine, its presets and settings, and where tasks get one."""

from __future__ import annotations

import threading
from dataclasses import asdict
from datetime import timedelta
from typing import Any

import pytest

from flask_ratchet.breaker import (
    HALF_OPEN_BUSY_DELAY,
    PRESETS,
    Breakers,
    BreakerSettings,
    BreakerState,
    CircuitBreaker,
    breaker_settings,
)
from flask_ratchet.config import RatchetConfig
from flask_ratchet.errors import ConfigError
from flask_ratchet.options import JobOptions
from flask_ratchet.registry import TaskRegistry

SMALL = BreakerSettings(window=4, failure_rate=0.5, open_for=10.0, half_open_calls=2, min_calls=4)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def breaker(clock: Clock, settings: BreakerSettings = SMALL) -> CircuitBreaker:
    return CircuitBreaker(settings, clock, name="svc")


def call(b: CircuitBreaker, success: bool) -> BreakerState | None:
    """One call through the breaker, as the worker makes it."""
    assert b.allow() is None
    return b.record(success)


def trip(b: CircuitBreaker) -> None:
    for _ in range(b.settings.min_calls):
        call(b, False)
    assert b.state is BreakerState.OPEN


# -- CLOSED ------------------------------------------------------------------------------------


def test_a_new_breaker_is_closed_and_lets_calls_through(clock: Clock) -> None:
    b = breaker(clock)
    assert b.state is BreakerState.CLOSED
    assert b.allow() is None


def test_it_waits_for_min_calls_before_judging(clock: Clock) -> None:
    b = breaker(clock)
    for _ in range(3):
        assert call(b, False) is None  # three failures out of three, but fewer than min_calls
    assert b.state is BreakerState.CLOSED
    assert call(b, False) is BreakerState.OPEN


def test_it_opens_at_the_failure_rate_and_not_below(clock: Clock) -> None:
    b = breaker(clock)
    for success in (True, True, True, False):  # 1 of 4 failed: 25% < 50%
        call(b, success)
    assert b.state is BreakerState.CLOSED
    # The window holds the last 4 calls: T, T, F, F is exactly 50%.
    assert call(b, False) is BreakerState.OPEN


def test_old_outcomes_fall_out_of_the_window(clock: Clock) -> None:
    b = breaker(clock, BreakerSettings(4, 0.75, 10.0, 1, 4))
    for success in (False, False, True, True):  # 50% < 75%
        call(b, success)
    for _ in range(2):
        call(b, True)  # the two failures are out of the window now
    snap = b.snapshot()
    assert (snap.calls, snap.failures, snap.failure_rate) == (4, 0, 0.0)
    call(b, False)
    call(b, False)
    assert b.state is BreakerState.CLOSED  # T, T, F, F: 50%
    assert call(b, False) is BreakerState.OPEN  # T, F, F, F: 75%


def test_rates_that_are_not_exact_in_binary_still_open_on_the_boundary(clock: Clock) -> None:
    b = breaker(clock, BreakerSettings(10, 0.3, 10.0, 1, 10))
    for success in [False] * 3 + [True] * 6:
        call(b, success)
    assert call(b, True) is BreakerState.OPEN  # 3 of 10 is 0.3, not "less than 0.3 * 10"


# -- OPEN --------------------------------------------------------------------------------------


def test_an_open_breaker_defers_for_the_rest_of_its_open_window(clock: Clock) -> None:
    b = breaker(clock)
    trip(b)
    assert b.allow() == pytest.approx(10.0)
    clock.now += 4
    assert b.allow() == pytest.approx(6.0)
    assert b.state is BreakerState.OPEN
    snap = b.snapshot()
    assert (snap.state, snap.open_for_left, snap.times_opened) == (BreakerState.OPEN, 6.0, 1)


def test_outcomes_arriving_while_open_are_ignored(clock: Clock) -> None:
    b = breaker(clock)
    trip(b)
    # Calls let through before it opened finish now: they neither extend nor end the wait.
    assert b.record(True) is None
    assert b.record(False) is None
    assert b.allow() == pytest.approx(10.0)


# -- HALF_OPEN ---------------------------------------------------------------------------------


def test_after_the_wait_it_half_opens_and_admits_only_the_trial_calls(clock: Clock) -> None:
    b = breaker(clock)
    trip(b)
    clock.now += 10
    assert b.allow() is None  # the first trial
    assert b.state is BreakerState.HALF_OPEN
    assert b.allow() is None  # the second (half_open_calls=2)
    assert b.allow() == HALF_OPEN_BUSY_DELAY  # the rest wait for the trials
    assert b.snapshot().trials_running == 2


def test_the_busy_delay_is_never_longer_than_the_open_window(clock: Clock) -> None:
    b = breaker(clock, BreakerSettings(4, 0.5, 0.25, 1, 4))
    trip(b)
    clock.now += 0.25
    assert b.allow() is None
    assert b.allow() == 0.25


def test_all_trials_succeeding_closes_it(clock: Clock) -> None:
    b = breaker(clock)
    trip(b)
    clock.now += 10
    assert b.allow() is None
    assert b.allow() is None
    assert b.record(True) is None  # one of two
    assert b.state is BreakerState.HALF_OPEN
    assert b.allow() == HALF_OPEN_BUSY_DELAY  # one trial still out, one succeeded: enough
    assert b.record(True) is BreakerState.CLOSED
    assert b.allow() is None
    snap = b.snapshot()
    assert (snap.calls, snap.failures, snap.times_opened) == (0, 0, 1)  # a fresh window


def test_a_failing_trial_reopens_it_for_a_full_window(clock: Clock) -> None:
    b = breaker(clock)
    trip(b)
    clock.now += 10
    assert b.allow() is None
    assert b.allow() is None
    assert b.record(True) is None
    assert b.record(False) is BreakerState.OPEN
    assert b.allow() == pytest.approx(10.0)  # counted from the failed trial
    assert b.snapshot().times_opened == 2
    clock.now += 10
    assert call(b, True) is None
    assert call(b, True) is BreakerState.CLOSED


def test_an_abandoned_trial_frees_its_place(clock: Clock) -> None:
    b = breaker(clock, BreakerSettings(4, 0.5, 10.0, 1, 4))
    trip(b)
    clock.now += 10
    assert b.allow() is None
    assert b.allow() == HALF_OPEN_BUSY_DELAY
    b.abandon()  # e.g. its job found no resource permit: it never called the service
    assert b.allow() is None
    assert b.record(True) is BreakerState.CLOSED


def test_surplus_outcomes_in_half_open_are_not_counted_as_trials(clock: Clock) -> None:
    b = breaker(clock, BreakerSettings(4, 0.5, 10.0, 2, 4))
    trip(b)
    clock.now += 10
    assert b.allow() is None
    assert b.record(True) is None
    # A call from before the opening reports late: no trial is out, so it is not counted.
    assert b.record(True) is None
    assert b.state is BreakerState.HALF_OPEN
    assert b.snapshot().trials_succeeded == 1


def test_abandon_outside_half_open_changes_nothing(clock: Clock) -> None:
    b = breaker(clock)
    b.abandon()
    assert b.snapshot() == breaker(clock).snapshot()


def test_reset_closes_and_forgets(clock: Clock) -> None:
    b = breaker(clock)
    trip(b)
    b.reset()
    assert b.state is BreakerState.CLOSED
    assert b.allow() is None
    assert b.snapshot().times_opened == 0


def test_snapshots_are_plain_data(clock: Clock) -> None:
    b = breaker(clock)
    call(b, False)
    assert asdict(b.snapshot()) == {
        "state": "CLOSED",
        "calls": 1,
        "failures": 1,
        "failure_rate": 1.0,
        "open_for_left": 0.0,
        "trials_running": 0,
        "trials_succeeded": 0,
        "times_opened": 0,
    }


def test_it_is_thread_safe(clock: Clock) -> None:
    b = breaker(clock, BreakerSettings(1000, 1.0, 10.0, 1, 1000))
    barrier = threading.Barrier(8)

    def hammer() -> None:
        barrier.wait()
        for _ in range(125):
            call(b, False)

    threads = [threading.Thread(target=hammer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # 1000 failures, counted exactly once each: it opened on the last one, not before or never.
    assert b.state is BreakerState.OPEN
    assert b.snapshot().times_opened == 1


def test_trial_places_are_never_overbooked_under_contention(clock: Clock) -> None:
    b = breaker(clock, BreakerSettings(4, 0.5, 10.0, 3, 4))
    trip(b)
    clock.now += 10
    barrier = threading.Barrier(16)
    admitted: list[bool] = []

    def ask() -> None:
        barrier.wait()
        admitted.append(b.allow() is None)

    threads = [threading.Thread(target=ask) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert admitted.count(True) == 3


# -- settings and presets ----------------------------------------------------------------------


def test_the_presets_are_the_documented_four_and_valid() -> None:
    assert set(PRESETS) == {"default", "fast", "critical", "external-api"}
    for settings in PRESETS.values():
        assert settings.min_calls <= settings.window
    # They differ in what they are for: fast comes back soonest, external-api stays away longest.
    waits = {name: s.open_for for name, s in PRESETS.items()}
    assert min(waits, key=waits.__getitem__) == "fast"
    assert max(waits, key=waits.__getitem__) == "external-api"
    assert PRESETS["critical"].failure_rate > PRESETS["default"].failure_rate


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"window": 0}, "window"),
        ({"window": True}, "window"),
        ({"failure_rate": 0}, "failure_rate"),
        ({"failure_rate": 1.5}, "failure_rate"),
        ({"open_for": 0}, "open_for"),
        ({"open_for": float("inf")}, "open_for"),
        ({"open_for": "30"}, "open_for"),
        ({"half_open_calls": 0}, "half_open_calls"),
        ({"min_calls": 5}, "min_calls"),  # more than the window of 4
        ({"min_calls": 0}, "min_calls"),
    ],
)
def test_bad_settings_are_refused_naming_the_field(changes: dict[str, Any], field: str) -> None:
    values = asdict(SMALL) | changes
    with pytest.raises(ValueError, match=field):
        BreakerSettings(**values)


def test_settings_resolve_from_names_dicts_and_objects() -> None:
    assert breaker_settings("fast") is PRESETS["fast"]
    assert breaker_settings(SMALL) is SMALL
    tuned = breaker_settings({"preset": "fast", "open_for": timedelta(seconds=2), "window": 4,
                              "min_calls": 4})  # fmt: skip
    assert tuned == BreakerSettings(4, 0.5, 2.0, 1, 4)
    assert breaker_settings({"open_for": 1}).window == PRESETS["default"].window


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("slow", "unknown circuit breaker preset 'slow'; use one of 'default', 'fast'"),
        ({"preset": "nope"}, "unknown circuit breaker preset 'nope'"),
        ({"windows": 3}, "unknown circuit breaker setting 'windows'"),
        (42, "a preset name"),
        ({"window": 2}, "min_calls"),  # the default preset's min_calls no longer fits
    ],
)
def test_bad_breaker_specs_are_a_clear_value_error(spec: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        breaker_settings(spec)


# -- who gets a breaker ------------------------------------------------------------------------


def task_one() -> None: ...


def task_two() -> None: ...


def test_tasks_get_breakers_at_registration() -> None:
    registry = TaskRegistry()
    plain = registry.register(task_one, None, JobOptions())
    assert (plain.service_name, plain.circuit_breaker) == (plain.name, None)
    guarded = registry.register(
        task_two, "charge", JobOptions(), service="stripe", circuit_breaker="external-api"
    )
    assert guarded.service_name == "stripe"
    assert guarded.circuit_breaker is PRESETS["external-api"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"circuit_breaker": "sturdy"}, "use one of 'default', 'fast', 'critical', 'external-api'"),
        ({"circuit_breaker": {"open_for": -1}}, "open_for"),
        ({"service": ""}, "service must be"),
    ],
)
def test_a_bad_breaker_at_registration_registers_nothing(
    options: dict[str, Any], message: str
) -> None:
    registry = TaskRegistry()
    with pytest.raises(ValueError, match=message):
        registry.register(task_one, None, JobOptions(), **options)
    assert list(registry) == []


def test_breakers_are_made_per_service_and_shared(clock: Clock) -> None:
    breakers = Breakers(clock=clock)
    assert breakers.get("plain", None) is None  # no breaker anywhere: nothing is made
    one = breakers.get("stripe", SMALL)
    assert one is not None and one.name == "stripe"
    assert breakers.get("stripe", PRESETS["fast"]) is one  # the first settings stay
    assert breakers.get("other", SMALL) is not one
    assert list(breakers.snapshots()) == ["other", "stripe"]


def test_configured_breakers_take_precedence_and_reach_tasks_without_one(clock: Clock) -> None:
    breakers = Breakers({"tests:plain": SMALL, "stripe": PRESETS["fast"]}, clock=clock)
    plain = breakers.get("tests:plain", None)
    assert plain is not None and plain.settings is SMALL
    stripe = breakers.get("stripe", PRESETS["external-api"])
    assert stripe is not None and stripe.settings is PRESETS["fast"]
    assert breakers.get("unlisted", None) is None


# -- config ------------------------------------------------------------------------------------


def test_config_reads_breakers_by_service() -> None:
    config = RatchetConfig.from_mapping(
        {
            "RATCHET_CIRCUIT_BREAKERS": {
                "stripe": "external-api",
                "tests.apps:flaky": {"window": 4, "min_calls": 4, "open_for": 1.5},
            }
        }
    )
    assert config.circuit_breakers["stripe"] is PRESETS["external-api"]
    assert config.circuit_breakers["tests.apps:flaky"].open_for == 1.5
    assert RatchetConfig.from_mapping({}).circuit_breakers == {}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("external-api", "must be a dict"),
        ({"stripe": "sturdy"}, r"RATCHET_CIRCUIT_BREAKERS\['stripe'\]: unknown .* preset"),
        ({"stripe": {"failure_rate": 2}}, r"\['stripe'\]: failure_rate"),
        ({"": "fast"}, "keys must be service or task names"),
    ],
)
def test_bad_breaker_config_is_an_error_naming_the_key(value: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        RatchetConfig.from_mapping({"RATCHET_CIRCUIT_BREAKERS": value})


def test_an_outcome_from_before_the_opening_is_not_taken_for_a_trials(clock: Clock) -> None:
    b = breaker(clock)
    wait, slow = b.admit()  # a long call, let through while CLOSED
    assert wait is None
    trip(b)
    clock.now += 10
    wait, trial = b.admit()  # half-open: the first trial
    assert wait is None and trial != slow
    assert b.record(True, slow) is None  # the slow call returns: not a trial's outcome
    assert b.state is BreakerState.HALF_OPEN
    assert b.snapshot().trials_running == 1 and b.snapshot().trials_succeeded == 0
    assert b.record(False, trial) is BreakerState.OPEN  # the trial's failure counts
    b.abandon(trial)  # from an earlier state too: changes nothing
    assert b.state is BreakerState.OPEN
