"""Quartz cron expressions, evaluated in an IANA time zone. Pure: no IO.

An expression has 6 or 7 fields::

    second minute hour day-of-month month day-of-week [year]
    0-59   0-59   0-23 1-31         1-12  1-7         1970-2099
                                    JAN-DEC SUN-SAT

Every field takes ``*``, single values, lists (``1,15``), ranges (``MON-FRI``; a range may wrap,
``22-2``) and steps (``0/15``, ``*/15``, ``10-40/10``). Day-of-week counts as Quartz does:
**1 = Sunday … 7 = Saturday**. Exactly one of day-of-month and day-of-week must be ``?`` ("no
specific value"); Quartz refuses an expression that sets both, and so does this module.

Day-of-month also takes ``L`` (the last day), ``L-3`` (three days before the last), ``15W`` (the
weekday nearest the 15th, never leaving the month) and ``LW`` (the last weekday). Day-of-week also
takes ``L`` alone (Saturday), ``6L`` (the last Friday) and ``6#3`` (the third Friday; a month
without one has no fire).

Time zones and daylight saving time. An expression names wall-clock times in its zone, and each
wall-clock time it names fires once:

- A time that does not exist (it falls in the spring-forward gap) fires at the first instant after
  the gap: a daily ``02:30`` in America/New_York fires at 03:00 EDT on the spring-forward day. Gap
  times that land on the same instant, or on a time the expression also names (an hourly or
  every-15-minutes schedule at 03:00), are one fire, not several.
- A time that occurs twice (in the fall-back hour) fires once, at its first occurrence. An hourly
  schedule therefore fires at 01:00 EDT and next at 02:00 EST in New York; an every-15-minutes one
  is quiet for the repeated hour. No fire is ever repeated.

Why not croniter alone: croniter reads six fields as ``minute … day-of-week second`` (seconds
last), numbers days of the week from 0 = Sunday, rejects ``?`` next to a day-of-week, ``W``,
``LW`` and ``L-n``, and fires an hourly schedule twice in a repeated hour. This module parses and
evaluates Quartz's semantics itself; the tests use croniter as an independent check of the plain
fields.

>>> next_fire_times("0 30 8 ? * MON-FRI", "Europe/Berlin", datetime(2026, 1, 2, tzinfo=UTC), 2)
[datetime.datetime(2026, 1, 2, 7, 30, tzinfo=datetime.timezone.utc),
 datetime.datetime(2026, 1, 5, 7, 30, tzinfo=datetime.timezone.utc)]
"""

from __future__ import annotations

import bisect
import calendar
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .errors import RatchetError

__all__ = ["CronError", "next_fire", "next_fire_times", "normalize", "validate"]

YEAR_MIN, YEAR_MAX = 1970, 2099
#: The longest expression (normalised) a recurring master can store: its column's width.
EXPR_MAX_LENGTH = 255
#: The Gregorian calendar repeats every 400 years: a schedule without a match in that span has none.
SEARCH_YEARS = 400

MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
FIELDS = ("second", "minute", "hour", "day-of-month", "month", "day-of-week", "year")


class CronError(RatchetError, ValueError):
    """A cron expression or time zone is invalid. The message names the field and the fix."""


def _fail(field: str, text: str, problem: str) -> CronError:
    return CronError(f"{field} field {text!r}: {problem}")


# -- the parsed form ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DayOfMonth:
    """The day-of-month field: plain days, or one of Quartz's ``L``/``W`` forms."""

    days: frozenset[int] = frozenset()
    last_minus: int | None = None  # L (0) or L-n
    nearest_weekday: int | None = None  # nW
    last_weekday: bool = False  # LW

    def matches(self, year: int, month: int) -> list[int]:
        last = calendar.monthrange(year, month)[1]
        if self.last_minus is not None:
            return [last - self.last_minus] if last - self.last_minus >= 1 else []
        if self.last_weekday:
            return [_nearest_weekday(year, month, last, last)]
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
class Schedule:
    """A parsed expression: the allowed values of each field, sorted."""

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


def _number(field: str, text: str, token: str, lo: int, hi: int, names: tuple[str, ...]) -> int:
    if token in names:
        return names.index(token) + lo
    if not token.isdigit():
        named = f" or {names[0]}-{names[-1]}" if names else ""
        raise _fail(field, text, f"{token!r} is not a number from {lo} to {hi}{named}")
    value = int(token)
    if not lo <= value <= hi:
        extra = " (1 = SUN, 7 = SAT)" if field == "day-of-week" else ""
        raise _fail(field, text, f"{value} is out of range: use {lo}-{hi}{extra}")
    return value


