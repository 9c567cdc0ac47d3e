"""Circuit breakers: stop calling a service that keeps failing, and try it again later.

Pure and in memory: no IO, no threads of its own; the clock is a parameter (``time.monotonic``
by default) so that tests can move time themselves.

A breaker watches one *service*: a task's name, or the ``service=`` several tasks share. It is
count-based::

    CLOSED --(at least min_calls of the last `window` calls, failure_rate of them failed)--> OPEN
    OPEN --(open_for seconds later, at the next call)--> HALF_OPEN
    HALF_OPEN --(half_open_calls trial calls all succeed)--> CLOSED
    HALF_OPEN --(any trial call fails)--> OPEN (for open_for again)

While OPEN, :meth:`CircuitBreaker.allow` answers how long to wait; the worker defers the job by
that long without spending an attempt. In HALF_OPEN at most ``half_open_calls`` trial calls run
at once; further calls wait :data:`HALF_OPEN_BUSY_DELAY` (or ``open_for``, if shorter).

**State is per worker process**: each worker learns about a service from its own calls, and a
breaker that opens in one worker does not open in another. With many workers a failing service
still sees a few calls from each of them before all of their breakers are open; what a breaker
saves is the long tail of calls, not the first ones. Restarting a worker closes its breakers.

Breakers are opt-in. A task gets one with ``@ratchet.task(circuit_breaker="external-api")`` (a
preset name, a :class:`BreakerSettings`, or a dict of its fields) or through the config key
``RATCHET_CIRCUIT_BREAKERS`` (service name -> the same), which takes precedence.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from datetime import timedelta
from enum import StrEnum
from typing import Any

from .errors import ConfigError

#: The longest a call waits while the half-open trial calls are out (``open_for`` if shorter):
#: long enough not to spin, short enough to follow right behind a trial that succeeds.
HALF_OPEN_BUSY_DELAY = 1.0

#: The action of the audit row an operator's reset of a circuit breaker writes, which every
#: worker's heartbeat reads (the breakers are per process: each applies the reset itself).
BREAKER_RESET = "reset-breaker"

#: Bounds that keep a mistyped setting from allocating a huge window or never closing.
MAX_WINDOW = 10_000
MAX_HALF_OPEN_CALLS = 1_000


class BreakerState(StrEnum):
    """Where a breaker is."""

    CLOSED = "CLOSED"  # calls run; outcomes are counted
    OPEN = "OPEN"  # calls are deferred until ``open_for`` has passed
    HALF_OPEN = "HALF_OPEN"  # a few trial calls decide between CLOSED and OPEN


@dataclass(frozen=True, slots=True)
class BreakerSettings:
    """How one breaker decides.

    :param window: how many of the latest calls are counted (while CLOSED).
    :param failure_rate: the share of failed calls in the window that opens the breaker
        (``0 < failure_rate <= 1``).
    :param open_for: seconds an open breaker defers calls before it lets trial calls through.
    :param half_open_calls: trial calls in HALF_OPEN: at most this many at once, and this many
        must succeed to close it.
    :param min_calls: calls the window must hold before the failure rate counts
        (``1 <= min_calls <= window``), so that one early failure does not open the breaker.

    :raises ValueError: naming the first bad field.
    """

    window: int
    failure_rate: float
    open_for: float
    half_open_calls: int
    min_calls: int

    def __post_init__(self) -> None:
        _whole("window", self.window, 1, MAX_WINDOW)
        _whole("half_open_calls", self.half_open_calls, 1, MAX_HALF_OPEN_CALLS)
        _whole("min_calls", self.min_calls, 1, self.window)
        rate = self.failure_rate
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 < rate <= 1:
            raise ValueError(f"failure_rate must be a number above 0 and at most 1, got {rate!r}")
        wait = self.open_for
        if (
            isinstance(wait, bool)
            or not isinstance(wait, int | float)
            or not math.isfinite(wait)
            or wait <= 0
        ):
            raise ValueError(f"open_for must be a positive number of seconds, got {wait!r}")


def _whole(name: str, value: Any, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be a whole number from {low} to {high}, got {value!r}")


#: Named settings for ``circuit_breaker=``. Each opens at half or more failures; they differ in
#: how much evidence they want first and how long they stay away.
PRESETS: dict[str, BreakerSettings] = {
    # A sensible start: 20 calls, judged once 10 are in; 30 s away; 3 trials to come back.
    "default": BreakerSettings(
        window=20, failure_rate=0.5, open_for=30.0, half_open_calls=3, min_calls=10
    ),
    # Cheap, frequent calls to an internal service: judged on few calls, back after 5 s on one
    # good trial, so a blip costs seconds, not minutes.
    "fast": BreakerSettings(
        window=10, failure_rate=0.5, open_for=5.0, half_open_calls=1, min_calls=5
    ),
    # Work that must get through (payments, alerts): opens only when three calls in four fail
    # over a long window, and tries again after 10 s, so that it never sheds work on a hunch.
    "critical": BreakerSettings(
        window=50, failure_rate=0.75, open_for=10.0, half_open_calls=5, min_calls=20
    ),
    # Third-party APIs: their outages last minutes and hammering them (or their rate limits)
    # makes things worse, so stay away a minute and come back carefully.
    "external-api": BreakerSettings(
        window=20, failure_rate=0.5, open_for=60.0, half_open_calls=2, min_calls=10
    ),
}


def breaker_settings(spec: BreakerSettings | str | Mapping[str, Any]) -> BreakerSettings:
    """Resolve what a user wrote: a preset name, a :class:`BreakerSettings`, or a dict of its
    fields (``open_for`` may be a ``timedelta``; missing fields come from the preset named by
    ``"preset"``, default ``"default"``).

    ::

        breaker_settings("external-api")
        breaker_settings({"preset": "fast", "open_for": timedelta(seconds=2)})

    :raises ValueError: naming the presets, or the bad field.
    """
    if isinstance(spec, BreakerSettings):
        return spec
    if isinstance(spec, str):
        return _preset(spec)
    if isinstance(spec, Mapping):
        changes = dict(spec)
        base = _preset(changes.pop("preset", "default"))
        known = [f.name for f in fields(BreakerSettings)]
        unknown = sorted(str(k) for k in changes if k not in known)
        if unknown:
            raise ValueError(
                f"unknown circuit breaker setting {unknown[0]!r}; the settings are "
                f"{', '.join(known)} (and 'preset')"
            )
        if isinstance(changes.get("open_for"), timedelta):
            changes["open_for"] = changes["open_for"].total_seconds()
        return replace(base, **changes)
    raise ValueError(
        f"a circuit breaker is a preset name ({_preset_names()}), a BreakerSettings or a dict "
        f"of its fields, got {spec!r}"
    )


def _preset(name: Any) -> BreakerSettings:
    settings = PRESETS.get(name) if isinstance(name, str) else None
    if settings is None:
        raise ValueError(f"unknown circuit breaker preset {name!r}; use one of {_preset_names()}")
    return settings


def _preset_names() -> str:
    return ", ".join(repr(n) for n in PRESETS)


@dataclass(frozen=True, slots=True)
class BreakerSnapshot:
    """A breaker's state at one moment (``dataclasses.asdict`` makes it JSON)."""

    state: BreakerState
    #: Calls and failures in the window (CLOSED), and their failure rate (0 when empty).
    calls: int
    failures: int
    failure_rate: float
    #: Seconds until an OPEN breaker lets trial calls through (0 otherwise).
    open_for_left: float
    #: HALF_OPEN: trial calls running, and trial calls that succeeded.
    trials_running: int
    trials_succeeded: int
    #: How often the breaker has opened since it was made (or reset).
    times_opened: int


