"""Misfire policies and the choice of fire times (pure), and the recurring config keys."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from flask_ratchet import Misfire
from flask_ratchet.config import RatchetConfig
from flask_ratchet.errors import ConfigError
from flask_ratchet.recurring import misfire_policy, plan_fires

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


def test_late_occurrences_within_the_threshold_always_run() -> None:
    fires, upcoming = plan_fires(
        EVERY_SECOND, "UTC", at("10:00:00"), at("10:00:05.500"), Misfire.SKIP, MINUTE
    )
    assert fires == seconds("10:00:00", "10:00:05")
    assert upcoming == at("10:00:06")


@pytest.mark.parametrize(
    ("policy", "first"),
    [
        (Misfire.SKIP, "10:00:04"),
        (Misfire.FIRE_ONCE, "10:00:03"),
        (Misfire.catch_up(9), "10:00:00"),
    ],
)
def test_misfired_and_late_occurrences_together(policy: Misfire, first: str) -> None:
    # A 2 s threshold at 10:00:05.5: 00-03 misfired, 04 and 05 are merely late.
    fires, _ = plan_fires(
        EVERY_SECOND, "UTC", at("10:00:00"), at("10:00:05.500"), policy, timedelta(seconds=2)
    )
    assert fires == seconds(first, "10:00:05")


def test_a_long_outage_is_decided_without_walking_every_occurrence() -> None:
    # Two days of an every-second schedule: 172,800 occurrences.
    now = at("00:00") + timedelta(days=2)
    fires, upcoming = plan_fires(EVERY_SECOND, "UTC", at("00:00"), now, Misfire.catch_up(3), MINUTE)
    assert fires == [now - MINUTE - timedelta(seconds=s) for s in (2, 1, 0)] + [
        now - MINUTE + timedelta(seconds=s) for s in range(1, 61)
    ]
    assert upcoming == now + timedelta(seconds=1)


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