def _values(field: str, text: str, lo: int, hi: int, names: tuple[str, ...] = ()) -> set[int]:
    """The values of a list of ``*``, ``a``, ``a-b``, ``a/n``, ``*/n`` and ``a-b/n`` items."""
    out: set[int] = set()
    for item in text.split(","):
        if not item:
            raise _fail(field, text, "empty list item; separate values with single commas")
        base, slash, step_text = item.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or not 1 <= int(step_text) <= hi - lo + 1:
                raise _fail(
                    field, text, f"step {step_text!r} must be a number from 1 to {hi - lo + 1}"
                )
            step = int(step_text)
        if base == "*":
            start, end = lo, hi
        elif "-" in base:
            first, _, second = base.partition("-")
            start = _number(field, text, first, lo, hi, names)
            end = _number(field, text, second, lo, hi, names)
        else:
            start = _number(field, text, base, lo, hi, names)
            end = hi if slash else start  # "5/15": from 5 to the end, every 15
        span = (end - start) % (hi - lo + 1)  # a range like 22-2 wraps around
        out.update(lo + (start - lo + i) % (hi - lo + 1) for i in range(0, span + 1, step))
    return out


def _day_of_month(text: str) -> DayOfMonth:
    field = "day-of-month"
    if text == "L":
        return DayOfMonth(last_minus=0)
    if text == "LW":
        return DayOfMonth(last_weekday=True)
    if text.startswith("L-"):
        offset = text[2:]
        if not offset.isdigit() or not 0 <= int(offset) <= 30:
            raise _fail(field, text, "L-n needs n from 0 to 30 (L-3 = three days before the last)")
        return DayOfMonth(last_minus=int(offset))
    if text.endswith("W"):
        day = _number(field, text, text[:-1], 1, 31, ())
        return DayOfMonth(nearest_weekday=day)
    if "L" in text or "W" in text:
        raise _fail(
            field, text, "L, L-n, nW and LW stand alone (not in lists or ranges): e.g. 'L' or '15W'"
        )
    return DayOfMonth(days=frozenset(_values(field, text, 1, 31)))


def _day_of_week(text: str) -> DayOfWeek:
    field = "day-of-week"
    if text == "L":
        return DayOfWeek(days=frozenset({7}))  # Quartz: L alone is the last day of the week
    if "#" in text:
        day, _, nth = text.partition("#")
        if not nth.isdigit() or not 1 <= int(nth) <= 5:
            raise _fail(field, text, "n#k needs k from 1 to 5 (6#3 = the third Friday)")
        return DayOfWeek(nth=(_number(field, text, day, 1, 7, DAYS), int(nth)))
    if text.endswith("L"):
        return DayOfWeek(last_of=_number(field, text, text[:-1], 1, 7, DAYS))
    return DayOfWeek(days=frozenset(_values(field, text, 1, 7, DAYS)))


@functools.lru_cache(maxsize=512)
def parse(expr: str) -> Schedule:
    """Parse a Quartz expression (cached).

    :raises CronError: naming the first bad field and how to fix it.
    """
    if not isinstance(expr, str):
        raise CronError(f"a cron expression is a string, got {expr!r}")
    parts = expr.upper().split()
    if len(parts) not in (6, 7):
        raise CronError(
            f"cron expression {expr!r} has {len(parts)} fields; Quartz needs 6 or 7: "
            "'second minute hour day-of-month month day-of-week [year]', e.g. '0 0 2 * * ?'"
        )
    for name, text in zip(FIELDS, parts, strict=False):
        if "?" in text and (name not in ("day-of-month", "day-of-week") or text != "?"):
            raise _fail(name, text, "'?' is allowed only alone, in day-of-month or day-of-week")
    dom, dow = parts[3], parts[5]
    if (dom == "?") == (dow == "?"):
        raise _fail(
            "day-of-week",
            dow,
            "put '?' in exactly one of day-of-month and day-of-week (Quartz cannot use both): "
            "e.g. '0 0 12 * * ?' for every day, '0 0 12 ? * MON' for Mondays",
        )
    day: DayOfMonth | DayOfWeek = _day_of_week(dow) if dom == "?" else _day_of_month(dom)
    return Schedule(
        seconds=tuple(sorted(_values("second", parts[0], 0, 59))),
        minutes=tuple(sorted(_values("minute", parts[1], 0, 59))),
        hours=tuple(sorted(_values("hour", parts[2], 0, 23))),
        day=day,
        months=tuple(sorted(_values("month", parts[4], 1, 12, MONTHS))),
        years=tuple(sorted(_values("year", parts[6], YEAR_MIN, YEAR_MAX)))
        if len(parts) == 7
        else None,
    )


