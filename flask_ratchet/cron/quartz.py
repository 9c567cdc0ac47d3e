"""Quartz cron expressions: the 6- and 7-field dialect, parsed and matched here. Pure: no IO.

An expression has 6 or 7 fields::

    second minute hour day-of-month month day-of-week [year]
    0-59   0-59   0-23 1-31         1-12  1-7         1970-2099
                                    JAN-DEC SUN-SAT

Every field takes ``*``, single values, lists (``1,15``), ranges (``MON-FRI``; a range may wrap,
``22-2``, except in the year) and steps (``0/15``, ``*/15``, ``10-40/10``; a step is shorter than
a minute's 60 seconds, an hour's 60 minutes and a day's 24 hours). Day-of-week counts as Quartz
does: **1 = Sunday … 7 = Saturday**. Exactly one of day-of-month and day-of-week must be ``?``
("no specific value"); Quartz refuses an expression that sets both, and so does this module.

Day-of-month also takes ``L`` (the last day), ``L-3`` (three days before the last), ``15W`` (the
weekday nearest the 15th, never leaving the month), ``LW`` (the last weekday) and ``L-3W`` (the
weekday nearest three days before the last). Day-of-week also takes ``L`` alone (Saturday),
``6L`` (the last Friday) and ``6#3`` (the third Friday; a month without one has no fire).

Why not croniter: it reads six fields as ``minute … day-of-week second`` (seconds last), numbers
days of the week from 0 = Sunday, rejects ``?`` next to a day-of-week, ``W``, ``LW`` and ``L-n``.
This module parses and evaluates Quartz's semantics itself, checked against Quartz 2.3.2.
"""

from __future__ import annotations

import bisect
import calendar
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime

from .fields import DAYS, MONTHS, check_ascii, fail, is_number, number, values

__all__ = ["QuartzSchedule", "parse_quartz", "quartz_weekday"]

YEAR_MIN, YEAR_MAX = 1970, 2099
#: The Gregorian calendar repeats every 400 years: a schedule without a match in that span has none.
SEARCH_YEARS = 400

FIELDS = ("second", "minute", "hour", "day-of-month", "month", "day-of-week", "year")


# -- the parsed form ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DayOfMonth:
    """The day-of-month field: plain days, or one of Quartz's ``L``/``W`` forms."""

    days: frozenset[int] = frozenset()
    last_minus: int | None = None  # L (0) or L-n
    nearest_weekday: int | None = None  # nW
    last_weekday: bool = False  # LW, L-nW: the weekday nearest the day last_minus names

    def matches(self, year: int, month: int) -> list[int]:
        last = calendar.monthrange(year, month)[1]
        if self.last_minus is not None:
            day = last - self.last_minus
            if day < 1:
                return []  # L-30 in February
            return [_nearest_weekday(year, month, day, last) if self.last_weekday else day]
        if self.nearest_weekday is not None:
            if self.nearest_weekday > last:
                return []  # a month without that day has no fire
            return [_nearest_weekday(year, month, self.nearest_weekday, last)]
        return sorted(d for d in self.days if d <= last)


@dataclass(frozen=True, slots=True)
class DayOfWeek:
    """The day-of-week field (Quartz numbering, 1 = Sunday): plain days, ``nL`` or ``n#k``."""

    days: frozenset[int] = frozenset()
    last_of: int | None = None  # nL: the last such weekday of the month
    nth: tuple[int, int] | None = None  # n#k: the k-th such weekday of the month

    def matches(self, year: int, month: int) -> list[int]:
        last = calendar.monthrange(year, month)[1]
        first_dow = quartz_weekday(date(year, month, 1))
        if self.last_of is not None:
            last_dow = quartz_weekday(date(year, month, last))
            return [last - (last_dow - self.last_of) % 7]
        if self.nth is not None:
            dow, k = self.nth
            day = 1 + (dow - first_dow) % 7 + 7 * (k - 1)
            return [day] if day <= last else []
        return [d for d in range(1, last + 1) if (first_dow - 1 + d - 1) % 7 + 1 in self.days]


@dataclass(frozen=True, slots=True)
class QuartzSchedule:
    """A parsed Quartz expression: the allowed values of each field, sorted."""

    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    day: DayOfMonth | DayOfWeek
    months: tuple[int, ...]
    years: tuple[int, ...] | None  # None: every year

    def dates_from(self, start: date) -> Iterator[date]:
        """Every matching date on or after ``start``, in order."""
        if self.years is None:
            last_year = min(9999, start.year + SEARCH_YEARS)
            years: Iterator[int] = iter(range(start.year, last_year + 1))
        else:
            years = (y for y in self.years if y >= start.year)
        for year in years:
            for month in self.months:
                if (year, month) < (start.year, start.month):
                    continue
                for day in self.day.matches(year, month):
                    found = date(year, month, day)
                    if found >= start:
                        yield found

    def wall_times_after(self, start: datetime) -> Iterator[datetime]:
        """Every matching naive wall-clock time strictly after ``start`` (naive), in order."""
        for day in self.dates_from(start.date()):
            floor = (start.hour, start.minute, start.second) if day == start.date() else None
            for h, m, s in self._times(floor):
                yield datetime(day.year, day.month, day.day, h, m, s)

    def _times(self, after: tuple[int, int, int] | None) -> Iterator[tuple[int, int, int]]:
        """Times of day strictly after ``after`` (all of them for ``None``), in order."""
        if after is None:
            for h in self.hours:
                for m in self.minutes:
                    for s in self.seconds:
                        yield h, m, s
            return
        ah, am, as_ = after
        for h in self.hours[bisect.bisect_left(self.hours, ah) :]:
            for m in (
                self.minutes if h > ah else self.minutes[bisect.bisect_left(self.minutes, am) :]
            ):
                later = h > ah or m > am
                for s in (
                    self.seconds
                    if later
                    else self.seconds[bisect.bisect_right(self.seconds, as_) :]
                ):
                    yield h, m, s


