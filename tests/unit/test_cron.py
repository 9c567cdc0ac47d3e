"""Quartz cron: a golden table, daylight saving time, and every kind of bad input.

The expected fire times below were worked out by hand from Quartz's documented semantics and the
calendar (1 January 2026 is a Thursday; 1 February and 1 March 2026 are Sundays, 1 April a
Wednesday, 1 May a Friday, 1 June a Monday, 1 August a Saturday, 1 November a Sunday), never by
running the code under test.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from croniter import croniter

from flask_ratchet.cron import CronError, next_fire, next_fire_times, normalize, parse, validate

BASE = datetime(2026, 1, 1, tzinfo=UTC)  # a Thursday, midnight UTC


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def at(time: str, *days: str) -> list[str]:
    """The same time of day on several days."""
    return [f"{d} {time}" for d in days]


# (expression, zone, the next fire times after BASE in UTC; five unless the schedule ends)
GOLDEN: list[tuple[str, str, list[str]]] = [
    # -- the seed page's examples --
    ("0 0 2 * * ?", "UTC", at("02:00", *(f"2026-01-0{d}" for d in range(1, 6)))),
    (
        "0 */15 * * * ?",
        "UTC",
        [
            "2026-01-01 00:15",
            "2026-01-01 00:30",
            "2026-01-01 00:45",
            "2026-01-01 01:00",
            "2026-01-01 01:15",
        ],
    ),
    (
        "0 0 9 ? * MON",
        "UTC",
        at("09:00", "2026-01-05", "2026-01-12", "2026-01-19", "2026-01-26", "2026-02-02"),
    ),
    # 00:00 on 1 January is BASE itself: not strictly after it.
    (
        "0 0 0 1 * ?",
        "UTC",
        at("00:00", "2026-02-01", "2026-03-01", "2026-04-01", "2026-05-01", "2026-06-01"),
    ),
    (
        "0 30 8 ? * MON-FRI",
        "UTC",
        at("08:30", "2026-01-01", "2026-01-02", "2026-01-05", "2026-01-06", "2026-01-07"),
    ),
    (
        "0 0 */4 * * ?",
        "UTC",
        [
            "2026-01-01 04:00",
            "2026-01-01 08:00",
            "2026-01-01 12:00",
            "2026-01-01 16:00",
            "2026-01-01 20:00",
        ],
    ),
    # -- seconds come first --
    ("* * * * * ?", "UTC", [f"2026-01-01 00:00:0{s}" for s in range(1, 6)]),
    ("0 * * * * ?", "UTC", [f"2026-01-01 00:0{m}:00" for m in range(1, 6)]),
    ("30 * * * * ?", "UTC", [f"2026-01-01 00:0{m}:30" for m in range(5)]),
    (
        "0/20 * * * * ?",
        "UTC",
        [
            "2026-01-01 00:00:20",
            "2026-01-01 00:00:40",
            "2026-01-01 00:01:00",
            "2026-01-01 00:01:20",
            "2026-01-01 00:01:40",
        ],
    ),
    (
        "5/20 * * * * ?",
        "UTC",
        [
            "2026-01-01 00:00:05",
            "2026-01-01 00:00:25",
            "2026-01-01 00:00:45",
            "2026-01-01 00:01:05",
            "2026-01-01 00:01:25",
        ],
    ),
    (
        "10-12 0 0 * * ?",
        "UTC",
        [
            "2026-01-01 00:00:10",
            "2026-01-01 00:00:11",
            "2026-01-01 00:00:12",
            "2026-01-02 00:00:10",
            "2026-01-02 00:00:11",
        ],
    ),
    ("59 59 23 31 12 ?", "UTC", at("23:59:59", *(f"{y}-12-31" for y in range(2026, 2031)))),
    # -- lists, ranges, steps --
    (
        "0 5,10,50 * * * ?",
        "UTC",
        [
            "2026-01-01 00:05",
            "2026-01-01 00:10",
            "2026-01-01 00:50",
            "2026-01-01 01:05",
            "2026-01-01 01:10",
        ],
    ),
    (
        "0 0 10-20/5 * * ?",
        "UTC",
        [
            "2026-01-01 10:00",
            "2026-01-01 15:00",
            "2026-01-01 20:00",
            "2026-01-02 10:00",
            "2026-01-02 15:00",
        ],
    ),
    (
        "0 0 22-2 * * ?",
        "UTC",
        [
            "2026-01-01 01:00",
            "2026-01-01 02:00",
            "2026-01-01 22:00",
            "2026-01-01 23:00",
            "2026-01-02 00:00",
        ],
    ),  # a range that wraps
    (
        "0 0 12 10,20 * ?",
        "UTC",
        at("12:00", "2026-01-10", "2026-01-20", "2026-02-10", "2026-02-20", "2026-03-10"),
    ),
    (
        "0 0 12 10-12 * ?",
        "UTC",
        at("12:00", "2026-01-10", "2026-01-11", "2026-01-12", "2026-02-10", "2026-02-11"),
    ),
    (
        "0 0 12 */10 * ?",
        "UTC",
        at("12:00", "2026-01-01", "2026-01-11", "2026-01-21", "2026-01-31", "2026-02-01"),
    ),  # 1, 11, 21, 31
    # -- day-of-week numbering: 1 = Sunday ... 7 = Saturday --
    (
        "0 0 12 ? * 1",
        "UTC",
        at("12:00", "2026-01-04", "2026-01-11", "2026-01-18", "2026-01-25", "2026-02-01"),
    ),
    (
        "0 0 12 ? * 7",
        "UTC",
        at("12:00", "2026-01-03", "2026-01-10", "2026-01-17", "2026-01-24", "2026-01-31"),
    ),
    (
        "0 0 12 ? * 2-6",
        "UTC",
        at("12:00", "2026-01-01", "2026-01-02", "2026-01-05", "2026-01-06", "2026-01-07"),
    ),  # Monday to Friday
    (
        "0 0 12 ? * SUN,SAT",
        "UTC",
        at("12:00", "2026-01-03", "2026-01-04", "2026-01-10", "2026-01-11", "2026-01-17"),
    ),
    (
        "0 0 0 ? * FRI-MON",
        "UTC",
        at("00:00", "2026-01-02", "2026-01-03", "2026-01-04", "2026-01-05", "2026-01-09"),
    ),  # wraps past Saturday
    (
        "0 0 0 ? * mon",
        "UTC",
        at("00:00", "2026-01-05", "2026-01-12", "2026-01-19", "2026-01-26", "2026-02-02"),
    ),  # names in any case
    # -- month names --
    (
        "0 0 0 ? JAN,JUL MON",
        "UTC",
        at("00:00", "2026-01-05", "2026-01-12", "2026-01-19", "2026-01-26", "2026-07-06"),
    ),
    (
        "0 0 0 1 JAN-MAR ?",
        "UTC",
        at("00:00", "2026-02-01", "2026-03-01", "2027-01-01", "2027-02-01", "2027-03-01"),
    ),
    (
        "0 0 0 29 2 ?",
        "UTC",
        at("00:00", "2028-02-29", "2032-02-29", "2036-02-29", "2040-02-29", "2044-02-29"),
    ),
    # -- L in day-of-month: the last day, and L-n --
    (
        "0 0 12 L * ?",
        "UTC",
        at("12:00", "2026-01-31", "2026-02-28", "2026-03-31", "2026-04-30", "2026-05-31"),
    ),
    (
        "0 0 12 L-3 * ?",
        "UTC",
        at("12:00", "2026-01-28", "2026-02-25", "2026-03-28", "2026-04-27", "2026-05-28"),
    ),
    # -- L-nW: the weekday nearest n days before the last (Quartz supports it) --
    (
        "0 0 12 L-3W * ?",
        "UTC",
        at("12:00", "2026-01-28", "2026-02-25", "2026-03-27", "2026-04-27", "2026-05-28"),
    ),  # 28 Mar is a Saturday
    (
        "0 0 12 L-1W * ?",
        "UTC",
        at("12:00", "2026-01-30", "2026-02-27", "2026-03-30", "2026-04-29", "2026-05-29"),
    ),  # 30 May is a Saturday
    # -- W: the nearest weekday, never leaving the month; LW: the last weekday --
    (
        "0 0 12 LW * ?",
        "UTC",
        at("12:00", "2026-01-30", "2026-02-27", "2026-03-31", "2026-04-30", "2026-05-29"),
    ),  # 31 Jan Sat, 28 Feb Sat, 31 May Sun
    (
        "0 0 12 15W * ?",
        "UTC",
        at("12:00", "2026-01-15", "2026-02-16", "2026-03-16", "2026-04-15", "2026-05-15"),
    ),  # 15 Feb and 15 Mar are Sundays
    (
        "0 0 12 1W * ?",
        "UTC",
        at("12:00", "2026-01-01", "2026-02-02", "2026-03-02", "2026-04-01", "2026-05-01"),
    ),  # a Sunday 1st moves to the 2nd
    (
        "0 0 12 1W 8 ?",
        "UTC",
        at("12:00", "2026-08-03", "2027-08-02", "2028-08-01", "2029-08-01", "2030-08-01"),
    ),  # Saturday 1st: Monday the 3rd
    (
        "0 0 12 31W * ?",
        "UTC",
        at("12:00", "2026-01-30", "2026-03-31", "2026-05-29", "2026-07-31", "2026-08-31"),
    ),  # Sunday 31 May: Friday 29th
    # -- L in day-of-week: L alone is Saturday; 6L the last Friday --
    (
        "0 0 12 ? * L",
        "UTC",
        at("12:00", "2026-01-03", "2026-01-10", "2026-01-17", "2026-01-24", "2026-01-31"),
    ),
    (
        "0 0 12 ? * 6L",
        "UTC",
        at("12:00", "2026-01-30", "2026-02-27", "2026-03-27", "2026-04-24", "2026-05-29"),
    ),
    (
        "0 0 12 ? * FRIL",
        "UTC",
        at("12:00", "2026-01-30", "2026-02-27", "2026-03-27", "2026-04-24", "2026-05-29"),
    ),
    (
        "0 0 12 ? * 2L",
        "UTC",
        at("12:00", "2026-01-26", "2026-02-23", "2026-03-30", "2026-04-27", "2026-05-25"),
    ),
    # -- #: the n-th weekday of the month --
    (
        "0 0 12 ? * 6#3",
        "UTC",
        at("12:00", "2026-01-16", "2026-02-20", "2026-03-20", "2026-04-17", "2026-05-15"),
    ),
    (
        "0 0 10 ? * 2#1",
        "UTC",
        at("10:00", "2026-01-05", "2026-02-02", "2026-03-02", "2026-04-06", "2026-05-04"),
    ),
    (
        "0 0 10 ? * MON#5",
        "UTC",
        at("10:00", "2026-03-30", "2026-06-29", "2026-08-31", "2026-11-30", "2027-03-29"),
    ),  # months without one: no fire
    (
        "0 0 12 ? * 1#5",
        "UTC",
        at("12:00", "2026-03-29", "2026-05-31", "2026-08-30", "2026-11-29", "2027-01-31"),
    ),
    (
        "0 0 0 ? 2 6#4",
        "UTC",
        at("00:00", "2026-02-27", "2027-02-26", "2028-02-25", "2029-02-23", "2030-02-22"),
    ),
    # -- the year field --
    ("0 0 0 1 1 ? 2030", "UTC", ["2030-01-01 00:00"]),
    ("0 0 0 1 1 ? 2028-2030", "UTC", at("00:00", "2028-01-01", "2029-01-01", "2030-01-01")),
    ("0 0 0 1 1 ? 2027/2", "UTC", at("00:00", *(f"{y}-01-01" for y in range(2027, 2036, 2)))),
    (
        "0 15 10 ? * 6L 2026-2027",
        "UTC",
        at("10:15", "2026-01-30", "2026-02-27", "2026-03-27", "2026-04-24", "2026-05-29"),
    ),
    ("0 0 0 1 1 ? 2020", "UTC", []),  # its year is over
    ("0 0 0 30 2 ?", "UTC", []),  # 30 February never comes
    # -- zones --
    (
        "0 0 9 ? * MON",
        "Europe/Berlin",
        at("08:00", "2026-01-05", "2026-01-12", "2026-01-19", "2026-01-26", "2026-02-02"),
    ),
    (
        "0 0 0 * * ?",
        "Asia/Kolkata",
        at("18:30", "2026-01-01", "2026-01-02", "2026-01-03", "2026-01-04", "2026-01-05"),
    ),  # UTC+05:30
]


@pytest.mark.parametrize(("expr", "zone", "expected"), GOLDEN, ids=[g[0] for g in GOLDEN])
def test_golden_table(expr: str, zone: str, expected: list[str]) -> None:
    validate(expr, zone)
    assert next_fire_times(expr, zone, BASE, 5) == [utc(t) for t in expected]


def test_the_golden_table_is_big_enough() -> None:
    assert len(GOLDEN) >= 40


# Plain expressions croniter understands once translated: seconds last, 0 = Sunday, no '?'.
PLAIN = [
    expr
    for expr, zone, expected in GOLDEN
    if zone == "UTC"
    and len(expr.split()) == 6
    and len(expected) == 5
    and not any(c in expr for c in "LW#")
]


def as_croniter(expr: str) -> str:
    second, minute, hour, dom, month, dow = expr.replace("?", "*").split()
    if dow[0].isdigit():
        dow = "-".join(str(int(d) - 1) for d in dow.split("-"))
    return f"{minute} {hour} {dom} {month} {dow} {second}"


@pytest.mark.parametrize("expr", PLAIN)
def test_plain_expressions_agree_with_croniter(expr: str) -> None:
    for base in (BASE, datetime(2027, 6, 15, 13, 47, 12, 500, tzinfo=UTC)):
        expected = croniter(as_croniter(expr), base.replace(tzinfo=None))
        want = [expected.get_next(datetime).replace(tzinfo=UTC) for _ in range(20)]
        assert next_fire_times(expr, "UTC", base, 20) == want


def test_next_fire_is_strictly_after_and_in_utc() -> None:
    at_noon = datetime(2026, 1, 1, 12, tzinfo=UTC)
    assert next_fire("0 0 12 * * ?", "UTC", at_noon) == utc("2026-01-02 12:00")
    assert next_fire("0 0 12 * * ?", "UTC", at_noon - timedelta(microseconds=1)) == at_noon
    berlin_noon = next_fire("0 0 12 * * ?", "Europe/Berlin", BASE)
    assert berlin_noon == utc("2026-01-01 11:00")
    assert berlin_noon is not None and berlin_noon.tzinfo is UTC


# -- daylight saving time --------------------------------------------------------------------------
# America/New_York 2026: 02:00 EST -> 03:00 EDT on 8 March (07:00 UTC);
#                        02:00 EDT -> 01:00 EST on 1 November (06:00 UTC).
# Europe/Berlin 2026:    02:00 CET -> 03:00 CEST on 29 March (01:00 UTC);
#                        03:00 CEST -> 02:00 CET on 25 October (01:00 UTC).

DST: list[tuple[str, str, str, list[str]]] = [
    # A daily time in the spring-forward gap runs once that day, right after the gap.
    (
        "0 30 2 * * ?",
        "America/New_York",
        "2026-03-07 00:00",
        ["2026-03-07 07:30", "2026-03-08 07:00", "2026-03-09 06:30", "2026-03-10 06:30"],
    ),
    (
        "0 30 2 * * ?",
        "Europe/Berlin",
        "2026-03-28 00:00",
        ["2026-03-28 01:30", "2026-03-29 01:00", "2026-03-30 00:30", "2026-03-31 00:30"],
    ),
    # A daily time that occurs twice runs once, at its first occurrence.
    (
        "0 30 1 * * ?",
        "America/New_York",
        "2026-10-31 00:00",
        ["2026-10-31 05:30", "2026-11-01 05:30", "2026-11-02 06:30"],
    ),
    (
        "0 30 2 * * ?",
        "Europe/Berlin",
        "2026-10-24 00:00",
        ["2026-10-24 00:30", "2026-10-25 00:30", "2026-10-26 01:30"],
    ),
    # New York's 02:30 exists once on the fall-back day (after the repeated hour).
    (
        "0 30 2 * * ?",
        "America/New_York",
        "2026-10-31 00:00",
        ["2026-10-31 06:30", "2026-11-01 07:30", "2026-11-02 07:30"],
    ),
    # Hourly: the missing 02:00 merges into 03:00; the repeated 01:00 runs once.
    (
        "0 0 * * * ?",
        "America/New_York",
        "2026-03-08 05:00",
        ["2026-03-08 06:00", "2026-03-08 07:00", "2026-03-08 08:00"],
    ),
    (
        "0 0 * * * ?",
        "America/New_York",
        "2026-11-01 04:00",
        ["2026-11-01 05:00", "2026-11-01 07:00", "2026-11-01 08:00"],
    ),
    (
        "0 0 * * * ?",
        "America/New_York",
        "2026-11-01 06:30",  # inside the repeated hour
        ["2026-11-01 07:00", "2026-11-01 08:00"],
    ),
    (
        "0 0 * * * ?",
        "Europe/Berlin",
        "2026-03-29 00:00",
        ["2026-03-29 01:00", "2026-03-29 02:00", "2026-03-29 03:00"],
    ),
    (
        "0 0 * * * ?",
        "Europe/Berlin",
        "2026-10-24 23:00",
        ["2026-10-25 00:00", "2026-10-25 02:00", "2026-10-25 03:00"],
    ),
    # Every 15 minutes: the gap's four times are one fire at 03:00; the repeated hour is quiet.
    (
        "0 */15 * * * ?",
        "America/New_York",
        "2026-03-08 06:30",
        ["2026-03-08 06:45", "2026-03-08 07:00", "2026-03-08 07:15", "2026-03-08 07:30"],
    ),
    (
        "0 */15 * * * ?",
        "America/New_York",
        "2026-11-01 05:30",
        ["2026-11-01 05:45", "2026-11-01 07:00", "2026-11-01 07:15"],
    ),
    (
        "0 */15 * * * ?",
        "Europe/Berlin",
        "2026-03-29 00:30",
        ["2026-03-29 00:45", "2026-03-29 01:00", "2026-03-29 01:15"],
    ),
    (
        "0 */15 * * * ?",
        "Europe/Berlin",
        "2026-10-25 00:30",
        ["2026-10-25 00:45", "2026-10-25 02:00", "2026-10-25 02:15"],
    ),
]


@pytest.mark.parametrize(("expr", "zone", "after", "expected"), DST)
def test_daylight_saving_transitions(expr: str, zone: str, after: str, expected: list[str]) -> None:
    assert next_fire_times(expr, zone, utc(after), len(expected)) == [utc(t) for t in expected]


@pytest.mark.parametrize(
    ("zone", "midnight", "next_midnight", "fires"),
    [
        # 96 quarter hours a day; the spring-forward day loses 02:00-02:45 to one fire at 03:00
        ("America/New_York", "2026-03-08 05:00", "2026-03-09 04:00", 92),
        ("America/New_York", "2026-11-01 04:00", "2026-11-02 05:00", 96),  # a 25-hour day
        ("Europe/Berlin", "2026-03-28 23:00", "2026-03-29 22:00", 92),
        ("Europe/Berlin", "2026-10-24 22:00", "2026-10-25 23:00", 96),
    ],
)
def test_a_transition_day_has_no_duplicates_and_no_invented_fires(
    zone: str, midnight: str, next_midnight: str, fires: int
) -> None:
    start, end = utc(midnight), utc(next_midnight)
    run = next_fire_times("0 */15 * * * ?", zone, start - timedelta(seconds=1), 200)
    day = [t for t in run if start <= t < end]
    assert len(day) == fires
    assert day == sorted(set(day))


# -- bad input -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        # Quartz refuses a reversed year range; the other fields may wrap (22-2), years do not.
        ("0 0 12 * * ? 2030-2025", "year field '2030-2025': the range '2030-2025' runs backwards"),
        # A step as long as the field's span: "every 60 seconds" would fire at second 0 only.
        ("*/60 * * * * ?", "second field '*/60': step '60' must be a number from 1 to 59"),
        ("0 0/60 * * * ?", "minute field '0/60': step '60' must be a number from 1 to 59"),
        ("0 0 */24 * * ?", "hour field '*/24': step '24' must be a number from 1 to 23"),
        # Digits and spaces outside ASCII read as numbers and gaps to a person, not to cron.
        ("\uff10 0 12 * * ?", "second field '\uff10': use ASCII digits"),  # full-width zero
        ("0 \u0663\u0660 12 * * ?", "minute field '\u0663\u0660': use ASCII"),  # Arabic-Indic 30
        ("0 0 \u00b2 * * ?", "hour field '\u00b2': use ASCII"),  # a superscript two
        ("0 0 12\u00a0* * ? 2030", "hour field '12\\xa0*': use ASCII"),  # a no-break space
        ("0 0 12 * * ? \u0662\u0660\u0663\u0660", "year field"),
        ("0 0 12 ? * 6#\uff13", "day-of-week field '6#\uff13'"),
        ("0 0 12 L-\uff13 * ?", "day-of-month field 'L-\uff13'"),
        ("0 0 12 ? * FR\u0131", "day-of-week field 'FR\u0131'"),  # a dotless i upper-cases to I
    ],
)
def test_quartz_findings_are_refused_as_quartz_refuses_them(expr: str, names: str) -> None:
    """Where a comparison with Quartz 2.3.2 found this module too lenient."""
    with pytest.raises(CronError, match=re.escape(names)):
        validate(expr)


def test_l_minus_n_w_is_supported_and_its_bounds_are_named() -> None:
    assert parse("0 0 12 L-0W * ?") == parse("0 0 12 LW * ?")
    with pytest.raises(CronError, match="L-n and L-nW need n from 0 to 30"):
        validate("0 0 12 L-31W * ?")
    with pytest.raises(CronError, match="day-of-month field 'L-3WW'"):
        validate("0 0 12 L-3WW * ?")


def test_steps_up_to_the_span_stay_valid_where_quartz_allows_them() -> None:
    for expr in (
        "*/59 * * * * ?",
        "0 0 */23 * * ?",
        "0 0 0 */31 * ?",
        "0 0 0 ? */12 *",
        "0 0 0 ? * */7",
        "0 0 0 * * ? 2020-2030/100",
    ):
        validate(expr)


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("0 0 12 *", "has 4 fields"),
        ("0 0 12 * * ? 2026 1", "6 or 7"),
        ("", "has 0 fields"),
        ("60 * * * * ?", "second field '60'"),
        ("*/0 * * * * ?", "second field"),
        ("*/61 * * * * ?", "second field"),
        ("? 0 12 * * ?", "second field"),
        ("0 60 * * * ?", "minute field '60'"),
        ("0 -1 * * * ?", "minute field"),
        ("0 0 24 * * ?", "hour field '24'"),
        ("0 0 0 32 * ?", "day-of-month field '32'"),
        ("0 0 0 0 * ?", "day-of-month field '0'"),
        ("0 0 12 L-31 * ?", "day-of-month field"),
        ("0 0 12 1,L * ?", "day-of-month field"),
        ("0 0 12 32W * ?", "day-of-month field"),
        ("0 0 12 ,1 * ?", "day-of-month field"),
        ("0 0 12 1- * ?", "day-of-month field"),
        ("0 0 12 MON * ?", "day-of-month field"),  # names belong to month and day-of-week
        ("0 0 0 1 13 ?", "month field '13'"),
        ("0 0 12 ? FOO MON", "month field 'FOO'"),
        ("0 0 12 ? JANUARY MON", "month field 'JANUARY'"),
        ("0 0 0 ? * 8", "day-of-week field '8'"),
        ("0 0 0 ? * 0", "day-of-week field '0'"),  # Unix cron's Sunday is not Quartz's
        ("0 0 12 ? * FUN", "day-of-week field 'FUN'"),
        ("0 0 12 ? * 6#6", "day-of-week field"),
        ("0 0 12 ? * 8L", "day-of-week field"),
        ("0 0 0 1 1 ? 1969", "year field '1969'"),
        ("0 0 0 1 1 ? 2100", "year field '2100'"),
        ("0 0 12 * * *", "exactly one of day-of-month and day-of-week"),
        ("0 0 12 1 * MON", "exactly one of day-of-month and day-of-week"),
        ("0 0 12 ? * ?", "exactly one of day-of-month and day-of-week"),
    ],
)
def test_bad_expressions_name_the_field(expr: str, names: str) -> None:
    with pytest.raises(CronError, match=names.replace("?", r"\?")):
        validate(expr)
    with pytest.raises(ValueError):  # CronError is a ValueError
        next_fire(expr, "UTC", BASE)


def test_both_day_fields_set_says_how_to_fix_it() -> None:
    with pytest.raises(CronError, match=r"'0 0 12 \* \* \?'"):
        validate("0 0 12 * * *")


@pytest.mark.parametrize("zone", ["Mars/Olympus_Mons", "", "../../etc/passwd", "utc+2"])
def test_unknown_zones_are_named(zone: str) -> None:
    with pytest.raises(CronError, match=re.escape(f"time zone {zone!r}")):
        validate("0 0 12 * * ?", zone)


def test_a_non_string_expression_is_refused() -> None:
    with pytest.raises(CronError):
        validate(42)  # type: ignore[arg-type]


def test_naive_instants_and_negative_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="aware"):
        next_fire("0 0 12 * * ?", "UTC", datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="n must be"):
        next_fire_times("0 0 12 * * ?", "UTC", BASE, -1)
    assert next_fire_times("0 0 12 * * ?", "UTC", BASE, 0) == []


def test_expressions_are_stored_normalised() -> None:
    assert normalize("  0 0 2  * *\tmon-fri ") == "0 0 2 * * MON-FRI"


def test_an_expression_too_long_to_store_is_refused() -> None:
    sixty = ",".join(str(s) for s in range(60))
    long = f"{sixty} {sixty} 0 * * ?"  # valid Quartz, but over 255 characters
    parse(long)
    with pytest.raises(CronError, match="at most 255"):
        validate(long)