@functools.lru_cache(maxsize=128)
def zone_info(zone: str) -> tzinfo:
    """The IANA zone called ``zone``.

    :raises CronError: naming the zone, if there is no such zone.
    """
    if zone == "UTC":
        return UTC
    try:
        return ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise CronError(
            f"time zone {zone!r} is not a known IANA zone; use a name like 'UTC', "
            "'Europe/Berlin' or 'America/New_York'"
        ) from None


# -- evaluation -----------------------------------------------------------------------------------


def normalize(expr: str) -> str:
    """The form a master stores: upper case, the fields separated by single spaces (so that
    ``"0 0 2 * * ?"`` and ``" 0  0 2 * * ? "`` are one definition)."""
    return " ".join(expr.upper().split())


def validate(expr: str, zone: str = "UTC") -> None:
    """Check ``expr`` and ``zone``.

    :raises CronError: naming the bad field, the unknown zone, or an expression too long to
        store.
    """
    parse(expr)
    length = len(normalize(expr))
    if length > EXPR_MAX_LENGTH:
        raise CronError(
            f"cron expression is {length} characters long; at most {EXPR_MAX_LENGTH} can be "
            "stored: use ranges and steps ('1-30', '0/5') instead of long lists"
        )
    zone_info(zone)


def next_fire(expr: str, zone: str, after: datetime) -> datetime | None:
    """The first fire time strictly after ``after`` (aware), as an aware UTC datetime.

    ``None`` when the expression never fires again (its years are over, or it names a date that
    never exists, like 30 FEB).

    :raises CronError: for a bad expression or zone.
    """
    schedule = parse(expr)
    tz = zone_info(zone)
    if not isinstance(after, datetime) or after.tzinfo is None:
        raise ValueError(f"after must be an aware datetime (e.g. tzinfo=UTC), got {after!r}")
    start = after.astimezone(tz).replace(tzinfo=None)
    for wall in schedule.wall_times_after(start):
        instant = _instant(wall, tz)
        # A wall time after ``start`` may still be an earlier instant: the first occurrence of
        # a repeated time, seen from its second occurrence.
        if instant > after:
            return instant
    return None


def next_fire_times(expr: str, zone: str, after: datetime, n: int) -> list[datetime]:
    """The next ``n`` fire times strictly after ``after`` (fewer if the schedule ends).

    Useful to preview a schedule::

        next_fire_times("0 0 9 ? * MON", "Europe/Berlin", datetime.now(UTC), 5)
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a whole number >= 0, got {n!r}")
    out: list[datetime] = []
    current: datetime | None = after
    while current is not None and len(out) < n:
        current = next_fire(expr, zone, current)
        if current is not None:
            out.append(current)
    return out


def _instant(wall: datetime, tz: tzinfo) -> datetime:
    """The UTC instant a naive wall time in ``tz`` fires at (see the module's DST rules)."""
    if tz is UTC:
        return wall.replace(tzinfo=UTC)
    first = wall.replace(tzinfo=tz, fold=0).astimezone(UTC)  # fold=0: the first occurrence
    if first.astimezone(tz).replace(tzinfo=None) == wall:
        return first
    return _gap_end(wall, tz)


def _gap_end(wall: datetime, tz: tzinfo) -> datetime:
    """The instant a spring-forward gap containing ``wall`` ends (the transition), in UTC."""
    # For a time in a gap, fold=1 reads it with the offset after the transition (an instant
    # before it) and fold=0 with the offset before (an instant after it): the transition lies
    # between. Transitions fall on whole seconds, so bisect on seconds.
    lo = wall.replace(tzinfo=tz, fold=1).astimezone(UTC)
    hi = wall.replace(tzinfo=tz, fold=0).astimezone(UTC)
    before = lo.astimezone(tz).utcoffset()
    while hi - lo > timedelta(seconds=1):
        mid = lo + timedelta(seconds=int((hi - lo).total_seconds()) // 2)
        if mid.astimezone(tz).utcoffset() == before:
            lo = mid
        else:
            hi = mid
    return hi
