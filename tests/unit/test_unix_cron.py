"""Unix cron: the 5-field dialect and its macros, beside Quartz.

Three independent checks: croniter itself on plain UTC schedules, a brute-force matcher written
here from the POSIX definition (every minute tested field by field), and fire times worked out by
hand (1 January 2026 is a Thursday).
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta

import pytest
from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st

from flask_ratchet.cron import (
    CronError,
    dialect,
    next_fire,
    next_fire_times,
    normalize,
    parse,
    validate,
)

BASE = datetime(2026, 1, 1, tzinfo=UTC)  # a Thursday


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


# -- croniter, on the expressions crontabs and Celery beat schedules are made of -------------------

COMMON = [
    "* * * * *",
    "*/5 * * * *",
    "0 * * * *",
    "15,45 9-17 * * MON-FRI",
    "0 0 * * 0",
    "0 0 * * 7",
    "30 4 1,15 * 5",  # the 1st, the 15th and every Friday
    "0 22 * * 1-5",
    "0 0 1 */3 *",
    "5 0 * 8 *",
    "0 12 29 2 *",
    "0-30/10 */6 * JAN,JUL *",
    "0 0 */2 * SUN",
]


@pytest.mark.parametrize("expr", COMMON)
def test_common_expressions_agree_with_croniter(expr: str) -> None:
    for base in (BASE, datetime(2027, 6, 15, 13, 47, 12, 500, tzinfo=UTC)):
        times = croniter(expr, base.replace(tzinfo=None))
        want = [times.get_next(datetime).replace(tzinfo=UTC) for _ in range(20)]
        assert next_fire_times(expr, "UTC", base, 20) == want


# -- a brute-force matcher from the POSIX definition -----------------------------------------------


def _expand(text: str, lo: int, hi: int) -> set[int]:
    out: set[int] = set()
    for item in text.split(","):
        base, _, step = item.partition("/")
        if base == "*":
            first, last = lo, hi
        elif "-" in base:
            first, last = (int(x) for x in base.split("-"))
        else:
            first = int(base)
            last = hi if step else first
        out.update(range(first, last + 1, int(step or 1)))
    return out


def posix_fires(expr: str, after: datetime) -> Iterator[datetime]:
    """Every minute after ``after`` (naive) that ``expr`` matches, by the POSIX rules: a day
    matches when both day fields do, or, when both are restricted (not ``*``), when either does;
    7 is Sunday as 0 is."""
    minute, hour, dom, month, dow = expr.split()
    minutes, hours = _expand(minute, 0, 59), _expand(hour, 0, 23)
    days, months = _expand(dom, 1, 31), _expand(month, 1, 12)
    weekdays = {d % 7 for d in _expand(dow, 0, 7)}
    day = after.date()
    for _ in range(366 * 8):
        sunday_zero = (day.weekday() + 1) % 7
        by_dom, by_dow = day.day in days, sunday_zero in weekdays
        either = dom != "*" and dow != "*"
        if day.month in months and ((by_dom or by_dow) if either else (by_dom and by_dow)):
            for h in sorted(hours):
                for m in sorted(minutes):
                    moment = datetime(day.year, day.month, day.day, h, m)
                    if moment > after:
                        yield moment
        day += timedelta(days=1)


def _item(lo: int, hi: int) -> st.SearchStrategy[str]:
    value = st.integers(lo, hi)
    ranges = st.tuples(value, value).map(lambda p: f"{min(p)}-{max(p)}")
    step = st.integers(1, hi - lo).map(str)
    return st.one_of(
        st.just("*"),
        value.map(str),
        ranges,
        st.tuples(st.just("*"), step).map("/".join),
        st.tuples(ranges, step).map("/".join),
    )


def _field(lo: int, hi: int) -> st.SearchStrategy[str]:
    # A list holding "*" is written as "*" alone: it means every value either way, and "*" alone
    # is what marks a day field as unrestricted.
    return (
        st.lists(_item(lo, hi), min_size=1, max_size=3)
        .map(",".join)
        .map(lambda items: "*" if "*" in items.split(",") else items)
    )


expressions = st.tuples(
    _field(0, 59), _field(0, 23), _field(1, 31), _field(1, 12), _field(0, 7)
).map(" ".join)


@settings(max_examples=300, deadline=None)
@given(expr=expressions, offset=st.integers(0, 3 * 365 * 24 * 60))
def test_random_expressions_agree_with_the_posix_definition(expr: str, offset: int) -> None:
    validate(expr)
    after = BASE + timedelta(minutes=offset, seconds=7)
    got = next_fire_times(expr, "UTC", after, 5)
    brute = posix_fires(expr, after.replace(tzinfo=None))
    want = [t.replace(tzinfo=UTC) for t, _ in zip(brute, range(5), strict=False)]
    assert got == want


# -- by hand ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("*/20 * * * *", ["2026-01-01 00:20", "2026-01-01 00:40", "2026-01-01 01:00"]),
        ("0 9 * * 1-5", ["2026-01-01 09:00", "2026-01-02 09:00", "2026-01-05 09:00"]),
        ("0 0 * * 0", ["2026-01-04 00:00", "2026-01-11 00:00", "2026-01-18 00:00"]),
        ("0 0 * * 7", ["2026-01-04 00:00", "2026-01-11 00:00", "2026-01-18 00:00"]),
        ("0 0 * * SUN", ["2026-01-04 00:00", "2026-01-11 00:00", "2026-01-18 00:00"]),
        # both day fields restricted: the 13th, and every Friday
        ("0 0 13 * FRI", ["2026-01-02 00:00", "2026-01-09 00:00", "2026-01-13 00:00"]),
        ("0 0 31 * *", ["2026-01-31 00:00", "2026-03-31 00:00", "2026-05-31 00:00"]),
        # one-value ranges (croniter 7.0 alone reads "5-5" as "*")
        ("0 5-5 * * *", ["2026-01-01 05:00", "2026-01-02 05:00", "2026-01-03 05:00"]),
        ("0 0 * * 3-3", ["2026-01-07 00:00", "2026-01-14 00:00", "2026-01-21 00:00"]),
    ],
)
def test_fire_times_worked_out_by_hand(expr: str, expected: list[str]) -> None:
    assert next_fire_times(expr, "UTC", BASE, len(expected)) == [utc(t) for t in expected]


MACROS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}


@pytest.mark.parametrize(("macro", "definition"), sorted(MACROS.items()))
@pytest.mark.parametrize("zone", ["UTC", "America/New_York", "Australia/Lord_Howe"])
def test_macros_are_their_definitions(macro: str, definition: str, zone: str) -> None:
    for after in (BASE, utc("2026-03-08 06:59:59"), utc("2026-10-31 23:30")):
        got = next_fire_times(macro, zone, after, 30)
        assert got == next_fire_times(definition, zone, after, 30)
        assert got == next_fire_times(macro.upper(), zone, after, 30)


def test_macros_fire_at_their_documented_times() -> None:
    assert next_fire("@hourly", "UTC", BASE) == utc("2026-01-01 01:00")
    assert next_fire("@daily", "UTC", BASE) == utc("2026-01-02 00:00")
    assert next_fire("@weekly", "UTC", BASE) == utc("2026-01-04 00:00")  # Sunday
    assert next_fire("@monthly", "UTC", BASE) == utc("2026-02-01 00:00")
    assert next_fire("@yearly", "UTC", BASE) == utc("2027-01-01 00:00")


# -- the same daylight-saving rules as Quartz ------------------------------------------------------


@pytest.mark.parametrize(
    ("unix", "quartz"),
    [
        ("30 2 * * *", "0 30 2 * * ?"),
        ("*/15 * * * *", "0 */15 * * * ?"),
        ("0 * * * *", "0 0 * * * ?"),
        ("0 1 * * SUN", "0 0 1 ? * SUN"),
    ],
)
@pytest.mark.parametrize(
    ("zone", "after"),
    [
        ("America/New_York", "2026-03-08 05:00"),  # spring forward at 07:00 UTC
        ("America/New_York", "2026-11-01 04:00"),  # fall back at 06:00 UTC
        ("Europe/Berlin", "2026-03-29 00:00"),
        ("Australia/Lord_Howe", "2026-04-04 14:00"),  # a half-hour change
    ],
)
def test_daylight_saving_rules_match_quartz(unix: str, quartz: str, zone: str, after: str) -> None:
    start = utc(after)
    assert next_fire_times(unix, zone, start, 12) == next_fire_times(quartz, zone, start, 12)


def test_a_gap_time_fires_after_the_gap_and_a_repeated_hour_fires_once() -> None:
    spring = utc("2026-03-08 06:00")  # 01:00 EST
    assert next_fire("30 2 * * *", "America/New_York", spring) == utc("2026-03-08 07:00")
    fall = utc("2026-11-01 04:30")  # 00:30 EDT
    assert next_fire_times("0 * * * *", "America/New_York", fall, 3) == [
        utc("2026-11-01 05:00"),  # 01:00 EDT
        utc("2026-11-01 07:00"),  # 02:00 EST: 01:00 EST is the same wall time again
        utc("2026-11-01 08:00"),
    ]


def test_a_schedule_that_never_fires_ends() -> None:
    assert next_fire("0 0 30 2 *", "UTC", BASE) is None
    assert next_fire_times("0 0 31 4,6,9,11 *", "Europe/Berlin", BASE, 3) == []


# -- dialects, bad input, storage ------------------------------------------------------------------


def test_the_number_of_fields_says_the_dialect() -> None:
    assert dialect("*/5 * * * *") == "unix"
    assert dialect(" @Daily ") == "unix"
    assert dialect("0 */5 * * * ?") == "quartz"
    assert dialect("0 0 12 * * ? 2030") == "quartz"
    with pytest.raises(CronError, match="has 4 fields: write Unix cron with 5"):
        dialect("* * * *")


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("60 * * * *", "minute field '60': 60 is out of range: use 0-59"),
        ("*/60 * * * *", "minute field '*/60': step '60' must be a number from 1 to 59"),
        ("*/0 * * * *", "minute field '*/0'"),
        ("0 24 * * *", "hour field '24'"),
        ("0 */24 * * *", "hour field '*/24'"),
        ("0 0 0 * *", "day-of-month field '0'"),
        ("0 0 32 * *", "day-of-month field '32'"),
        ("0 0 * 13 *", "month field '13'"),
        ("0 0 * FOO *", "month field 'FOO'"),
        ("0 0 * * 8", "day-of-week field '8': 8 is out of range: use 0-7 (0 or 7 = SUN, 6 = SAT)"),
        ("0 0 * * MON-FUN", "day-of-week field 'MON-FUN'"),
        ("5-1 * * * *", "minute field '5-1': the range '5-1' runs backwards"),
        ("0 0 * * FRI-MON", "day-of-week field 'FRI-MON': the range 'FRI-MON' runs backwards"),
        ("0 0 L * *", "day-of-month field 'L': '?', 'L', 'W' and '#' belong to Quartz cron"),
        ("0 0 15W * *", "day-of-month field '15W'"),
        ("0 0 ? * MON", "day-of-month field '?'"),
        ("0 0 * * 5#2", "day-of-week field '5#2'"),
        ("0 0 * * 5L", "day-of-week field '5L'"),
        ("H * * * *", "minute field 'H'"),
        ("0,,5 * * * *", "minute field '0,,5': empty list item"),
        ("\uff15 * * * *", "minute field '\uff15': use ASCII digits"),
        ("@reboot", "cron macro '@reboot' is not one of @hourly, @daily"),
        ("@hourly 5", "has 2 fields"),
        ("@every", "'@every' and one span"),
    ],
)
def test_bad_unix_expressions_name_the_field(expr: str, names: str) -> None:
    with pytest.raises(CronError, match=re.escape(names)):
        validate(expr)


def test_names_in_ranges_and_lists_are_not_mistaken_for_quartz_marks() -> None:
    validate("0 0 * JUL-DEC WED")  # JUL holds an L, WED a W
    validate("0 0 * * SAT,SUN")


def test_expressions_are_stored_normalised() -> None:
    assert normalize("  */5  *\t* * mon-fri ") == "*/5 * * * MON-FRI"
    assert normalize(" @Daily ") == "@daily"
    assert parse("@DAILY") == parse("@daily") == parse("0 0 * * *")


def test_every_day_of_a_year_is_matched_like_the_calendar() -> None:
    # Day-of-week 7 and 0 are both Sunday, for every day of a year.
    sundays = next_fire_times("0 0 * * 7", "UTC", BASE, 60)
    assert sundays == next_fire_times("0 0 * * 0", "UTC", BASE, 60)
    assert all(t.weekday() == calendar.SUNDAY for t in sundays)
    assert sundays[0].date() == date(2026, 1, 4)