class CircuitBreaker:
    """One service's breaker. Thread-safe: every job thread of a worker shares it.

    ::

        wait = breaker.allow()
        if wait is not None:
            defer(wait)              # do not call the service now
        else:
            try:
                call_service()
            except Exception:
                breaker.record(success=False)
                raise
            breaker.record(success=True)

    A call :meth:`allow` let through must end in :meth:`record` or, if it never ran after all,
    :meth:`abandon`: in HALF_OPEN it holds one of the few trial places until then. Outcomes are
    judged by the state the breaker is in when they arrive: one that arrives while OPEN is
    ignored, and in HALF_OPEN only as many as there are trial calls out are counted.
    """

    def __init__(
        self,
        settings: BreakerSettings,
        clock: Callable[[], float] = time.monotonic,
        *,
        name: str = "",
    ) -> None:
        #: The service it guards (for log lines).
        self.name = name
        self.settings = settings
        self._clock = clock
        self._lock = threading.Lock()
        self._state = BreakerState.CLOSED
        self._outcomes: deque[bool] = deque(maxlen=settings.window)  # True: the call failed
        self._failures = 0
        self._opened_at = 0.0
        self._trials_running = 0
        self._trials_succeeded = 0
        self._times_opened = 0
        #: Changes of state so far: outcomes are counted only in the state that admitted them.
        self._epoch = 0

    @property
    def state(self) -> BreakerState:
        """The current state (an OPEN breaker whose wait is over says OPEN until the next
        :meth:`allow`)."""
        return self._state

    def allow(self) -> float | None:
        """``None``: make the call. A number: do not; ask again in that many seconds.

        :meth:`admit` says the same and also which state let the call through; pass its
        ``epoch`` to :meth:`record` so an outcome that arrives after the state changed (a call
        let through while CLOSED that returns once HALF_OPEN) is not taken for a trial's.
        """
        return self.admit()[0]

    def admit(self) -> tuple[float | None, int]:
        """:meth:`allow`, and the epoch (state change count) the answer was given in."""
        with self._lock:
            return self._allow(), self._epoch

    def _allow(self) -> float | None:
        # Called with the lock held.
        if self._state is BreakerState.OPEN:
            left = self._opened_at + self.settings.open_for - self._clock()
            if left > 0:
                return left
            self._state = BreakerState.HALF_OPEN
            self._epoch += 1
            self._trials_running = self._trials_succeeded = 0
        if self._state is BreakerState.HALF_OPEN:
            if self._trials_running + self._trials_succeeded >= self.settings.half_open_calls:
                return min(HALF_OPEN_BUSY_DELAY, self.settings.open_for)
            self._trials_running += 1
        return None

    def record(self, success: bool, epoch: int | None = None) -> BreakerState | None:
        """Count the outcome of a call :meth:`allow` let through (``epoch``: from
        :meth:`admit`; an outcome from an earlier state is ignored).

        :returns: the new state, if this outcome changed it (for a log line), else ``None``.
        """
        with self._lock:
            if epoch is not None and epoch != self._epoch:
                return None
            if self._state is BreakerState.CLOSED:
                return self._count(failed=not success)
            if self._state is BreakerState.HALF_OPEN and self._trials_running > 0:
                self._trials_running -= 1
                if not success:
                    return self._open()
                self._trials_succeeded += 1
                if self._trials_succeeded >= self.settings.half_open_calls:
                    return self._close()
            return None

    def abandon(self, epoch: int | None = None) -> None:
        """A call :meth:`allow` let through did not run after all: free its trial place."""
        with self._lock:
            if epoch is not None and epoch != self._epoch:
                return
            if self._state is BreakerState.HALF_OPEN and self._trials_running > 0:
                self._trials_running -= 1

    def reset(self) -> None:
        """Back to CLOSED with an empty window (and no memory of past openings)."""
        with self._lock:
            self._close()
            self._times_opened = 0

    def snapshot(self) -> BreakerSnapshot:
        """What the breaker knows now."""
        with self._lock:
            calls = len(self._outcomes)
            left = 0.0
            if self._state is BreakerState.OPEN:
                left = max(0.0, self._opened_at + self.settings.open_for - self._clock())
            return BreakerSnapshot(
                state=self._state,
                calls=calls,
                failures=self._failures,
                failure_rate=self._failures / calls if calls else 0.0,
                open_for_left=left,
                trials_running=self._trials_running,
                trials_succeeded=self._trials_succeeded,
                times_opened=self._times_opened,
            )

    # -- transitions (with the lock held) --------------------------------------------------------

    def _count(self, *, failed: bool) -> BreakerState | None:
        if len(self._outcomes) == self._outcomes.maxlen and self._outcomes[0]:
            self._failures -= 1  # the oldest outcome is about to fall out of the window
        self._outcomes.append(failed)
        self._failures += failed
        calls = len(self._outcomes)
        if calls < self.settings.min_calls:
            return None
        # A quotient, not ``failures >= rate * calls``: 0.3 * 10 is 3.0000000000000004.
        if self._failures / calls >= self.settings.failure_rate:
            return self._open()
        return None

    def _open(self) -> BreakerState:
        self._state = BreakerState.OPEN
        self._epoch += 1
        self._opened_at = self._clock()
        self._times_opened += 1
        self._forget()
        return self._state

    def _close(self) -> BreakerState:
        self._state = BreakerState.CLOSED
        self._epoch += 1
        self._forget()
        return self._state

    def _forget(self) -> None:
        # Each state starts from scratch: failures before an opening do not count against the
        # service once it has proved itself again, nor do trials against the next window.
        self._outcomes.clear()
        self._failures = 0
        self._trials_running = self._trials_succeeded = 0


