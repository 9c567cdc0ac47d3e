"""Time zones for cron: finding an IANA zone, and the instant a wall-clock time fires at. Pure."""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .fields import CronError

__all__ = ["instant", "zone_info"]


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


def instant(wall: datetime, tz: tzinfo) -> datetime:
    """The UTC instant a naive wall time in ``tz`` fires at (see the package's DST rules)."""
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
