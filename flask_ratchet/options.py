"""Per-job options: queue, priority, retries, backoff, timeout, expiry, resource, tags and params.

A task's decorator sets its defaults; a :class:`~flask_ratchet.api.submit.JobBuilder` overrides them
for one job. The resolved options are what the store writes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from enum import IntEnum, StrEnum
from typing import Any

from . import payload
from .errors import InvalidOption

MAX_RETRIES_LIMIT = 1000
KEY_MAX_LENGTH = 255
TAG_MAX_LENGTH = 100
RESOURCE_MAX_LENGTH = 100
#: The queue of a job whose task and builder name none.
DEFAULT_QUEUE = "default"
QUEUE_MAX_LENGTH = 64
# Letters, digits and ``_ - . :``: a queue name is typed on command lines (``--queues a,b=2``),
# shown in URLs and used as a metrics label, so it holds nothing any of them would need to quote.
_QUEUE_NAME = re.compile(r"[A-Za-z0-9_.:-]+")
#: The longest delay, timeout, backoff base or resource retry delay (100 years of 365 days):
#: far beyond any schedule, and ``now`` plus it is a time every database and Python can hold.
MAX_DURATION = timedelta(days=36_500)
_MAX_SECONDS = MAX_DURATION.total_seconds()
#: The due times ``schedule_at`` accepts. A job due after the year 9998 could not be shown (its
#: due time near the end of Python's calendar) and would pass for a dependent waiting at
#: ``flow.NOT_YET``; one due before 1970 is a mistake, not a job due long ago.
EARLIEST_DUE = datetime(1970, 1, 1, tzinfo=UTC)
LATEST_DUE = datetime(9999, 1, 1, tzinfo=UTC)
#: How much of a refused value a message shows.
_SHOWN = 80


class Priority(IntEnum):
    """Claim order. The ordinals are stored: never reorder or insert between them."""

    LOWEST = 0
    LOW = 1
    NORMAL = 2
    HIGH = 3
    CRITICAL = 4  # claimed first, and wakes workers at once


class Backoff(StrEnum):
    """How long a failed job waits before its next attempt (see :mod:`flask_ratchet.retry`)."""

    NONE = "NONE"  # retry at once
    FIXED = "FIXED"  # base every time
    EXPONENTIAL = "EXPONENTIAL"  # base * 2^(attempt-1), capped at 24 h
    JITTER = "JITTER"  # EXPONENTIAL less a random part of up to half of it


@dataclass(frozen=True, slots=True)
class JobOptions:
    """The options one job runs with. Durations are seconds."""

    queue: str = DEFAULT_QUEUE
    priority: Priority = Priority.NORMAL
    max_retries: int = 3
    backoff: Backoff = Backoff.EXPONENTIAL
    backoff_base: float = 10.0
    timeout: float | None = None
    resource: str | None = None
    tags: tuple[str, ...] = ()
    params: dict[str, Any] = field(default_factory=dict)
    #: Seconds after its due time by which the job must have started, or it ends CANCELED
    #: ("expired") instead of running late; ``None``: no deadline. (A deadline given as a time,
    #: ``with_expires(datetime)``, belongs to one job: it is the builder's, not an option.)
    expires: float | None = None

    def merged(self, **changes: Any) -> JobOptions:
        """Return a copy with ``changes`` validated and applied."""
        return replace(self, **validate_options(**changes))


#: The options of a job whose task, builder and app's ``RATCHET_DEFAULT_*`` set none.
STANDARD_OPTIONS = JobOptions()
#: The options an app may give new defaults (``RATCHET_DEFAULT_<NAME>``).
CONFIGURABLE_DEFAULTS = ("max_retries", "backoff", "backoff_base", "timeout", "queue", "priority")


def seconds(name: str, value: timedelta | float | int) -> float:
    """Return a duration in seconds: a ``timedelta`` or a number from 0 to
    :data:`MAX_DURATION` (NaN, infinities and booleans are refused).

    :raises InvalidOption: naming ``name`` and the allowed range.
    """
    secs = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(secs, bool) or not isinstance(secs, int | float) or not 0 <= secs <= _MAX_SECONDS:
        raise InvalidOption(
            f"{name} must be a timedelta or a number of seconds from 0 to {_MAX_SECONDS:.0f} "
            f"({MAX_DURATION.days} days), got {shown(value)}"
        )
    return float(secs)


def due_time(name: str, when: Any) -> datetime:
    """Return an aware due time in UTC, from :data:`EARLIEST_DUE` to :data:`LATEST_DUE`.

    :raises InvalidOption: for anything else (a naive datetime, a time out of that range).
    """
    if not (isinstance(when, datetime) and when.utcoffset() is not None):
        raise InvalidOption(f"{name} needs an aware datetime (e.g. tzinfo=UTC), got {shown(when)}")
    try:
        utc: datetime | None = when.astimezone(UTC)
    except OverflowError:  # an offset that takes it past an end of the calendar
        utc = None
    if utc is None or not EARLIEST_DUE <= utc <= LATEST_DUE:
        raise InvalidOption(
            f"{name} must be from {EARLIEST_DUE:%Y-%m-%d} to {LATEST_DUE:%Y-%m-%d} (UTC), "
            f"got {shown(when)}"
        )
    return utc


def validate_options(**changes: Any) -> dict[str, Any]:
    """Validate option values given by a user; return them normalised.

    :raises InvalidOption: naming the option and what is allowed.
    :raises PayloadError: for params that cannot be stored (see :mod:`flask_ratchet.payload`).
    """
    out: dict[str, Any] = {}
    for name, value in changes.items():
        if name == "queue":
            out[name] = validate_queue(value)
        elif name == "priority":
            try:
                if isinstance(value, bool):  # True is 1 to IntEnum, never a priority here
                    raise ValueError
                out[name] = Priority(value)
            except ValueError:
                raise InvalidOption(
                    f"priority must be a Priority (LOWEST..CRITICAL) or 0-4, got {shown(value)}"
                ) from None
        elif name == "max_retries":
            if (
                isinstance(value, bool)
                or not isinstance(value, int)
                or not 0 <= value <= MAX_RETRIES_LIMIT
            ):
                raise InvalidOption(
                    f"max_retries must be a whole number from 0 to {MAX_RETRIES_LIMIT}, "
                    f"got {shown(value)}"
                )
            out[name] = value
        elif name == "backoff":
            try:
                out[name] = Backoff(value)
            except ValueError:
                raise InvalidOption(
                    "backoff must be a Backoff (NONE, FIXED, EXPONENTIAL, JITTER), "
                    f"got {shown(value)}"
                ) from None
        elif name in ("backoff_base", "timeout", "expires"):
            if value is None and name != "backoff_base":
                out[name] = None
            else:
                secs = seconds(name, value)
                if name != "backoff_base" and secs <= 0:
                    raise InvalidOption(f"{name} must be positive, got {shown(value)}")
                out[name] = secs
        elif name == "resource":
            out[name] = _short_text("resource", value, RESOURCE_MAX_LENGTH, optional=True)
        elif name == "tags":
            if isinstance(value, str) or not isinstance(value, Iterable):
                raise InvalidOption(f"tags must be a list of strings, got {shown(value)}")
            out[name] = tuple(dict.fromkeys(_short_text("tag", t, TAG_MAX_LENGTH) for t in value))
        elif name == "params":
            if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
                raise InvalidOption(f"params must be a dict with string keys, got {shown(value)}")
            payload.encode_valid("params", value)  # refused when set, not when submitted
            out[name] = dict(value)
        else:
            raise TypeError(f"unknown job option {name!r}")
    return out


def validate_queue(value: Any) -> str:
    """Validate a queue name: 1 to :data:`QUEUE_MAX_LENGTH` letters, digits, ``_``, ``-``, ``.``
    or ``:``.

    :raises InvalidOption: saying what a queue name may hold.
    """
    if (
        not isinstance(value, str)
        or len(value) > QUEUE_MAX_LENGTH
        or not _QUEUE_NAME.fullmatch(value)
    ):
        raise InvalidOption(
            f"queue must be 1 to {QUEUE_MAX_LENGTH} letters, digits, '_', '-', '.' or ':' "
            f"(e.g. 'mail'), got {shown(value)}"
        )
    return value


def validate_text(name: str, value: Any, limit: int) -> str:
    """Validate a required name: a non-empty string of at most ``limit`` characters, that both
    databases store as it is (see :func:`storable_text`).

    :raises InvalidOption: naming ``name``.
    """
    return _short_text(name, value, limit)  # type: ignore[return-value]


def validate_key(name: str, value: Any) -> str:
    """Validate an idempotency or business key."""
    return _short_text(name, value, KEY_MAX_LENGTH)  # type: ignore[return-value]


def storable_text(value: str) -> bool:
    """Whether both databases store ``value`` as it is: PostgreSQL refuses NUL characters
    (SQLite would keep them), and a lone surrogate cannot be encoded as UTF-8."""
    if "\x00" in value:
        return False
    if value.isascii():
        return True
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def _short_text(name: str, value: Any, limit: int, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value or len(value) > limit or not storable_text(value):
        raise InvalidOption(
            f"{name} must be a non-empty string of at most {limit} characters, without NUL "
            f"characters or lone surrogates, got {shown(value)}"
        )
    return value


def shown(value: Any) -> str:
    """``repr(value)`` cut short, for a refusal's message: a refused value may be huge (an
    int of more than 4,300 digits has no ``repr`` at all)."""
    try:
        text = repr(value)
    except ValueError:
        return f"a {type(value).__name__} too long to show"
    return text if len(text) <= _SHOWN else f"{text[: _SHOWN - 1]}…"
