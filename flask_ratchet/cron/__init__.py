"""Cron expressions in two dialects, evaluated in an IANA time zone. Pure: no IO.

The number of fields says the dialect:

- **Unix cron**, 5 fields (``minute hour day-of-month month day-of-week``, 0 or 7 = Sunday) or a
  macro (``@hourly``, ``@daily``, ``@weekly``, ``@monthly``, ``@yearly``): what crontabs and
  Celery beat schedules are written in. See :mod:`.unix`.
- **Quartz cron**, 6 or 7 fields (``second minute hour day-of-month month day-of-week [year]``,
  1 = Sunday, ``?``, ``L``, ``W``, ``#``): Ratchet's own dialect. See :mod:`.quartz`.
- **Intervals**, ``@every`` and a span (``@every 30s``, ``@every 1h30m``): elapsed time, in
  multiples of the span since the Unix epoch, in UTC only. See :mod:`.intervals`.

Time zones and daylight saving time, the same in both dialects. An expression names wall-clock
times in its zone, and each wall-clock time it names fires once:

- A time that does not exist (it falls in the spring-forward gap) fires at the first instant after
  the gap: a daily ``02:30`` in America/New_York fires at 03:00 EDT on the spring-forward day. Gap
  times that land on the same instant, or on a time the expression also names (an hourly or
  every-15-minutes schedule at 03:00), are one fire, not several.
- A time that occurs twice (in the fall-back hour) fires once, at its first occurrence. An hourly
  schedule therefore fires at 01:00 EDT and next at 02:00 EST in New York; an every-15-minutes one
  is quiet for the repeated hour. No fire is ever repeated.

>>> next_fire_times("0 30 8 ? * MON-FRI", "Europe/Berlin", datetime(2026, 1, 2, tzinfo=UTC), 2)
[datetime.datetime(2026, 1, 2, 7, 30, tzinfo=datetime.timezone.utc),
 datetime.datetime(2026, 1, 5, 7, 30, tzinfo=datetime.timezone.utc)]
>>> dialect("*/5 * * * *"), dialect("0 */5 * * * ?")
('unix', 'quartz')
"""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Literal

from .fields import CronError, split
from .intervals import EVERY, IntervalSchedule, interval_expression, parse_interval
from .quartz import QuartzSchedule, parse_quartz
from .unix import UnixSchedule, parse_unix
from .zones import instant, zone_info

__all__ = [
    "DIALECT_FIELDS",
    "DIALECT_LABELS",
    "CronError",
    "Dialect",
    "dialect",
    "interval_expression",
    "next_fire",
    "next_fire_times",
    "normalize",
    "parse",
    "validate",
    "zone_info",
]

#: The longest expression (normalised) a recurring master can store: its column's width.
EXPR_MAX_LENGTH = 255

Dialect = Literal["unix", "quartz", "interval"]
#: How each dialect is named where a person reads it (the CLI's preview, the console).
DIALECT_LABELS: dict[Dialect, str] = {
    "unix": "Unix cron",
    "quartz": "Quartz cron",
    "interval": "Interval",
}
#: The fields of each dialect, in order, for a person reading a preview.
DIALECT_FIELDS: dict[Dialect, str] = {
    "unix": "minute hour day-of-month month day-of-week (0 or 7 = Sunday)",
    "quartz": "second minute hour day-of-month month day-of-week (1 = Sunday) [year]",
    "interval": "@every days hours minutes seconds (multiples since 1970-01-01 00:00 UTC)",
}

Schedule = UnixSchedule | QuartzSchedule | IntervalSchedule


@functools.lru_cache(maxsize=512)
def parse(expr: str) -> Schedule:
    """Parse an expression of any dialect (cached).

    :raises CronError: naming the first bad field and how to fix it.
    """
    parts = split(expr)
    if parts and parts[0].lower() == EVERY:
        return parse_interval(parts)
    if len(parts) == 5 or (len(parts) == 1 and parts[0].startswith("@")):
        return parse_unix(parts)
    if len(parts) in (6, 7):
        return parse_quartz(parts)
    raise CronError(
        f"cron expression {expr!r} has {len(parts)} fields: write Unix cron with 5, "
        "'minute hour day-of-month month day-of-week' (e.g. '*/5 * * * *', or a macro like "
        "'@daily'), or Quartz cron with 6 or 7, 'second minute hour day-of-month month "
        "day-of-week [year]' (e.g. '0 0 2 * * ?')"
    )


def dialect(expr: str) -> Dialect:
    """Which dialect ``expr`` is written in.

    :raises CronError: if it is in neither.
    """
    schedule = parse(expr)
    if isinstance(schedule, IntervalSchedule):
        return "interval"
    return "unix" if isinstance(schedule, UnixSchedule) else "quartz"


def normalize(expr: str) -> str:
    """The form a master stores: the fields separated by single spaces, upper case (a macro in
    lower case, an interval as ``@every 1m30s``), so that ``"0 0 2 * * ?"`` and
    ``" 0  0 2 * * ? "`` are one definition."""
    parts = split(expr)
    if parts and parts[0].lower() == EVERY:
        return parse_interval(parts).expression
    if len(parts) == 1 and parts[0].startswith("@"):
        return parts[0].lower()
    return " ".join(parts).upper()


def validate(expr: str, zone: str = "UTC") -> None:
    """Check ``expr`` and ``zone``.

    :raises CronError: naming the bad field, the unknown zone, an interval in a zone other
        than UTC, or an expression too long to store.
    """
    if isinstance(parse(expr), IntervalSchedule) and zone != "UTC":
        raise CronError(
            f"an interval ({normalize(expr)!r}) counts elapsed time, which no zone moves: give "
            f"it zone 'UTC', not {zone!r} (for wall-clock times in a zone, write cron)"
        )
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
    if isinstance(schedule, IntervalSchedule):
        return schedule.next_after(after)  # elapsed time: the zone does not move it
    start = after.astimezone(tz).replace(tzinfo=None)
    for wall in schedule.wall_times_after(start):
        fire = instant(wall, tz)
        # A wall time after ``start`` may still be an earlier instant: the first occurrence of
        # a repeated time, seen from its second occurrence.
        if fire > after:
            return fire
    return None


def next_fire_times(expr: str, zone: str, after: datetime, n: int) -> list[datetime]:
    """The next ``n`` fire times strictly after ``after`` (fewer if the schedule ends).

    Useful to preview a schedule::

        next_fire_times("0 9 * * MON", "Europe/Berlin", datetime.now(UTC), 5)
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
