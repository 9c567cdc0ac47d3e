"""The job state machine: the one place that says which status changes are allowed.

Pure: no IO. The store builds every guarded ``WHERE status IN (...)`` from the tables here, so a
transition that is not listed cannot be written.

::

    PENDING --claim--> RUNNING --succeed--> SUCCEEDED
       |                  |----fail------> FAILED --retry--> PENDING
       |                  |----reschedule/release--> PENDING
     pause              cancel
       v                  v
    PAUSED --resume--> (the status it was paused from: PENDING or FAILED)

    cancel: PENDING, PAUSED, RUNNING, WAITING -> CANCELED.   pause: PENDING, FAILED -> PAUSED.

    A job submitted to await a signal is WAITING from the start (PENDING --await--> WAITING
    in the transaction that writes it), is never claimed, and leaves it by its signal:
    WAITING --signal--> PENDING; --reject--> FAILED (a rejected signal, or its timeout with no
    retry left); --wait_again--> WAITING (its timeout, with a retry left: one attempt spent).

    A batch's parent job does no work: it waits PENDING (or PAUSED) until its last child has
    ended, then settles: PENDING/PAUSED --settle_batch--> SUCCEEDED or FAILED (by its children).
"""

from __future__ import annotations

from enum import StrEnum


class JobStatus(StrEnum):
    """Where a job is in its life. The string values are what the database stores."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    PAUSED = "PAUSED"
    CANCELED = "CANCELED"
    WAITING = "WAITING"


class Action(StrEnum):
    """Everything that moves a job from one status to another."""

    CLAIM = "claim"  # a worker takes a due job
    SUCCEED = "succeed"  # the task returned
    FAIL = "fail"  # the task raised and no retry remains (the dead-letter queue)
    RESCHEDULE = "reschedule"  # the task raised and a retry remains (FAILED only in passing)
    RELEASE = "release"  # drain, orphan recovery or a deferral hands a running job back
    PAUSE = "pause"
    RESUME = "resume"
    RETRY = "retry"  # manual retry of a failed job
    CANCEL = "cancel"
    BATCH_SUCCEED = "batch_succeed"  # a batch parent's children all succeeded
    BATCH_FAIL = "batch_fail"  # some of a batch parent's children failed or were canceled
    AWAIT = "await"  # a job submitted to await a signal, as it is written
    SIGNAL = "signal"  # its signal arrived: due now
    REJECT = "reject"  # its signal was rejected, or timed out with no retry left
    WAIT_AGAIN = "wait_again"  # its signal timed out with a retry left: it waits again


P, R, S, F, Z, C, W = (
    JobStatus.PENDING,
    JobStatus.RUNNING,
    JobStatus.SUCCEEDED,
    JobStatus.FAILED,
    JobStatus.PAUSED,
    JobStatus.CANCELED,
    JobStatus.WAITING,
)

#: action -> {from status: to status}. RESUME's target is the remembered status (see resume_target).
TRANSITIONS: dict[Action, dict[JobStatus, JobStatus]] = {
    Action.CLAIM: {P: R},
    Action.SUCCEED: {R: S},
    Action.FAIL: {R: F},
    Action.RESCHEDULE: {R: P},
    Action.RELEASE: {R: P},
    Action.PAUSE: {P: Z, F: Z},
    Action.RESUME: {Z: Z},
    Action.RETRY: {F: P},
    Action.CANCEL: {P: C, Z: C, R: C, W: C},
    Action.BATCH_SUCCEED: {P: S, Z: S},
    Action.BATCH_FAIL: {P: F, Z: F},
    Action.AWAIT: {P: W},
    Action.SIGNAL: {W: P},
    Action.REJECT: {W: F},
    Action.WAIT_AGAIN: {W: W},
}

#: Statuses that live in the hot queue table. A job leaves it when it becomes terminal.
LIVE: frozenset[JobStatus] = frozenset({P, R, Z, W})
#: Statuses after which nothing runs again (FAILED only until a manual retry).
TERMINAL: frozenset[JobStatus] = frozenset({S, F, C})
#: Statuses that hold a business-key reservation.
ACTIVE: frozenset[JobStatus] = LIVE
#: The statuses a paused job may return to.
PAUSABLE: frozenset[JobStatus] = frozenset(TRANSITIONS[Action.PAUSE])


def sources(action: Action) -> frozenset[JobStatus]:
    """Return the statuses from which ``action`` is allowed."""
    return frozenset(TRANSITIONS[action])


def allowed(action: Action, status: JobStatus) -> bool:
    """Return whether ``action`` may be applied to a job in ``status``."""
    return status in TRANSITIONS[action]


def target(action: Action, status: JobStatus) -> JobStatus:
    """Return the status ``action`` leads to from ``status``.

    :raises ValueError: if the transition is not allowed.
    """
    try:
        return TRANSITIONS[action][status]
    except KeyError:
        raise ValueError(f"cannot {action.value} a job that is {status.value}") from None


def resume_target(paused_from: JobStatus | str | None) -> JobStatus:
    """Return the status a paused job resumes to: the one it was paused from."""
    status = JobStatus(paused_from) if paused_from is not None else None
    if status not in PAUSABLE:
        raise ValueError(f"a paused job cannot resume to {paused_from!r}")
    return status
