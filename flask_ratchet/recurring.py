"""Recurring jobs: what a master is, the misfire policies, and which fire times to create. Pure.

A *master* (a row of ``ratchet_recurring``) holds a cron expression, a zone, a task with its
arguments and options, and ``next_fire``. When ``next_fire`` comes, a worker creates a *child*: a
normal job carrying the master's id and the fire time it stands for (see
:mod:`flask_ratchet.maintenance.recurring`).

Misfires. An occurrence more than ``RATCHET_RECURRING_MISFIRE_THRESHOLD`` seconds late (the
workers were down, or the master was disabled) has *misfired*. A single due occurrence always
runs, however late. When two or more are due, the occurrences that are merely late (within the
threshold) run, and the master's :class:`Misfire` policy decides how many of the misfired ones do:
none (``SKIP``), the most recent one (``FIRE_ONCE``, the default) or the most recent ``n``
(``Misfire.catch_up(n)``).
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, ClassVar

from .cron import next_fire
from .options import Backoff, JobOptions, Priority

#: Catch-up counts above this are refused: a policy, not a backlog generator.
CATCH_UP_MAX = 1000
#: Fire times looked at per pass when deciding a long misfire; older ones are skipped in halves.
SCAN_LIMIT = 10_000


class RecurringStatus(StrEnum):
    """The status of a recurring master."""

    ACTIVE = "ACTIVE"  # fires
    PAUSED = "PAUSED"  # keeps its definition, creates no children
    CANCELED = "CANCELED"  # ended; its id is free to be registered again


@dataclass(frozen=True, slots=True)
class Misfire:
    """What to do when two or more occurrences are due and some of them misfired.

    ``Misfire.SKIP`` runs none of the misfired occurrences, ``Misfire.FIRE_ONCE`` the most recent
    one, ``Misfire.catch_up(n)`` the most recent ``n`` (in order). ``catch_up(1)`` is
    ``FIRE_ONCE``.
    """

    limit: int

    SKIP: ClassVar[Misfire]
    FIRE_ONCE: ClassVar[Misfire]

    @classmethod
    def catch_up(cls, n: int) -> Misfire:
        """Run up to the ``n`` most recent misfired occurrences (1 to 1000)."""
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= CATCH_UP_MAX:
            raise ValueError(f"catch_up(n) needs n from 1 to {CATCH_UP_MAX}, got {n!r}")
        return cls(n)

    def __repr__(self) -> str:
        return f"Misfire.catch_up({self.limit})" if self.limit > 1 else f"Misfire.{self}"

    def __str__(self) -> str:
        if self.limit == 0:
            return "SKIP"
        if self.limit == 1:
            return "FIRE_ONCE"
        return f"CATCH_UP({self.limit})"

    @classmethod
    def parse(cls, text: str) -> Misfire:
        """Read what ``str()`` wrote: ``SKIP``, ``FIRE_ONCE`` or ``CATCH_UP(n)``."""
        if text == "SKIP":
            return cls.SKIP
        if text == "FIRE_ONCE":
            return cls.FIRE_ONCE
        match = re.fullmatch(r"CATCH_UP\((\d+)\)", text)
        if match is None:
            raise ValueError(f"misfire policy must be SKIP, FIRE_ONCE or CATCH_UP(n), got {text!r}")
        return cls.catch_up(int(match.group(1)))


Misfire.SKIP = Misfire(0)
Misfire.FIRE_ONCE = Misfire(1)


def misfire_policy(value: Any) -> Misfire:
    """Validate a user's misfire policy: a :class:`Misfire` or its name."""
    if isinstance(value, Misfire):
        return value
    if isinstance(value, str):
        return Misfire.parse(value.upper())
    raise ValueError(
        f"misfire must be Misfire.SKIP, Misfire.FIRE_ONCE or Misfire.catch_up(n), got {value!r}"
    )


