"""Interval schedules: ``@every 5s``, ``@every 1h30m``, a fixed span of elapsed time. Pure.

An interval fires at every multiple of its span counted from the Unix epoch (1970-01-01 00:00
UTC): ``@every 15m`` at :00, :15, :30 and :45 of every hour, ``@every 1d`` at midnight UTC. Its
fire times are thus a function of the expression alone, like a cron expression's, which is what
lets recurring firing treat both alike: ``next_fire`` after any instant is the next multiple, so
the misfire planning, the bisection over an outage, the once-only swap of ``next_fire`` and the
unique ``(recurring_id, fire_time)`` of the children hold for intervals unchanged. A span
counted from each run instead (Celery beat's) would make the next fire depend on the last one,
and two nodes could disagree about it.

The span is elapsed time: daylight saving time and zones do not move it, so an interval's zone
must be UTC (a wall-clock schedule in a zone is what cron is for).

Written ``@every`` and then whole days, hours, minutes and seconds, largest first, each at most
once (``@every 90s`` is read as ``@every 1m30s``, the form stored); at least one second, at most
:data:`LONGEST`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from .fields import CronError

__all__ = ["EVERY", "LONGEST", "IntervalSchedule", "interval_expression", "parse_interval"]

#: The word that starts an interval expression: reserved, no cron macro has it.
EVERY = "@every"
#: The longest span an interval may have: 100 years of days, the longest duration ratchet takes.
LONGEST = timedelta(days=36_500)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_UNITS = (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1))
_SPAN = re.compile(r"(?:([0-9]{1,8})d)?(?:([0-9]{1,8})h)?(?:([0-9]{1,9})m)?(?:([0-9]{1,10})s)?")
_MICROSECOND = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class IntervalSchedule:
    """A checked interval: fires at every multiple of ``seconds`` since the epoch."""

    seconds: int

    def next_after(self, after: datetime) -> datetime | None:
        """The first fire time strictly after ``after`` (aware); ``None`` past year 9999."""
        step = self.seconds * 1_000_000
        # In whole microseconds: a float division would round a far instant onto the wrong side.
        elapsed = (after - EPOCH) // _MICROSECOND
        try:
            return EPOCH + timedelta(microseconds=(elapsed // step + 1) * step)
        except OverflowError:
            return None

    @property
    def expression(self) -> str:
        """The normalised expression, ``@every 1h30m``."""
        return f"{EVERY} {_spelled(self.seconds)}"


def parse_interval(parts: list[str]) -> IntervalSchedule:
    """Read ``["@every", "5m"]`` (an expression split into fields).

    :raises CronError: naming the interval and saying how to write it.
    """
    if len(parts) != 2:
        raise CronError(
            f"an interval is '{EVERY}' and one span like '30s', '5m' or '1h30m', got "
            f"{' '.join(parts)!r}"
        )
    text = parts[1]
    match = _SPAN.fullmatch(text.lower()) if text.isascii() else None
    if match is None or not any(match.groups()):
        raise CronError(
            f"interval {text!r}: write whole days, hours, minutes and seconds, largest first, "
            "each at most once, in ASCII digits, like '30s', '5m', '1h30m' or '2d'"
        )
    seconds = sum(int(n or 0) * size for n, (_, size) in zip(match.groups(), _UNITS, strict=True))
    return IntervalSchedule(_checked(text, seconds))


def interval_expression(every: timedelta | int | float) -> str:
    """The expression of ``every`` (a ``timedelta`` or seconds): ``@every 5s``.

    :raises CronError: for a span under a second, not a whole number of seconds, or longer
        than :data:`LONGEST`.
    """
    if isinstance(every, timedelta):
        span = every
    elif isinstance(every, int | float) and not isinstance(every, bool):
        try:
            span = timedelta(seconds=every)
        except (OverflowError, ValueError):
            raise CronError(f"every= {every!r} is not a span of time ratchet takes") from None
    else:
        raise CronError(f"every= takes a timedelta or a number of seconds, got {every!r}")
    if span % timedelta(seconds=1):
        raise CronError(f"every= {span} is not a whole number of seconds")
    return IntervalSchedule(_checked(str(span), span // timedelta(seconds=1))).expression


def _checked(text: str, seconds: int) -> int:
    if not 1 <= seconds <= LONGEST.total_seconds():
        raise CronError(
            f"interval {text!r} must be from 1 second to {LONGEST.days} days "
            f"({int(LONGEST.total_seconds())}s)"
        )
    return seconds


def _spelled(seconds: int) -> str:
    """``5400`` as ``1h30m``: each unit once, largest first, none that is zero."""
    out = []
    for unit, size in _UNITS:
        count, seconds = divmod(seconds, size)
        if count:
            out.append(f"{count}{unit}")
    return "".join(out)