class Breakers:
    """The breakers of one worker process, one per service, made at the service's first call.

    ``configured`` (from ``RATCHET_CIRCUIT_BREAKERS``) gives a service a breaker, or other
    settings than its task's, by name. The first settings a service is seen with are the ones
    its breaker keeps.
    """

    def __init__(
        self,
        configured: Mapping[str, BreakerSettings] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._configured = dict(configured or {})
        self._clock = clock
        self._by_service: dict[str, CircuitBreaker] = {}
        self._lock = threading.Lock()

    def get(self, service: str, settings: BreakerSettings | None) -> CircuitBreaker | None:
        """The breaker of ``service``, or ``None`` if it has none (neither ``settings`` from
        its task nor an entry in the config)."""
        if settings is None and not self._configured:
            return None  # the common case costs one test: no breakers anywhere
        settings = self._configured.get(service, settings)
        if settings is None:
            return None
        breaker = self._by_service.get(service)
        if breaker is None:
            with self._lock:
                breaker = self._by_service.get(service)
                if breaker is None:
                    breaker = CircuitBreaker(settings, self._clock, name=service)
                    self._by_service[service] = breaker
        return breaker

    def reset(self, service: str) -> bool:
        """Reset the breaker of ``service`` (an operator's request); False if it has none here."""
        with self._lock:
            breaker = self._by_service.get(service)
        if breaker is None:
            return False
        breaker.reset()
        return True

    def snapshots(self) -> dict[str, BreakerSnapshot]:
        """Every breaker made so far, by service."""
        with self._lock:
            breakers = dict(self._by_service)
        return {service: b.snapshot() for service, b in sorted(breakers.items())}


def breakers_setting(key: str, value: Any) -> dict[str, BreakerSettings]:
    """Read ``RATCHET_CIRCUIT_BREAKERS``: service names to a preset name or settings.

    :raises ConfigError: naming ``key`` and the bad entry.
    """
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"{key} must be a dict of service name -> preset name or settings, like "
            f"{{'stripe': 'external-api'}}, got {value!r}"
        )
    breakers = {}
    for service, spec in value.items():
        if not isinstance(service, str) or not service or len(service) > 255:
            raise ConfigError(f"{key} keys must be service or task names, got {service!r}")
        try:
            breakers[service] = breaker_settings(spec)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{key}[{service!r}]: {exc}") from None
    return breakers
