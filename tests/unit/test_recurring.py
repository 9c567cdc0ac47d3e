"""Misfire policies and the choice of fire times (pure), and the recurring config keys."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from flask_ratchet import Misfire
from flask_ratchet import recurring as recurring_module
from flask_ratchet.config import RatchetConfig
from flask_ratchet.cron import next_fire_times
from flask_ratchet.errors import ConfigError
from flask_ratchet.options import JobOptions
from flask_ratchet.recurring import (
    LATE_MAX,
    decode_options,
    encode_options,
    latest_at_or_before,
    misfire_policy,
    plan_fires,
)

HOURLY = "0 0 * * * ?"
EVERY_SECOND = "* * * * * ?"
MINUTE = timedelta(minutes=1)


def at(text: str) -> datetime:
    return datetime.fromisoformat(f"2026-01-01 {text}").replace(tzinfo=UTC)


def seconds(first: str, last: str) -> list[datetime]:
    start, end = at(first), at(last)
    return [start + timedelta(seconds=i) for i in range(int((end - start).total_seconds()) + 1)]


def test_misfire_policies_print_parse_and_compare() -> None:
    assert [str(p) for p in (Misfire.SKIP, Misfire.FIRE_ONCE, Misfire.catch_up(5))] == [
        "SKIP",
        "FIRE_ONCE",
        "CATCH_UP(5)",
    ]
    assert repr(Misfire.catch_up(5)) == "Misfire.catch_up(5)"
    assert repr(Misfire.SKIP) == "Misfire.SKIP"
    assert Misfire.catch_up(1) == Misfire.FIRE_ONCE
    for policy in (Misfire.SKIP, Misfire.FIRE_ONCE, Misfire.catch_up(11)):
        assert Misfire.parse(str(policy)) == policy
    assert misfire_policy("catch_up(3)") == Misfire.catch_up(3)
    assert misfire_policy("skip") == Misfire.SKIP


@pytest.mark.parametrize("bad", [0, -1, 1001, True, 2.5, "3"])
def test_catch_up_needs_a_sensible_count(bad: object) -> None:
    with pytest.raises(ValueError, match="catch_up"):
        Misfire.catch_up(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["SOMETIMES", "CATCH_UP()", 3, None])
def test_unknown_policies_are_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="misfire"):
        misfire_policy(bad)


def test_an_occurrence_on_time_fires() -> None:
    fires, upcoming = plan_fires(
        HOURLY, "UTC", at("10:00"), at("10:00:00.300"), Misfire.SKIP, MINUTE
    )
    assert (fires, upcoming) == ([at("10:00")], at("11:00"))


def test_nothing_is_due_before_next_fire() -> None:
    assert plan_fires(HOURLY, "UTC", at("11:00"), at("10:30"), Misfire.SKIP, MINUTE) == (
        [],
        at("11:00"),
    )


@pytest.mark.parametrize(
    ("policy", "fires"),
    [
        (Misfire.SKIP, []),
        (Misfire.FIRE_ONCE, ["10:00"]),
        (Misfire.catch_up(2), ["09:00", "10:00"]),
        (Misfire.catch_up(10), ["07:00", "08:00", "09:00", "10:00"]),
    ],
)
def test_policies_decide_among_misfired_occurrences(policy: Misfire, fires: list[str]) -> None:
    # Down from 06:30 to 10:30: 07:00, 08:00, 09:00 and 10:00 misfired (over a minute late).
    planned, upcoming = plan_fires(HOURLY, "UTC", at("07:00"), at("10:30"), policy, MINUTE)
    assert planned == [at(t) for t in fires]
    assert upcoming == at("11:00")


def test_a_single_misfired_occurrence_still_runs() -> None:
    fires, _ = plan_fires(HOURLY, "UTC", at("10:00"), at("10:30"), Misfire.SKIP, MINUTE)
    assert fires == [at("10:00")]


def test_late_occurrences_all_run_when_none_misfired() -> None:
    fires, upcoming = plan_fires(
        EVERY_SECOND, "UTC", at("10:00:00"), at("10:00:05.500"), Misfire.SKIP, MINUTE
    )
    assert fires == seconds("10:00:00", "10:00:05")
    assert upcoming == at("10:00:06")


@pytest.mark.parametrize(
    ("policy", "first"),
    [
        (Misfire.FIRE_ONCE, "10:00:05"),
        (Misfire.catch_up(2), "10:00:04"),
        (Misfire.catch_up(9), "10:00:00"),
    ],
)
def test_once_one_misfired_the_policy_decides_among_all_due(policy: Misfire, first: str) -> None:
    # A 2 s threshold at 10:00:05.5: 00-03 misfired, 04 and 05 are merely late, and all six are
    # one outage: the policy keeps the newest, whether late or misfired.
    fires, _ = plan_fires(
        EVERY_SECOND, "UTC", at("10:00:00"), at("10:00:05.500"), policy, timedelta(seconds=2)
    )
    assert fires == seconds(first, "10:00:05")


def test_skip_after_a_misfire_runs_none_of_the_due_occurrences() -> None:
    fires, upcoming = plan_fires(
        EVERY_SECOND, "UTC", at("10:00:00"), at("10:00:05.500"), Misfire.SKIP, timedelta(seconds=2)
    )
    assert (fires, upcoming) == ([], at("10:00:06"))


def test_an_outage_of_a_minute_makes_one_child_not_sixty() -> None:
    fires, _ = plan_fires(
        EVERY_SECOND, "UTC", at("10:00:00"), at("10:01:00.500"), Misfire.FIRE_ONCE, MINUTE
    )
    assert fires == [at("10:01:00")]


def test_a_long_threshold_caps_the_late_occurrences() -> None:
    # Nothing misfired (a day's threshold) but an hour of every-second occurrences is due.
    fires, _ = plan_fires(
        EVERY_SECOND, "UTC", at("10:00"), at("11:00"), Misfire.SKIP, timedelta(days=1)
    )
    assert len(fires) == LATE_MAX
    assert fires == [at("11:00") - timedelta(seconds=s) for s in range(LATE_MAX - 1, -1, -1)]


def test_occurrences_that_already_have_a_child_are_not_planned_again() -> None:
    # next_fire went back to 10:00 after the 10:00 and 11:00 children were made.
    due = (HOURLY, "UTC", at("10:00"), at("11:30"), Misfire.catch_up(5), timedelta(hours=5))
    assert plan_fires(*due, after=at("11:00")) == ([], at("12:00"))
    assert plan_fires(*due, after=at("10:00")) == ([at("11:00")], at("12:00"))
    assert plan_fires(*due, after=None) == ([at("10:00"), at("11:00")], at("12:00"))


def counting_cron(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the cron evaluations planning makes."""
    calls = [0]
    real = recurring_module.next_fire

    def counted(expr: str, zone: str, after: datetime) -> datetime | None:
        calls[0] += 1
        return real(expr, zone, after)

    monkeypatch.setattr(recurring_module, "next_fire", counted)
    return calls