@dataclass(frozen=True, slots=True)
class RecurringDefinition:
    """Everything a master is made of, validated, as it is stored."""

    id: str
    name: str
    task: str
    cron: str
    zone: str
    payload: str  # JSON {"args": [...], "kwargs": {...}}
    options: JobOptions
    misfire: Misfire

    def options_json(self) -> str:
        """The child jobs' options as stored in ``ratchet_recurring.options``."""
        return encode_options(self.options)


def encode_options(options: JobOptions) -> str:
    """``JobOptions`` as JSON, keys sorted (so equal options are equal text)."""
    return json.dumps(
        {
            "priority": int(options.priority),
            "max_retries": options.max_retries,
            "backoff": str(options.backoff),
            "backoff_base": options.backoff_base,
            "timeout": options.timeout,
            "resource": options.resource,
            "tags": list(options.tags),
            "params": options.params,
        },
        sort_keys=True,
        separators=(",", ":"),
    )


def decode_options(text: str) -> JobOptions:
    """The inverse of :func:`encode_options`."""
    raw = json.loads(text)
    return JobOptions(
        priority=Priority(raw["priority"]),
        max_retries=raw["max_retries"],
        backoff=Backoff(raw["backoff"]),
        backoff_base=raw["backoff_base"],
        timeout=raw["timeout"],
        resource=raw["resource"],
        tags=tuple(raw["tags"]),
        params=raw["params"],
    )


@dataclass(frozen=True, slots=True)
class RecurringJob:
    """A read-only snapshot of one master, as :meth:`Ratchet.list_recurring` returns it."""

    id: str
    name: str
    task: str
    cron: str
    zone: str
    status: RecurringStatus
    #: The next occurrence (UTC); ``None`` when paused, canceled, or the schedule has ended.
    next_fire: datetime | None
    #: The fire time of the newest child.
    last_fire: datetime | None
    misfire: Misfire
    options: JobOptions
    args: list[Any]
    kwargs: dict[str, Any]
    created_at: datetime
    updated_at: datetime


# -- which fire times to create -------------------------------------------------------------------


def plan_fires(
    cron: str,
    zone: str,
    first_due: datetime,
    now: datetime,
    policy: Misfire,
    threshold: timedelta,
) -> tuple[list[datetime], datetime | None]:
    """The fire times to create children for now, oldest first, and the master's next fire.

    ``first_due`` is the master's ``next_fire`` (an occurrence of ``cron``); ``now`` is the
    database's time.
    """
    upcoming = next_fire(cron, zone, now)
    if first_due > now:
        return [], first_due
    cutoff = now - threshold  # occurrences at or before it have misfired
    missed, missed_count = _latest(cron, zone, first_due, cutoff, max(policy.limit, 1))
    late_from = first_due if first_due > cutoff else next_fire(cron, zone, cutoff)
    late, _ = _latest(cron, zone, late_from, now, None)
    if missed_count + len(late) <= 1:
        return missed + late, upcoming  # a single due occurrence always runs
    keep = missed[len(missed) - policy.limit :] if policy.limit else []
    return keep + late, upcoming


def _latest(
    cron: str, zone: str, first: datetime | None, last: datetime, keep: int | None
) -> tuple[list[datetime], int]:
    """The newest ``keep`` (all, for ``None``) fire times from ``first`` (inclusive, itself a
    fire time) to ``last`` (inclusive), and how many there are (at least ``SCAN_LIMIT`` when
    the span was too long to count)."""
    count_floor = 0
    found: deque[datetime] = deque(maxlen=keep)
    while first is not None and first <= last:
        found = deque(maxlen=keep)
        count = 0
        for t in _times(cron, zone, first, last):
            found.append(t)
            count += 1
            if count > SCAN_LIMIT:
                break
        else:
            return list(found), max(count, count_floor)
        # Too many to walk: look for the newest ones in the later half of the span.
        count_floor = SCAN_LIMIT
        first = next_fire(cron, zone, first + (last - first) / 2)
    return list(found), count_floor  # the later half was empty: the newest seen are the last


def _times(cron: str, zone: str, first: datetime, last: datetime) -> Iterator[datetime]:
    current: datetime | None = first
    while current is not None and current <= last:
        yield current
        current = next_fire(cron, zone, current)