def quartz_weekday(day: date) -> int:
    """Quartz's day-of-week number of ``day``: 1 = Sunday … 7 = Saturday."""
    return (day.weekday() + 1) % 7 + 1


def _nearest_weekday(year: int, month: int, day: int, last: int) -> int:
    """The weekday (Monday to Friday) nearest ``day``, without leaving the month."""
    dow = quartz_weekday(date(year, month, day))
    if dow == 7:  # Saturday: the Friday before, or the Monday after if that leaves the month
        return day - 1 if day > 1 else day + 2
    if dow == 1:  # Sunday: the Monday after, or the Friday before if that leaves the month
        return day + 1 if day < last else day - 2
    return day


# -- parsing --------------------------------------------------------------------------------------


def _field(name: str, text: str, lo: int, hi: int, names: tuple[str, ...] = ()) -> tuple[int, ...]:
    """The sorted values of a plain field. Quartz's steps: shorter than a minute, an hour or a
    day in the time fields (``*/60`` and ``*/24`` are refused); up to the field's size elsewhere."""
    size = hi - lo + 1
    max_step = size - 1 if name in ("second", "minute", "hour") else size
    return tuple(sorted(values(name, text, lo, hi, names, max_step=max_step, wrap=True)))


def _years(text: str) -> tuple[int, ...]:
    """The year field: as any other, except that a range never wraps (Quartz refuses
    ``2030-2025``)."""
    size = YEAR_MAX - YEAR_MIN + 1
    return tuple(sorted(values("year", text, YEAR_MIN, YEAR_MAX, max_step=size, wrap=False)))


def _day_of_month(text: str) -> DayOfMonth:
    field = "day-of-month"
    if text == "L":
        return DayOfMonth(last_minus=0)
    if text == "LW":
        return DayOfMonth(last_minus=0, last_weekday=True)
    if text.startswith("L-"):
        offset, weekday = (text[2:-1], True) if text.endswith("W") else (text[2:], False)
        if not is_number(offset) or not 0 <= int(offset) <= 30:
            raise fail(
                field,
                text,
                "L-n and L-nW need n from 0 to 30 (L-3 = three days before the last, L-3W = "
                "the weekday nearest it)",
            )
        return DayOfMonth(last_minus=int(offset), last_weekday=weekday)
    if text.endswith("W"):
        day = number(field, text, text[:-1], 1, 31, ())
        return DayOfMonth(nearest_weekday=day)
    if "L" in text or "W" in text:
        raise fail(
            field,
            text,
            "L, L-n, L-nW, nW and LW stand alone (not in lists or ranges): e.g. 'L' or '15W'",
        )
    return DayOfMonth(days=frozenset(_field(field, text, 1, 31)))


def _day_of_week(text: str) -> DayOfWeek:
    field = "day-of-week"
    if text == "L":
        return DayOfWeek(days=frozenset({7}))  # Quartz: L alone is the last day of the week
    if "#" in text:
        day, _, nth = text.partition("#")
        if not is_number(nth) or not 1 <= int(nth) <= 5:
            raise fail(field, text, "n#k needs k from 1 to 5 (6#3 = the third Friday)")
        return DayOfWeek(nth=(number(field, text, day, 1, 7, DAYS), int(nth)))
    if text.endswith("L"):
        return DayOfWeek(last_of=number(field, text, text[:-1], 1, 7, DAYS))
    return DayOfWeek(days=frozenset(_field(field, text, 1, 7, DAYS)))


def parse_quartz(parts: list[str]) -> QuartzSchedule:
    """Parse the 6 or 7 fields of a Quartz expression.

    :raises CronError: naming the first bad field and how to fix it.
    """
    parts = check_ascii(FIELDS, parts)
    for name, text in zip(FIELDS, parts, strict=False):
        if "?" in text and (name not in ("day-of-month", "day-of-week") or text != "?"):
            raise fail(name, text, "'?' is allowed only alone, in day-of-month or day-of-week")
    dom, dow = parts[3], parts[5]
    if (dom == "?") == (dow == "?"):
        raise fail(
            "day-of-week",
            dow,
            "put '?' in exactly one of day-of-month and day-of-week (Quartz cannot use both): "
            "e.g. '0 0 12 * * ?' for every day, '0 0 12 ? * MON' for Mondays",
        )
    day: DayOfMonth | DayOfWeek = _day_of_week(dow) if dom == "?" else _day_of_month(dom)
    return QuartzSchedule(
        seconds=_field("second", parts[0], 0, 59),
        minutes=_field("minute", parts[1], 0, 59),
        hours=_field("hour", parts[2], 0, 23),
        day=day,
        months=_field("month", parts[4], 1, 12, MONTHS),
        years=_years(parts[6]) if len(parts) == 7 else None,
    )