@pytest.mark.parametrize(("policy", "runs"), [(Misfire.FIRE_ONCE, 1), (Misfire.catch_up(3), 3)])
def test_a_year_long_outage_is_planned_without_walking_every_occurrence(
    monkeypatch: pytest.MonkeyPatch, policy: Misfire, runs: int
) -> None:
    # A year of an every-second schedule: 31,536,000 occurrences.
    calls = counting_cron(monkeypatch)
    now = at("00:00") + timedelta(days=365, milliseconds=500)
    fires, upcoming = plan_fires(EVERY_SECOND, "UTC", at("00:00"), now, policy, MINUTE)
    assert fires == [now.replace(microsecond=0) - timedelta(seconds=s) for s in range(runs)][::-1]
    assert upcoming == now.replace(microsecond=0) + timedelta(seconds=1)
    assert calls[0] < 200


def test_the_newest_occurrence_is_found_by_bisection(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = counting_cron(monkeypatch)
    last = at("00:00") + timedelta(days=365, microseconds=1)
    assert latest_at_or_before("0 */15 * * * ?", "Europe/Berlin", at("00:00"), last) == at(
        "00:00"
    ) + timedelta(days=365)
    assert calls[0] < 200
    # And it agrees with walking, on schedules with gaps and DST.
    for cron, zone in [("0 30 2 * * ?", "America/New_York"), ("0 0 9 ? * MON-FRI", "UTC")]:
        times = next_fire_times(cron, zone, at("00:00"), 300)
        for i in (0, 1, 57, 120, 299):
            assert latest_at_or_before(cron, zone, times[0], times[i]) == times[i]
            nudged = times[i] + timedelta(seconds=1)
            assert latest_at_or_before(cron, zone, times[0], nudged) == times[i]


def test_a_schedule_that_ends() -> None:
    fires, upcoming = plan_fires(
        "0 0 0 1 1 ? 2026",
        "UTC",
        at("00:00"),
        at("00:00") + timedelta(days=150),
        Misfire.SKIP,
        MINUTE,
    )
    assert (fires, upcoming) == ([at("00:00")], None)


def test_recurring_config_keys() -> None:
    default = RatchetConfig.from_mapping({})
    assert (default.recurring_enabled, default.recurring_disabled) == (True, ())
    assert default.recurring_misfire_threshold == 60.0
    config = RatchetConfig.from_mapping(
        {
            "RATCHET_RECURRING_ENABLED": False,
            "RATCHET_RECURRING_DISABLED": ["b", "a"],
            "RATCHET_RECURRING_MISFIRE_THRESHOLD": timedelta(minutes=5),
        }
    )
    assert (config.recurring_enabled, config.recurring_disabled) == (False, ("a", "b"))
    assert config.recurring_misfire_threshold == 300.0


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("RATCHET_RECURRING_ENABLED", "yes"),
        ("RATCHET_RECURRING_ENABLED", None),
        ("RATCHET_RECURRING_DISABLED", "nightly"),
        ("RATCHET_RECURRING_DISABLED", [""]),
        ("RATCHET_RECURRING_MISFIRE_THRESHOLD", 0),
    ],
)
def test_bad_recurring_config_names_the_key(key: str, value: object) -> None:
    with pytest.raises(ConfigError, match=key):
        RatchetConfig.from_mapping({key: value})


def test_a_masters_options_keep_its_childrens_expiry_and_older_ones_have_none() -> None:
    options = JobOptions(queue="cron", expires=45.0)
    assert decode_options(encode_options(options)) == options
    before_expiry = (
        '{"backoff":"EXPONENTIAL","backoff_base":10.0,"max_retries":3,"params":{},'
        '"priority":2,"queue":"cron","resource":null,"tags":[],"timeout":null}'
    )
    assert decode_options(before_expiry) == JobOptions(queue="cron")
