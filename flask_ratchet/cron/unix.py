"""Unix cron expressions: the 5-field dialect of crontab and Celery beat, and its ``@`` macros.
Evaluated with croniter. Pure: no IO.

An expression has 5 fields::

    minute hour day-of-month month day-of-week
    0-59   0-59 1-31         1-12  0-7 (0 and 7 = Sunday)
                             JAN-DEC SUN-SAT

Every field takes ``*``, single values, lists (``1,15``), ranges from low to high (``MON-FRI``,
``9-17``) and steps (``*/5``, ``0-30/10``). When both day fields are restricted (neither is
``*``), a day matches if either does: ``0 0 1,15 * MON`` fires on the 1st, the 15th and every
Monday, as POSIX cron does (``*/2`` counts as restricted, unlike in Vixie cron's known bug).

The macros: ``@hourly`` (``0 * * * *``), ``@daily`` and ``@midnight`` (``0 0 * * *``),
``@weekly`` (``0 0 * * 0``), ``@monthly`` (``0 0 1 * *``), ``@yearly`` and ``@annually``
(``0 0 1 1 *``).

The fields are read here, with errors that name the field, and croniter is handed each field as
``*`` or the plain list of its values. So only standard cron reaches it: its extensions (``L``,
``#``, ``H``, a sixth seconds field) belong to Quartz's dialect here, with Quartz's meaning, and
its own reading of ranges and steps never matters (croniter 7.0 reads ``5-5`` as ``*``). A field
of ``*`` alone is what leaves a day field unrestricted, so the list keeps the day rule intact.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from .fields import DAYS, MONTHS, CronError, check_ascii, fail, values

__all__ = ["MACROS", "UnixSchedule", "parse_unix"]

MACROS = {
    "@HOURLY": "0 * * * *",
    "@DAILY": "0 0 * * *",
    "@MIDNIGHT": "0 0 * * *",
    "@WEEKLY": "0 0 * * 0",
    "@MONTHLY": "0 0 1 * *",
    "@YEARLY": "0 0 1 1 *",
    "@ANNUALLY": "0 0 1 1 *",
}

FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")
#: Each field's range, names and largest step. A step of a whole hour or day (``*/60``,
#: ``*/24``) is refused, as in Quartz: it reads like "every hour" and means "at minute 0".
_RANGES: dict[str, tuple[int, int, tuple[str, ...], int]] = {
    "minute": (0, 59, (), 59),
    "hour": (0, 23, (), 23),
    "day-of-month": (1, 31, (), 31),
    "month": (1, 12, MONTHS, 12),
    "day-of-week": (0, 7, DAYS, 7),
}
_DAY_FIELDS = {"day-of-month": range(1, 32), "day-of-week": range(7)}
#: Years croniter may look ahead for a match before a schedule counts as never firing
#: (``0 0 30 2 *``): 29 February recurs within 8 years, so every real schedule matches by then.
_LOOKAHEAD_YEARS = 28


@dataclass(frozen=True, slots=True)
class UnixSchedule:
    """A checked Unix expression, matched by croniter on wall-clock times."""

    fields: str  # each field "*" or the sorted list of its values: "0 9 * * 1,2,3,4,5"

    def wall_times_after(self, start: datetime) -> Iterator[datetime]:
        """Every matching naive wall-clock time strictly after ``start`` (naive), in order."""
        # Imported here: most processes that load the app never compute a fire time, and
        # croniter and dateutil take about 9 ms to import, 5 % of ratchet's own import.
        from croniter import croniter

        # A naive start makes croniter step through wall-clock times, with no zone: the caller
        # maps each one to an instant by the module's daylight-saving rules.
        times = croniter(
            self.fields, start, ret_type=datetime, max_years_between_matches=_LOOKAHEAD_YEARS
        )
        try:
            yield from times.all_next(datetime)
        except (OverflowError, ValueError):
            # CroniterBadDateError (a ValueError): no match within the look-ahead; or a time
            # past the year 9999. Either way, no further fire.
            return


def parse_unix(parts: list[str]) -> UnixSchedule:
    """Check the 5 fields of a Unix expression, or one macro.

    :raises CronError: naming the first bad field (or the unknown macro) and how to fix it.
    """
    if len(parts) == 1:
        expansion = MACROS.get(parts[0].upper()) if parts[0].isascii() else None
        if expansion is None:
            known = ", ".join(m.lower() for m in MACROS)
            raise CronError(
                f"cron macro {parts[0]!r} is not one of {known} (or '@every 5m', an interval)"
            )
        return parse_unix(expansion.split())
    parts = check_ascii(FIELDS, parts)
    fields: list[str] = []
    every_day = False
    for name, text in zip(FIELDS, parts, strict=True):
        lo, hi, names, max_step = _RANGES[name]
        tokens = re.split(r"[,/-]", text)
        if any(mark in token for token in tokens if token not in names for mark in "?LW#"):
            raise fail(
                name,
                text,
                "'?', 'L', 'W' and '#' belong to Quartz cron: write the expression with Quartz's "
                "6 fields, seconds first (e.g. '0 0 0 L * ?' for midnight on the last day)",
            )
        found = values(name, text, lo, hi, names, max_step=max_step, wrap=False)
        if name == "day-of-week":
            found = {day % 7 for day in found}  # 7 is Sunday, as 0 is
        every_day |= text != "*" and name in _DAY_FIELDS and len(found) == len(_DAY_FIELDS[name])
        fields.append("*" if text == "*" else ",".join(map(str, sorted(found))))
    if every_day:
        # A day field naming every day matches every day, under either day rule ("1-31" with
        # "MON" is every day, by the union). Written out, croniter versions disagree about it.
        fields[2] = fields[4] = "*"
    return UnixSchedule(" ".join(fields))
