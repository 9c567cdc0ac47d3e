"""Sub-states: what a PENDING or RUNNING job is doing, told apart for an operator.

Pure: no IO. A sub-state is not a status (:mod:`flask_ratchet.states` has those, and no
transition here): it is read from columns the hot row already has, so nothing writes it and
nothing can leave it stale.

A PENDING job is, in this order of precedence:

- ``blocked``: it cannot be claimed whatever the time, because its queue is paused or it waits
  on another job (a chain step or branch waiting for its parent, due at :data:`~.flows.NOT_YET`);
- ``due``: its time has come; a free thread of a worker of its queue claims it;
- ``retrying``: an attempt failed and the next one is due later (its backoff);
- ``scheduled``: no attempt yet, due later (``enqueue_in``, ``enqueue_at``, a deferral).

A RUNNING job is:

- ``started``: a worker thread took it and its attempt runs;
- ``claimed``: a worker claimed it ahead of a free thread (prefetch) and it waits for one.

The worker records when a thread took the attempt (``started_at`` on the hot row), reckoned
on the database's clock from the claim's time (:func:`attempt_started_at`), so it is never
earlier than the claim that it belongs to; a ``started_at`` older than the current claim's
``picked_at`` is an earlier attempt's, and the current one has not started.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum

from .flows import NOT_YET
from .states import JobStatus


class SubState(StrEnum):
    """What a PENDING or RUNNING job is doing. The values are what the console's URLs carry."""

    DUE = "due"
    SCHEDULED = "scheduled"
    RETRYING = "retrying"
    BLOCKED = "blocked"
    STARTED = "started"
    CLAIMED = "claimed"


#: The sub-states of each status that has some, in the order the console shows them.
OF_STATUS: dict[JobStatus, tuple[SubState, ...]] = {
    JobStatus.PENDING: (SubState.DUE, SubState.SCHEDULED, SubState.RETRYING, SubState.BLOCKED),
    JobStatus.RUNNING: (SubState.STARTED, SubState.CLAIMED),
}
#: The status each sub-state belongs to.
STATUS_OF: dict[SubState, JobStatus] = {
    sub: status for status, subs in OF_STATUS.items() for sub in subs
}
#: What each sub-state means, as the console explains it (a title on hover).
MEANING: dict[SubState, str] = {
    SubState.DUE: "due now: claimed as soon as a worker of its queue has a free thread",
    SubState.SCHEDULED: "due later, no attempt made yet",
    SubState.RETRYING: "an attempt failed; the next one is due later",
    SubState.BLOCKED: "cannot run yet whatever the time: its queue is paused, or it waits "
    "on another job",
    SubState.STARTED: "a worker thread runs its attempt",
    SubState.CLAIMED: "claimed by a worker ahead of a free thread, waiting for one",
}


def waits_on_another_job(due_at: datetime) -> bool:
    """Whether a PENDING job's due time says it waits on another job (see
    :data:`~flask_ratchet.flows.NOT_YET`)."""
    return due_at >= NOT_YET


def pending_substate(
    *, due_at: datetime, attempts: int, now: datetime, queue_paused: bool
) -> SubState:
    """The sub-state of a PENDING job due at ``due_at`` with ``attempts`` spent, at ``now``."""
    if queue_paused or waits_on_another_job(due_at):
        return SubState.BLOCKED
    if due_at <= now:
        return SubState.DUE
    return SubState.RETRYING if attempts > 0 else SubState.SCHEDULED


def running_substate(*, picked_at: datetime | None, started_at: datetime | None) -> SubState:
    """The sub-state of a RUNNING job claimed at ``picked_at`` whose worker recorded its
    attempt's start at ``started_at`` (None: not yet, or never for this row)."""
    if started_at is None or (picked_at is not None and started_at < picked_at):
        return SubState.CLAIMED
    return SubState.STARTED


def substate(
    status: JobStatus | object,
    *,
    due_at: datetime,
    attempts: int,
    now: datetime,
    queue_paused: bool = False,
    picked_at: datetime | None = None,
    started_at: datetime | None = None,
) -> SubState | None:
    """The sub-state of a job in ``status``; None for a status that has none."""
    if status == JobStatus.PENDING:
        return pending_substate(
            due_at=due_at, attempts=attempts, now=now, queue_paused=queue_paused
        )
    if status == JobStatus.RUNNING:
        return running_substate(picked_at=picked_at, started_at=started_at)
    return None


def attempt_started_at(picked_at: datetime, waited: float) -> datetime:
    """When an attempt claimed at ``picked_at`` (the database's clock) started, ``waited``
    seconds (the worker's monotonic clock) after its claim arrived: never before the claim,
    whatever the worker's own wall clock says."""
    return picked_at + timedelta(seconds=max(waited, 0.0))


def next_attempt(attempts: int) -> int:
    """The number of a PENDING job's next attempt, ``attempts`` spent."""
    return max(attempts, 0) + 1
