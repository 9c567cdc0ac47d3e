"""Reads off the primary (``RATCHET_READ_URL``): the console pages that read from the read
replica, and the replica's lag, which the alarm strip shows while a read URL is set.

Only pure reads go there: the pages that show jobs, queues, batches, resources, nodes, and the
metrics scrape. Actions, their guards, and the pages that lead to one (a bulk action's
confirmation counts what the action will change, and must count what it then finds) read the
database itself, as does everything outside the console.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import ParamSpec, TypeVar

from flask import g
from sqlalchemy.exc import SQLAlchemyError

from flask_ratchet.database import reading
from flask_ratchet.runtime import current

from .htmx import refreshes_a_region
from .present import duration

P = ParamSpec("P")
R = TypeVar("R")


def from_replica(view: Callable[P, R]) -> Callable[P, R]:
    """``view``, a page that only reads, with its reads on the read replica when there is one
    (:func:`flask_ratchet.database.reading`); without one, as it was."""

    @functools.wraps(view)
    def read(*args: P.args, **kwargs: P.kwargs) -> R:
        with reading():
            return view(*args, **kwargs)

    return read


@dataclass(frozen=True, slots=True)
class ReplicaNote:
    """The alarm strip's line about the replica: what it says, whether the replica is behind
    (drawn as a warning), and the lag in seconds when it is known."""

    text: str
    behind: bool
    seconds: float | None = None


def replica_note() -> ReplicaNote | None:
    """Where the pages read and how far behind that is; ``None`` without a read replica."""
    runtime = current()
    if runtime.replica is None:
        return None
    try:
        with runtime.replica.connect() as conn:
            lag = runtime.store.replica_lag(conn)
    except SQLAlchemyError:
        return ReplicaNote("Pages read from a replica, which does not answer.", behind=True)
    if not lag.replica:
        return ReplicaNote(
            "Pages read from RATCHET_READ_URL, a server that is no replica (not in recovery).",
            behind=False,
        )
    if lag.in_sync:
        return ReplicaNote("Pages read from a replica, in sync.", behind=False, seconds=0.0)
    if lag.seconds is None:
        return ReplicaNote(
            "Pages read from a replica, lag unknown (it has replayed nothing since it started).",
            behind=True,
        )
    return ReplicaNote(
        f"Pages read from a replica, {duration(lag.seconds)} behind.",
        behind=True,
        seconds=lag.seconds,
    )


def header_replica() -> ReplicaNote | None:
    """The replica's line for the page being drawn (as :func:`.pages.header_alarms`: not for
    a request the guard has not let in, nor for the refresh of one live region)."""
    if g.get("ratchet_role") is None or refreshes_a_region():
        return None
    return replica_note()
