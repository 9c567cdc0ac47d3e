"""Recurring jobs: what a master is, the misfire policies, and which fire times to create. Pure.

A *master* (a row of ``ratchet_recurring``) holds a cron expression, a zone, a task with its
arguments and options, and ``next_fire``. When ``next_fire`` comes, a worker creates a *child*: a
normal job carrying the master's id and the fire time it stands for (see
:mod:`flask_ratchet.maintenance.recurring`).

Misfires. An occurrence more than ``RATCHET_RECURRING_MISFIRE_THRESHOLD`` seconds late (the
workers were down, or the master was disabled) has *misfired*. A single due occurrence always
runs, however late. When two or more are due and none has misfired (a short hiccup), they all
run. When two or more are due and any has misfired, the master's :class:`Misfire` policy decides
among all the due ones, as Quartz does: none (``SKIP``), the most recent one (``FIRE_ONCE``, the
default) or the most recent ``n`` (``Misfire.catch_up(n)``).
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, fields, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, ClassVar

from . import payload
from .cron import next_fire
from .errors import UnreadableJob
from .options import DEFAULT_QUEUE, JobOptions, validate_options
from .payload import Sealed, Unreadable, decode_stored
from .sealing import MASTER_PAYLOAD, Keyring, master_binding

#: Catch-up counts above this are refused: a policy, not a backlog generator.
CATCH_UP_MAX = 1000
#: Most children one pass creates for one master when nothing misfired (a threshold far longer
#: than the schedule's period); the newest are kept.
LATE_MAX = CATCH_UP_MAX


class RecurringStatus(StrEnum):
    """The status of a recurring master."""

    ACTIVE = "ACTIVE"  # fires
    PAUSED = "PAUSED"  # keeps its definition, creates no children
    CANCELED = "CANCELED"  # ended; its id is free to be registered again


@dataclass(frozen=True, slots=True)
class Misfire:
    """What to do when two or more occurrences are due and at least one of them misfired.

    ``Misfire.SKIP`` runs none of the due occurrences, ``Misfire.FIRE_ONCE`` the most recent
    one, ``Misfire.catch_up(n)`` the most recent ``n`` (in order). ``catch_up(1)`` is
    ``FIRE_ONCE``.
    """

    limit: int

    SKIP: ClassVar[Misfire]
    FIRE_ONCE: ClassVar[Misfire]

    @classmethod
    def catch_up(cls, n: int) -> Misfire:
        """Run up to the ``n`` most recent due occurrences (1 to 1000)."""
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
    #: The arguments are stored sealed (:mod:`flask_ratchet.sealing`), and so is each child's
    #: copy, and each child's result.
    encrypt: bool = False

    def options_json(self) -> str:
        """The child jobs' options as stored in ``ratchet_recurring.options``."""
        return encode_options(self.options)


def encode_options(options: JobOptions) -> str:
    """``JobOptions`` as JSON, keys sorted (so equal options are equal text)."""
    return json.dumps(
        {
            "queue": options.queue,
            "priority": int(options.priority),
            "max_retries": options.max_retries,
            "backoff": str(options.backoff),
            "backoff_base": options.backoff_base,
            "timeout": options.timeout,
            "resource": options.resource,
            "tags": list(options.tags),
            "params": options.params,
            "expires": options.expires,
        },
        sort_keys=True,
        separators=(",", ":"),
    )


def decode_options(text: str) -> JobOptions:
    """The inverse of :func:`encode_options`, checking each value as a user's is checked: a
    master's row may have been written by hand.

    :raises UnreadableJob: naming the ``options`` column, for anything ratchet does not write.
    """
    raw = decode_stored("options", text, dict)
    # Masters written before queues existed have none: their children go to the default queue.
    raw.setdefault("queue", DEFAULT_QUEUE)
    raw.setdefault("expires", None)  # nor, before expiry existed, a deadline
    try:
        return JobOptions(**validate_options(**{name: raw[name] for name in _OPTION_NAMES}))
    except KeyError as exc:
        raise UnreadableJob(f"column 'options' has no {exc} option") from None
    except (ValueError, TypeError) as exc:
        raise UnreadableJob(f"column 'options' holds options ratchet never writes: {exc}") from None


_OPTION_NAMES = tuple(f.name for f in fields(JobOptions))


def decode_misfire(text: str) -> Misfire:
    """A master's stored misfire policy.

    :raises UnreadableJob: naming the ``misfire`` column, for anything ``str(Misfire)`` does
        not write.
    """
    try:
        return Misfire.parse(text)
    except (ValueError, TypeError) as exc:
        raise UnreadableJob(f"column 'misfire' holds {text!r}: {exc}") from None


