"""Per-job options: priority, retries, backoff, timeout, resource, tags and params.

A task's decorator sets its defaults; a :class:`~flask_ratchet.submit.JobBuilder` overrides them
for one job. The resolved options are what the store writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import timedelta
from enum import IntEnum, StrEnum
from typing import Any

MAX_RETRIES_LIMIT = 1000
KEY_MAX_LENGTH = 255
TAG_MAX_LENGTH = 100
RESOURCE_MAX_LENGTH = 100


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

    priority: Priority = Priority.NORMAL
    max_retries: int = 3
    backoff: Backoff = Backoff.EXPONENTIAL
    backoff_base: float = 10.0
    timeout: float | None = None
    resource: str | None = None
    tags: tuple[str, ...] = ()
    params: dict[str, Any] = field(default_factory=dict)

    def merged(self, **changes: Any) -> JobOptions:
        """Return a copy with ``changes`` validated and applied."""
        return replace(self, **validate_options(**changes))


def seconds(name: str, value: timedelta | float | int) -> float:
    """Return a duration in seconds, refusing anything that is not a positive duration."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f"{name} must be a timedelta or a number of seconds >= 0, got {value!r}")
    return float(value)


def validate_options(**changes: Any) -> dict[str, Any]:
    """Validate option values given by a user; return them normalised."""
    out: dict[str, Any] = {}
    for name, value in changes.items():
        if name == "priority":
            try:
                out[name] = Priority(value)
            except ValueError:
                raise ValueError(
                    f"priority must be a Priority (LOWEST..CRITICAL) or 0-4, got {value!r}"
                ) from None
        elif name == "max_retries":
            if (
                isinstance(value, bool)
                or not isinstance(value, int)
                or not 0 <= value <= MAX_RETRIES_LIMIT
            ):
                raise ValueError(
                    f"max_retries must be a whole number from 0 to {MAX_RETRIES_LIMIT}, "
                    f"got {value!r}"
                )
            out[name] = value
        elif name == "backoff":
            try:
                out[name] = Backoff(value)
            except ValueError:
                raise ValueError(
                    f"backoff must be a Backoff (NONE, FIXED, EXPONENTIAL, JITTER), got {value!r}"
                ) from None
        elif name in ("backoff_base", "timeout"):
            if value is None and name == "timeout":
                out[name] = None
            else:
                secs = seconds(name, value)
                if name == "timeout" and secs <= 0:
                    raise ValueError(f"timeout must be positive, got {value!r}")
                out[name] = secs
        elif name == "resource":
            out[name] = _short_text("resource", value, RESOURCE_MAX_LENGTH, optional=True)
        elif name == "tags":
            out[name] = tuple(dict.fromkeys(_short_text("tag", t, TAG_MAX_LENGTH) for t in value))
        elif name == "params":
            if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
                raise ValueError(f"params must be a dict with string keys, got {value!r}")
            out[name] = dict(value)
        else:
            raise TypeError(f"unknown job option {name!r}")
    return out


def validate_text(name: str, value: Any, limit: int) -> str:
    """Validate a required name: a non-empty string of at most ``limit`` characters."""
    return _short_text(name, value, limit)  # type: ignore[return-value]


def validate_key(name: str, value: Any) -> str:
    """Validate an idempotency or business key."""
    return _short_text(name, value, KEY_MAX_LENGTH)  # type: ignore[return-value]


def _short_text(name: str, value: Any, limit: int, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value or len(value) > limit:
        raise ValueError(
            f"{name} must be a non-empty string of at most {limit} characters, got {value!r}"
        )
    return value
