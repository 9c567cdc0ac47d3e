"""Interval schedules (``@every 5s``, ``every=``): reading, the stored form, fire times, and
the misfire planning they share with cron.

Expected times are worked out by hand: an interval fires at multiples of its span since
1970-01-01 00:00 UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from flask_ratchet.api.recurring import schedule_of
from flask_ratchet.cron import (
    CronError,
    dialect,
    interval_expression,
    next_fire,
    next_fire_times,
    normalize,
    validate,
)
from flask_ratchet.recurring import Misfire, plan_fires

T = datetime(2026, 1, 1, 10, 0, 7, 250_000, tzinfo=UTC)


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("expr", "after", "expected"),
    [
        ("@every 5s", T, utc("2026-01-01 10:00:10")),
        ("@every 15m", T, utc("2026-01-01 10:15:00")),
        ("@every 1h", T, utc("2026-01-01 11:00:00")),
        ("@every 1d", T, utc("2026-01-02 00:00:00")),
        # 7 days since a Thursday (1970-01-01): every Thursday at midnight UTC.
        ("@every 7d", T, utc("2026-01-08 00:00:00")),
        # A day holds 16 spans of 90 minutes, so they fall at 09:00, 10:30, 12:00, …
        ("@every 1h30m", T, utc("2026-01-01 10:30:00")),
        # Strictly after: at a fire time, the next one.
        ("@every 5s", utc("2026-01-01 10:00:10"), utc("2026-01-01 10:00:15")),
        ("@every 1s", utc("1970-01-01 00:00:00"), utc("1970-01-01 00:00:01")),
        # Before the epoch too: multiples count both ways.
        ("@every 1h", utc("1969-12-31 22:10:00"), utc("1969-12-31 23:00:00")),
    ],
)
def test_an_interval_fires_at_multiples_of_its_span_since_the_epoch(
    expr: str, after: datetime, expected: datetime
) -> None:
    assert next_fire(expr, "UTC", after) == expected


def test_a_preview_steps_by_the_span() -> None:
    assert next_fire_times("@every 20s", "UTC", T, 4) == [
        utc("2026-01-01 10:00:20"),
        utc("2026-01-01 10:00:40"),
        utc("2026-01-01 10:01:00"),
        utc("2026-01-01 10:01:20"),
    ]


def test_the_end_of_time_ends_the_schedule() -> None:
    assert next_fire("@every 1d", "UTC", datetime(9999, 12, 31, 1, tzinfo=UTC)) is None


@pytest.mark.parametrize(
    ("written", "stored"),
    [
        ("@every 5s", "@every 5s"),
        ("  @EVERY   90S ", "@every 1m30s"),
        ("@every 3600s", "@every 1h"),
        ("@every 1d2h3m4s", "@every 1d2h3m4s"),
        ("@every 48h", "@every 2d"),
        ("@every 0h5m", "@every 5m"),
    ],
)
def test_an_interval_is_stored_in_one_form(written: str, stored: str) -> None:
    assert normalize(written) == stored
    assert dialect(written) == "interval"
    validate(written)


@pytest.mark.parametrize(
    ("every", "stored"),
    [
        (timedelta(seconds=5), "@every 5s"),
        (timedelta(hours=1, minutes=30), "@every 1h30m"),
        (timedelta(days=1), "@every 1d"),
        (90, "@every 1m30s"),
        (2.0, "@every 2s"),
    ],
)
def test_every_is_written_as_an_interval(every: timedelta | float, stored: str) -> None:
    assert interval_expression(every) == stored
    assert schedule_of(None, every) == stored
    if isinstance(every, timedelta):  # schedule_recurring takes one in place of the cron
        assert schedule_of(every) == stored


@pytest.mark.parametrize(
    ("expr", "words"),
    [
        ("@every", "one span"),
        ("@every 5s 10s", "one span"),
        ("@every 0s", "from 1 second"),
        ("@every 0d0h", "from 1 second"),
        ("@every 36501d", "from 1 second to 36500 days"),
        ("@every 1.5s", "whole days, hours, minutes and seconds"),
        ("@every 5", "whole days, hours, minutes and seconds"),
        ("@every 5x", "whole days, hours, minutes and seconds"),
        ("@every 1m1h", "largest first"),
        ("@every 1s1s", "each at most once"),
        ("@every -5s", "whole days"),
        ("@every \uff15s", "ASCII digits"),  # a full-width 5
    ],
)
def test_bad_intervals_are_refused_naming_the_fix(expr: str, words: str) -> None:
    with pytest.raises(CronError, match=words):
        validate(expr)


@pytest.mark.parametrize(
    "every",
    [
        timedelta(0),
        timedelta(seconds=-5),
        timedelta(milliseconds=1500),
        timedelta(days=36_501),
        0.5,
        float("nan"),
        float("inf"),
        True,
        "5s",
        None,
    ],
)
def test_bad_every_values_are_refused(every: object) -> None:
    with pytest.raises(CronError):
        interval_expression(every)  # type: ignore[arg-type]


def test_an_interval_runs_in_utc_only() -> None:
    validate("@every 1h", "UTC")
    with pytest.raises(CronError, match=r"elapsed time.*zone 'UTC', not 'Europe/Berlin'"):
        validate("@every 1h", "Europe/Berlin")


def test_one_schedule_is_given_not_both_nor_none() -> None:
    for cron, every in [(None, None), ("* * * * *", timedelta(seconds=5))]:
        with pytest.raises(CronError, match="one schedule"):
            schedule_of(cron, every)
    assert schedule_of("*/5 * * * *") == "*/5 * * * *"  # a cron expression is kept as written


def test_an_interval_master_after_an_outage_follows_the_misfire_policy() -> None:
    # Due since 09:00:00 every 5 seconds; the firer comes back at 10:00:07.25 (an hour late).
    first = utc("2026-01-01 09:00:00")
    threshold = timedelta(seconds=60)
    once, upcoming = plan_fires("@every 5s", "UTC", first, T, Misfire.FIRE_ONCE, threshold)
    assert once == [utc("2026-01-01 10:00:05")]
    assert upcoming == utc("2026-01-01 10:00:10")
    three, _ = plan_fires("@every 5s", "UTC", first, T, Misfire.catch_up(3), threshold)
    assert three == [
        utc("2026-01-01 09:59:55"),
        utc("2026-01-01 10:00:00"),
        utc("2026-01-01 10:00:05"),
    ]
    assert plan_fires("@every 5s", "UTC", first, T, Misfire.SKIP, threshold)[0] == []


def test_late_interval_occurrences_within_the_threshold_all_run() -> None:
    first = utc("2026-01-01 10:00:00")
    fires, upcoming = plan_fires("@every 2s", "UTC", first, T, Misfire.SKIP, timedelta(seconds=60))
    assert fires == [first + timedelta(seconds=s) for s in (0, 2, 4, 6)]
    assert upcoming == utc("2026-01-01 10:00:08")


def test_occurrences_up_to_the_last_fire_are_not_planned_again() -> None:
    first = utc("2026-01-01 10:00:00")
    fires, _ = plan_fires(
        "@every 2s", "UTC", first, T, Misfire.SKIP, timedelta(seconds=60), after=first
    )
    assert fires == [first + timedelta(seconds=s) for s in (2, 4, 6)]
