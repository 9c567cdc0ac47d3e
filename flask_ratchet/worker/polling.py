"""How long the poller waits before its next claim. Pure: no IO, the clock is injected.

Modes, as the seeds describe them:

- **burst**: right after a wake-up, poll every ``burst`` seconds until a few polls find nothing;
- **normal**: from ``minimum`` to ``maximum`` seconds. Polls that find work keep the delay short
  (shorter still after three full batches in a row, as a backlog is draining); every empty poll in
  a row doubles it; a busy executor stretches it (there is little room to fill anyway);
- **deep idle**: ``deep`` seconds once nothing was found for ``deep_after`` seconds.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

#: Empty polls in a row that end a burst.
BURST_EMPTY_POLLS = 3
#: Full batches in a row that mean a backlog is draining.
FULL_STREAK = 3
#: Poll results remembered.
WINDOW = 10


class Mode(StrEnum):
    BURST = "burst"
    NORMAL = "normal"
    DEEP_IDLE = "deep-idle"


@dataclass
class PollingStrategy:
    """Adaptive polling delays; call :meth:`record` after each claim and :meth:`delay` to sleep."""

    minimum: float = 2.0
    maximum: float = 30.0
    burst: float = 0.5
    deep: float = 60.0
    deep_after: float = 300.0
    clock: Callable[[], float] = time.monotonic
    window: deque[int] = field(default_factory=lambda: deque(maxlen=WINDOW))
    empty_polls: int = 0
    full_streak: int = 0
    bursting: bool = False
    last_work: float = field(default=-1.0)

    def __post_init__(self) -> None:
        if self.last_work < 0:
            self.last_work = self.clock()

    def wake(self) -> None:
        """New work was announced: poll fast until it stops turning up."""
        self.bursting = True
        self.empty_polls = 0
        self.last_work = self.clock()

    def record(self, claimed: int, requested: int) -> None:
        """The last claim asked for ``requested`` jobs and got ``claimed``."""
        self.window.append(claimed)
        if claimed:
            self.last_work = self.clock()
            self.empty_polls = 0
        else:
            self.empty_polls += 1
            if self.empty_polls >= BURST_EMPTY_POLLS:
                self.bursting = False
        self.full_streak = self.full_streak + 1 if requested and claimed >= requested else 0

    @property
    def mode(self) -> Mode:
        if self.bursting:
            return Mode.BURST
        if self.clock() - self.last_work >= self.deep_after:
            return Mode.DEEP_IDLE
        return Mode.NORMAL

    def delay(self, utilization: float = 0.0) -> float:
        """Seconds until the next poll; ``utilization`` is the busy share of executor threads."""
        mode = self.mode
        if mode == Mode.BURST:
            return self.burst
        if mode == Mode.DEEP_IDLE:
            return self.deep
        if self.full_streak >= FULL_STREAK:
            return self.minimum / 4
        if self.empty_polls:
            delay = self.minimum * 2 ** min(self.empty_polls - 1, 16)
        else:
            delay = self.minimum
        delay *= 0.5 + max(0.0, min(utilization, 1.0))  # 0.5x when idle, 1.5x when saturated
        return float(max(self.minimum / 4, min(delay, self.maximum)))
