"""What links jobs to each other: batches, chains and workflow branches. Pure: no IO.

A *dependent* job (a chain step, a workflow branch, a batch follow-up) is written with the job it
waits for, PENDING but due at :data:`NOT_YET`, so that no claim ever sees it, with a condition
(``ratchet_workflow_condition``) on how its parent must end. When the parent ends, each condition
is decided once: a dependent that matches becomes due now, every other one is canceled, and its
own dependents are decided in turn (that is the cascade). See :mod:`flask_ratchet.store.flows`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum, StrEnum
from typing import Any

from .options import shown
from .payload import Unreadable, read_member
from .states import JobStatus

#: The due time of a job that waits for its parent: later than any real schedule, so the claim
#: (``scheduled_time <= now``) and the poller's next-due time pass it by.
NOT_YET = datetime(9999, 12, 31, tzinfo=UTC)


def waits_for_parent(due: datetime | None) -> bool:
    """Whether a job due at ``due`` is a dependent (or a batch's parent) that still waits for
    what it depends on; it keeps that date as its first due time if it ends unreleased."""
    return due is not None and due >= NOT_YET


class JobType(StrEnum):
    """What a job is, beyond its task (``ratchet_job.job_type``)."""

    SINGLE = "SINGLE"  # a job on its own, or the first step of a chain
    BATCH = "BATCH"  # a batch's parent: does no work, ends when its last child has ended
    BATCH_CHILD = "BATCH_CHILD"
    STEP = "STEP"  # a dependent: a chain step, a workflow branch, a batch follow-up


class Condition(StrEnum):
    """How a dependent's parent must end for the dependent to run."""

    THEN = "THEN"  # a chain step: the previous step succeeded
    ON_SUCCESS = "ON_SUCCESS"  # a branch: the parent succeeded
    ON_FAILURE = "ON_FAILURE"  # a branch: the parent failed for good (not canceled)
    WHEN = "WHEN"  # a branch: the parent succeeded and a predicate of its result holds
    BATCH_SUCCESS = "BATCH_SUCCESS"  # every child of the batch succeeded
    BATCH_FAILURE = "BATCH_FAILURE"  # some child failed or was canceled
    SUCCESS_RATE = "SUCCESS_RATE"  # the batch ended with at least this share succeeded
    FAILURE_COUNT = "FAILURE_COUNT"  # the batch ended with at least this many failed


class Decision(StrEnum):
    """What became of a dependent when its parent ended."""

    TRIGGERED = "TRIGGERED"  # due now
    SKIPPED = "SKIPPED"  # canceled: its condition did not hold
    ERROR = "ERROR"  # canceled: routing failed (a predicate raised)


@dataclass(frozen=True, slots=True)
class BatchCounts:
    """A batch's children by how they ended; also the batch parent's result."""

    total: int
    succeeded: int
    failed: int

    @property
    def ended(self) -> int:
        """Children that have ended."""
        return self.succeeded + self.failed

    @property
    def success_rate(self) -> float:
        """The share of children that succeeded (1.0 for a batch without children)."""
        return self.succeeded / self.total if self.total else 1.0

    def to_json(self) -> str:
        """The counts as the parent job's JSON result."""
        return json.dumps({"total": self.total, "succeeded": self.succeeded, "failed": self.failed})

    @classmethod
    def from_json(cls, text: str | None) -> BatchCounts | None:
        """Counts from a parent's result; None for any other job's."""
        if not text:
            return None
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or "total" not in data:
                return None
            return cls(int(data["total"]), int(data["succeeded"]), int(data["failed"]))
        except (ValueError, TypeError, KeyError, RecursionError):
            return None  # not counts ratchet wrote: read like any other job's result


def holds(
    kind: Condition,
    parent: JobStatus,
    *,
    threshold: float | None = None,
    counts: BatchCounts | None = None,
    predicate: bool = False,
) -> bool:
    """Whether a dependent of ``kind`` runs after its parent ended as ``parent``.

    ``predicate`` is the value of a WHEN branch's predicate (evaluated by the caller, only when
    the parent succeeded); ``counts`` are the batch's, for the batch conditions.
    """
    if parent == JobStatus.CANCELED:
        return False  # canceling a job cancels everything downstream of it
    succeeded = parent == JobStatus.SUCCEEDED
    if kind in (Condition.THEN, Condition.ON_SUCCESS, Condition.BATCH_SUCCESS):
        return succeeded
    if kind in (Condition.ON_FAILURE, Condition.BATCH_FAILURE):
        return parent == JobStatus.FAILED
    if kind == Condition.WHEN:
        return succeeded and predicate
    if counts is None or threshold is None:
        return False
    if kind == Condition.SUCCESS_RATE:
        return counts.success_rate >= threshold
    if kind == Condition.FAILURE_COUNT:
        return counts.failed >= threshold
    raise ValueError(f"unknown condition {kind!r}")


def unreadable_condition(kind: Any, decision: Any, predicate: Any, threshold: Any) -> str | None:
    """Why a stored condition (a ``ratchet_workflow_condition`` row) cannot be decided, naming
    the column, or None if it holds what ratchet writes: a known kind and decision, a predicate
    name for a WHEN branch, a number in range for a batch threshold."""
    members: list[Enum | Unreadable] = [read_member(Condition, "kind", kind)]
    if decision is not None:  # undecided
        members.append(read_member(Decision, "decision", decision))
    for member in members:
        if isinstance(member, Unreadable):
            return member.reason
    if kind == Condition.WHEN and (not isinstance(predicate, str) or not predicate):
        return f"column 'predicate' holds {shown(predicate)}, not the name of a task"
    if kind == Condition.SUCCESS_RATE and not _number_within(threshold, 0.0, 1.0):
        return f"column 'threshold' holds {shown(threshold)}, not a success rate from 0 to 1"
    if kind == Condition.FAILURE_COUNT and not (
        _number_within(threshold, 1.0, math.inf) and float(threshold).is_integer()
    ):
        return f"column 'threshold' holds {shown(threshold)}, not a whole number from 1"
    return None


def _number_within(value: Any, low: float, high: float) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and low <= value <= high
    )


def unreadable_decision(problem: str) -> str:
    """The routing error stored with a dependent canceled because its condition (as
    :func:`unreadable_condition` found it) cannot be decided."""
    return (
        f"the condition of this job cannot be decided: ratchet_workflow_condition {problem}; "
        "it was canceled"
    )


def batch_outcome(counts: BatchCounts) -> tuple[JobStatus, str | None]:
    """The status a batch parent settles in, and its error: FAILED if any child did not succeed."""
    if counts.failed:
        return JobStatus.FAILED, f"{counts.failed} of {counts.total} children failed"
    return JobStatus.SUCCEEDED, None


def predicate_error(predicate: str, exc: BaseException) -> str:
    """The routing error stored when a WHEN predicate raises."""
    return (
        f"predicate {predicate} raised {type(exc).__name__}: {exc}; routing failed and every "
        "branch of this job was canceled"
    )
