"""Resource limits: what they are and which values they accept. Pure.

A *resource* is anything jobs of many tasks share and must not overload: a payment API, a
licence server, a slow database. A job names one (``@ratchet.task(resource="payment-api")`` or
``.with_resource("payment-api")``); before it runs, the worker takes a permit of that resource in
the database, and with ``max_concurrent`` permits out the job is deferred by ``retry_delay``
without spending an attempt. A resource may also have a *rate*: at most ``count`` starts in any
``period`` (a sliding window, kept as a log of the starts in the database); a job over it is
deferred until the oldest start in the window is ``period`` old. Both hold across every worker
process on the database.

Limits live in ``ratchet_resource_limit``: set them with ``ratchet.configure_resource()``
or the config key ``RATCHET_RESOURCES``, which every worker writes when it starts. A resource
without a limit row has no limit.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from .errors import ConfigError, InvalidOption
from .options import MAX_DURATION, RESOURCE_MAX_LENGTH, shown, validate_text

#: A resource's ``retry_delay`` when its config entry gives none.
DEFAULT_RETRY_DELAY = 5.0


#: Rate units: ``"10/s"``, ``"100/m"``, ``"1000/h"``.
RATE_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}
#: ``N/unit`` or ``N/<length><unit>`` (``5/90s``, ``100/5m``).
_SPELLED_RATE = re.compile(r"([0-9]{1,9})/([0-9]{1,9}(?:\.[0-9]{1,6})?)?([smh])")
#: The most starts a rate counts in one window: its log of starts is read whole per start.
MAX_RATE_COUNT = 100_000
#: The shortest period a rate may have (seconds): below it, the database clock's resolution
#: and the time a permit takes decide, not the rate.
MIN_RATE_PERIOD = 0.001


@dataclass(frozen=True, slots=True)
class Rate:
    """At most ``count`` starts in any ``period`` seconds."""

    count: int
    period: float

    def __str__(self) -> str:
        """``10/s``, ``100/m``, ``5/90s``: what :func:`checked_rate` reads back."""
        for unit, length in RATE_UNITS.items():
            if self.period == length:
                return f"{self.count}/{unit}"
        spelled = f"{self.period:.6f}".rstrip("0").rstrip(".")  # never an exponent
        return f"{self.count}/{spelled}s"


@dataclass(frozen=True, slots=True)
class ResourceLimit:
    """At most ``max_concurrent`` jobs hold a permit of ``name`` at once (``None``: no such
    limit), and at most ``rate.count`` start in any ``rate.period`` (``None``: no rate); a job
    that finds no permit free is due again ``retry_delay`` seconds later, one over the rate when
    the window has room again."""

    name: str
    max_concurrent: int | None
    retry_delay: float
    rate: Rate | None = None

    @property
    def summary(self) -> str:
        """What the limit allows, for people: ``4 at once, 10/s``."""
        parts = [] if self.max_concurrent is None else [f"{self.max_concurrent} at once"]
        return ", ".join(parts + ([] if self.rate is None else [str(self.rate)]))


def resource_limit(
    name: Any,
    max_concurrent: Any = None,
    retry_delay: Any = DEFAULT_RETRY_DELAY,
    rate: Any = None,
) -> ResourceLimit:
    """Validate a limit given by a user (``retry_delay`` in seconds or a ``timedelta``;
    ``rate`` as ``(count, period)`` or a string like ``"10/s"``: see :func:`checked_rate`).

    :raises InvalidOption: naming the bad value, or if neither ``max_concurrent`` nor ``rate``
        is given.
    """
    validate_text("a resource name", name, RESOURCE_MAX_LENGTH)
    if max_concurrent is None and rate is None:
        raise InvalidOption(
            f"resource {name!r} needs max_concurrent, rate or both "
            "(e.g. max_concurrent=4, rate=(100, timedelta(minutes=1)) or rate='10/s')"
        )
    return ResourceLimit(
        name,
        None if max_concurrent is None else checked_max_concurrent(name, max_concurrent),
        checked_retry_delay(name, retry_delay),
        None if rate is None else checked_rate(name, rate),
    )


def checked_rate(name: str, rate: Any) -> Rate:
    """A rate given as ``(count, period)`` (``period`` in seconds or a ``timedelta``), as a
    :class:`Rate`, or as ``"N/s"``, ``"N/m"`` or ``"N/h"``; ``count`` from 1 to
    :data:`MAX_RATE_COUNT`, ``period`` positive and at most ``MAX_DURATION``.

    :raises InvalidOption: naming the bad value and the forms a rate takes.
    """
    count: Any
    period: Any
    if isinstance(rate, Rate):
        count, period = rate.count, rate.period
    elif isinstance(rate, str):
        spelled = _SPELLED_RATE.fullmatch(rate.strip())
        if spelled is None:
            count = period = None
        else:
            number, length, unit = spelled.groups()
            count = int(number)
            period = RATE_UNITS[unit] if length is None else float(length) * RATE_UNITS[unit]
    elif isinstance(rate, tuple | list) and len(rate) == 2:
        count, period = rate
    else:
        count = period = None
    length = period.total_seconds() if isinstance(period, timedelta) else period
    if (
        isinstance(count, bool)
        or not isinstance(count, int)
        or not 1 <= count <= MAX_RATE_COUNT
        or isinstance(length, bool)
        or not isinstance(length, int | float)
        or not MIN_RATE_PERIOD <= length <= MAX_DURATION.total_seconds()
    ):
        raise InvalidOption(
            f"rate of resource {name!r} must be (count, period) with a count from 1 to "
            f"{MAX_RATE_COUNT} and a period of {MIN_RATE_PERIOD} s to {MAX_DURATION.days} days "
            "in seconds or a timedelta, or a string like "
            f"'10/s', '100/m', '1000/h' or '5/90s'; got {shown(rate)}"
        )
    return Rate(count, float(length))


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


#: What an entry of ``RATCHET_RESOURCES`` may set.
SETTINGS = ("max_concurrent", "rate", "retry_delay")


def resource_limits_setting(key: str, value: Any) -> dict[str, ResourceLimit]:
    """Read ``RATCHET_RESOURCES``: resource names to ``{"max_concurrent": n, "rate": "10/s",
    "retry_delay": s}`` (``max_concurrent``, ``rate`` or both).

    :raises ConfigError: naming ``key`` and the bad entry.
    """
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"{key} must be a dict like {{'payment-api': {{'max_concurrent': 4, "
            f"'rate': '10/s', 'retry_delay': 5}}}}, got {value!r}"
        )
    limits = {}
    for name, entry in value.items():
        if not isinstance(entry, Mapping) or not ({"max_concurrent", "rate"} & set(entry)):
            raise ConfigError(
                f"{key}[{name!r}] must be a dict with 'max_concurrent', 'rate' or both (and "
                f"optionally 'retry_delay'), got {entry!r}"
            )
        unknown = sorted(str(k) for k in entry if k not in SETTINGS)
        if unknown:
            raise ConfigError(
                f"{key}[{name!r}] has an unknown setting {unknown[0]!r}; the settings are "
                "'max_concurrent', 'rate' and 'retry_delay'"
            )
        try:
            limits[name] = resource_limit(name, **entry)
        except ValueError as exc:
            raise ConfigError(f"{key}: {exc}") from None
    return limits