@dataclass(frozen=True, slots=True)
class RecurringJob:
    """A read-only snapshot of one master, as :meth:`~flask_ratchet.Ratchet.list_recurring`
    returns it.

    Stored values are read defensively, as in :class:`~flask_ratchet.job.Job`: a ``status``,
    ``misfire``, ``options`` or ``payload`` column (``args`` and ``kwargs``) that does not hold
    what ratchet writes is an :class:`~flask_ratchet.payload.Unreadable` with the raw text.
    """

    id: str
    name: str
    task: str
    #: As stored: a row written by hand may hold an expression or zone that cannot be evaluated.
    cron: str
    zone: str
    status: RecurringStatus | Unreadable
    #: The next occurrence (UTC); ``None`` when paused, canceled, or the schedule has ended.
    next_fire: datetime | None
    #: The fire time of the newest child.
    last_fire: datetime | None
    misfire: Misfire | Unreadable
    options: JobOptions | Unreadable
    args: list[Any] | Unreadable
    kwargs: dict[str, Any] | Unreadable
    created_at: datetime
    updated_at: datetime


def opened(master: RecurringJob, keyring: Keyring) -> RecurringJob:
    """``master`` with its sealed arguments opened with the app's keys (ones that do not open
    are :class:`~flask_ratchet.payload.Unreadable`, saying why)."""
    if not isinstance(master.args, Sealed):
        return master
    try:
        call = keyring.open(master.args.text, master_binding(master.id), MASTER_PAYLOAD)
    except UnreadableJob as exc:
        unread = Unreadable(master.args.text, str(exc))
        return replace(master, args=unread, kwargs=unread)
    args, kwargs = payload.read_call(call)
    return replace(master, args=args, kwargs=kwargs)


# -- which fire times to create -------------------------------------------------------------------


def plan_fires(
    cron: str,
    zone: str,
    first_due: datetime,
    now: datetime,
    policy: Misfire,
    threshold: timedelta,
    after: datetime | None = None,
) -> tuple[list[datetime], datetime | None]:
    """The fire times to create children for now, oldest first, and the master's next fire.

    ``first_due`` is the master's ``next_fire`` (an occurrence of ``cron``); ``now`` is the
    database's time; ``after`` is the master's ``last_fire``: occurrences at or before it already
    have their child and are never planned again.

    When none of the due occurrences has misfired, all of them run (at most :data:`LATE_MAX`, the
    newest). When one has, the policy decides among all of them, as Quartz does: a late
    occurrence next to a misfired one is part of the same outage. A single due occurrence always
    runs. The cost is a few dozen cron evaluations however long the outage was.
    """
    if first_due > now:
        return [], first_due
    upcoming = next_fire(cron, zone, now)
    if after is not None and first_due <= after:
        first_due_after = next_fire(cron, zone, after)
        if first_due_after is None or first_due_after > now:
            return [], upcoming  # every due occurrence already has its child
        first_due = first_due_after
    single = (following := next_fire(cron, zone, first_due)) is None or following > now
    if single:
        return [first_due], upcoming
    if first_due > now - threshold:
        return newest(cron, zone, first_due, now, LATE_MAX), upcoming
    if policy.limit == 0:
        return [], upcoming
    return newest(cron, zone, first_due, now, policy.limit), upcoming


def latest_at_or_before(cron: str, zone: str, first: datetime, last: datetime) -> datetime:
    """The newest fire time at or before ``last``, given ``first``, a fire time at or before it.

    Bisection on time: O(log((last - first) / 1 µs)) calls of ``next_fire``, whatever the number
    of occurrences in between (a year of an every-second schedule takes about 90).
    """
    lo, hi = first, last  # lo: a fire time <= last; no fire time lies in (hi, last]
    while True:
        following = next_fire(cron, zone, lo)
        if following is None or following > last:
            return lo
        mid = lo + (hi - lo) / 2
        found = next_fire(cron, zone, mid)
        if found is not None and found <= last:
            lo = found  # a fire time after mid: the newest is at or after it
        else:
            hi = mid  # none in (mid, last]: the newest is at or before mid


def newest(cron: str, zone: str, first: datetime, last: datetime, n: int) -> list[datetime]:
    """The newest ``n`` fire times from ``first`` (a fire time) to ``last``, both inclusive,
    oldest first.

    The newest one is found by bisection; then a window ending there is doubled until it holds
    ``n`` fire times, and only that window is walked: about ``2 n`` evaluations for a regular
    schedule, never one per occurrence of a long span.
    """
    if n < 1 or first > last:
        return []
    end = latest_at_or_before(cron, zone, first, last)
    width = timedelta(seconds=1)
    while True:
        start = max(first, end - width)
        window = deque(_times(cron, zone, _at_or_after(cron, zone, start), end), maxlen=n)
        if len(window) >= n or start == first:
            return list(window)
        width *= 2


def _at_or_after(cron: str, zone: str, start: datetime) -> datetime | None:
    """The first fire time at or after ``start``."""
    return next_fire(cron, zone, start - timedelta(microseconds=1))


def _times(cron: str, zone: str, first: datetime | None, last: datetime) -> Iterator[datetime]:
    current = first
    while current is not None and current <= last:
        yield current
        current = next_fire(cron, zone, current)
