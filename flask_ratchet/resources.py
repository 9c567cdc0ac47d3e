"""Resource limits: what they are and which values they accept. Pure.

A *resource* is anything jobs of many tasks share and must not overload: a payment API, a
licence server, a slow database. A job names one (``@ratchet.task(resource="payment-api")`` or
``.with_resource("payment-api")``); before it runs, the worker takes a permit of that resource in
the database, and with ``max_concurrent`` permits out the job is deferred by ``retry_delay``
without spending an attempt. The limit holds across every worker process on the database.

Limits live in ``ratchet_resource_limit``: set them with ``ratchet.configure_resource()``
or the config key ``RATCHET_RESOURCES``, which every worker writes when it starts. A resource
without a limit row has no limit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from .errors import ConfigError, InvalidOption
from .options import MAX_DURATION, RESOURCE_MAX_LENGTH, shown, validate_text

#: A resource's ``retry_delay`` when its config entry gives none.
DEFAULT_RETRY_DELAY = 5.0


@dataclass(frozen=True, slots=True)
class ResourceLimit:
    """At most ``max_concurrent`` jobs hold a permit of ``name`` at once; a job that finds none
    free is due again ``retry_delay`` seconds later."""

    name: str
    max_concurrent: int
    retry_delay: float


def resource_limit(
    name: Any, max_concurrent: Any, retry_delay: Any = DEFAULT_RETRY_DELAY
) -> ResourceLimit:
    """Validate a limit given by a user (``retry_delay`` in seconds or a ``timedelta``).

    :raises InvalidOption: naming the bad value.
    """
    validate_text("a resource name", name, RESOURCE_MAX_LENGTH)
    return ResourceLimit(
        name, checked_max_concurrent(name, max_concurrent), checked_retry_delay(name, retry_delay)
    )


def checked_max_concurrent(name: str, max_concurrent: Any) -> int:
    """``max_concurrent`` of a limit, if it is a whole number >= 1 (also what a stored limit
    row's column must hold to be read).

    :raises InvalidOption: naming the bad value.
    """
    if (
        isinstance(max_concurrent, bool)
        or not isinstance(max_concurrent, int)
        or max_concurrent < 1
    ):
        raise InvalidOption(
            f"max_concurrent of resource {name!r} must be a whole number >= 1, "
            f"got {shown(max_concurrent)}"
        )
    return max_concurrent


def checked_retry_delay(name: str, retry_delay: Any) -> float:
    """``retry_delay`` of a limit in seconds (given in seconds or as a ``timedelta``), if it is
    positive and at most :data:`~flask_ratchet.options.MAX_DURATION`.

    :raises InvalidOption: naming the bad value.
    """
    delay = retry_delay.total_seconds() if isinstance(retry_delay, timedelta) else retry_delay
    if (
        isinstance(delay, bool)
        or not isinstance(delay, int | float)
        or not 0 < delay <= MAX_DURATION.total_seconds()
    ):
        # Zero is refused too: a job due again at once would be claimed and deferred in a loop.
        raise InvalidOption(
            f"retry_delay of resource {name!r} must be a positive number of seconds or a "
            f"timedelta, at most {MAX_DURATION.days} days, got {shown(retry_delay)}"
        )
    return float(delay)


def resource_limits_setting(key: str, value: Any) -> dict[str, ResourceLimit]:
    """Read ``RATCHET_RESOURCES``: resource names to ``{"max_concurrent": n, "retry_delay": s}``.

    :raises ConfigError: naming ``key`` and the bad entry.
    """
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"{key} must be a dict like {{'payment-api': {{'max_concurrent': 4, "
            f"'retry_delay': 5}}}}, got {value!r}"
        )
    limits = {}
    for name, entry in value.items():
        if not isinstance(entry, Mapping) or "max_concurrent" not in entry:
            raise ConfigError(
                f"{key}[{name!r}] must be a dict with 'max_concurrent' (and optionally "
                f"'retry_delay'), got {entry!r}"
            )
        unknown = sorted(str(k) for k in entry if k not in ("max_concurrent", "retry_delay"))
        if unknown:
            raise ConfigError(
                f"{key}[{name!r}] has an unknown setting {unknown[0]!r}; the settings are "
                "'max_concurrent' and 'retry_delay'"
            )
        try:
            limits[name] = resource_limit(name, **entry)
        except ValueError as exc:
            raise ConfigError(f"{key}: {exc}") from None
    return limits
