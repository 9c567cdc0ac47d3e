"""Which actions the console offers for a job, from the state table: no Retry on a RUNNING job,
no Pause on a FAILED one.

The buttons a page draws are the actions :mod:`flask_ratchet.states` allows from the statuses on
screen, so a page never offers what the action would refuse; the actions themselves still check
(the status may change between the page and the press).
"""

from __future__ import annotations

from collections.abc import Iterable

from flask_ratchet.states import TERMINAL, Action, JobStatus, sources

#: The statuses each action may start from, in the order the buttons are drawn. Delete takes
#: ended jobs (their hot row gone).
SOURCES: dict[str, frozenset[JobStatus]] = {
    "retry": sources(Action.RETRY),
    "pause": sources(Action.PAUSE),
    "resume": sources(Action.RESUME),
    "cancel": sources(Action.CANCEL),
    "delete": TERMINAL,
}


def offered(statuses: Iterable[object], *, run_now: bool = False) -> list[str]:
    """The actions that apply to at least one of ``statuses`` (a status stored as text this
    version cannot read is skipped), in :data:`SOURCES` order.

    >>> offered([JobStatus.RUNNING])
    ['cancel']
    >>> offered([JobStatus.FAILED, JobStatus.PAUSED])
    ['retry', 'pause', 'resume', 'cancel', 'delete']
    """
    known = {s for s in statuses if isinstance(s, JobStatus)}
    names = [name for name, among in SOURCES.items() if known & among]
    # Run now is no status change (a PENDING job made due now): offered for ticked jobs, where
    # the store's guard picks the scheduled and retrying ones.
    return (["run_now"] if run_now and JobStatus.PENDING in known else []) + names
