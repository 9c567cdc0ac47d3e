"""What crosses the store's boundary: what callers hand it and what it hands back.

Plain data, no SQL: the store's parts (:mod:`flask_ratchet.store`) take and return these, and so
do the layers above it (the builders, the worker, the console).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from ..context import LogLine
from ..flows import NOT_YET, Condition
from ..options import DEFAULT_QUEUE, JobOptions
from ..states import Action, JobStatus


# NewJob and ClaimedJob are made once per job on the submission and claim paths, so they are
# not frozen: a frozen dataclass's __init__ sets each field through object.__setattr__, three
# times the cost (1.8 against 0.55 µs for NewJob). Nothing changes them after they are made but
# the trace context a traced submission gives its jobs (store.jobs.Jobs.insert_jobs).
@dataclass(slots=True)
class NewJob:
    """A validated job, ready to insert."""

    job_id: uuid.UUID
    task: str
    payload: str
    params: str | None
    options: JobOptions
    idempotency_key: str | None = None
    business_key: str | None = None
    #: Due ``delay`` seconds after the database's now, or at ``run_at`` if given.
    delay: float = 0.0
    run_at: datetime | None = None
    job_type: str = "SINGLE"
    depends_on: uuid.UUID | None = None
    recurring_id: str | None = None
    fire_time: datetime | None = None
    batch_id: uuid.UUID | None = None
    #: The job's end sets off more work (see :mod:`flask_ratchet.store.flows`).
    follow_up: bool = False
    callbacks: str | None = None  # JSON {"success": [...], "failure": [...]}
    #: The submission's trace context, JSON (see :mod:`flask_ratchet.tracing`).
    trace_context: str | None = None
    #: A deadline given as a time (``with_expires(datetime)``); else ``options.expires`` counts
    #: one from the due time (:meth:`deadline`).
    expires_at: datetime | None = None
    #: The job awaits this signal key, each wait lasting so many seconds (WAITING, states.py).
    signal: tuple[str, float] | None = None
    #: Who submitted it (``RATCHET_PRINCIPAL``), as the host app names them.
    principal: str | None = None

    def due(self, now: datetime) -> datetime:
        """When the job is due, ``now`` being the database's time of its submission."""
        return self.run_at if self.run_at is not None else now + timedelta(seconds=self.delay)

    @property
    def expires_in(self) -> float | None:
        """Seconds from the due time to the deadline, when the deadline is counted so: a
        relative ``expires`` and no time given. Not for a job whose due time is not known when
        it is written (a chain step, a branch, a batch's parent and follow-ups, written never
        due until released): it cannot be late for a time it was never given."""
        if self.expires_at is not None or self.options.expires is None:
            return None
        if self.run_at is not None and self.run_at >= NOT_YET:
            return None
        return self.options.expires

    def deadline(self, now: datetime) -> datetime | None:
        """The time the job must have started by (``ratchet_job.expires_at``), ``now`` being
        the database's time of its submission; ``None``: none (or past year 9999)."""
        if self.expires_at is not None:
            return self.expires_at
        expires_in = self.expires_in
        if expires_in is None:
            return None
        try:
            return self.due(now) + timedelta(seconds=expires_in)
        except OverflowError:  # later than any time Python holds: never in the way
            return None


@dataclass(frozen=True, slots=True)
class Inserted:
    """The outcome of inserting one :class:`NewJob`: its id, or the id its key matched."""

    job_id: uuid.UUID
    created: bool


@dataclass(slots=True)
class ClaimedJob:
    """What a worker needs to run a job it has just claimed."""

    job_id: uuid.UUID
    task: str
    payload: str
    params: str | None
    priority: int
    attempt: int
    max_retries: int
    backoff: str
    backoff_base: float
    timeout: float | None
    resource: str | None
    scheduled_time: datetime
    picked_at: datetime
    #: The job this one ran after (a chain step's previous step), for ``previous_result``.
    depends_on: uuid.UUID | None = None
    #: Whether its end sets off more work (see :mod:`flask_ratchet.store.flows`).
    follow_up: bool = False
    #: The batch it is a child of.
    batch_id: uuid.UUID | None = None
    queue: str = DEFAULT_QUEUE
    #: The trace context it was submitted in, JSON (see :mod:`flask_ratchet.tracing`).
    trace_context: str | None = None
    #: The time it must have started by (the database's clock), or it ends CANCELED.
    expires_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class JobFilter:
    """Filters for :meth:`~flask_ratchet.store.jobs.Jobs.find_jobs`; ``None`` means any."""

    statuses: tuple[JobStatus, ...] | None = None
    task: str | None = None
    tag: str | None = None
    business_key: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    queue: str | None = None
    #: The children of this batch (its parent job's id).
    batch_id: uuid.UUID | None = None
    ended_after: datetime | None = None
    ended_before: datetime | None = None
    #: The jobs this principal submitted.
    principal: str | None = None
    #: The FAILED jobs of this dead-letter group (:mod:`flask_ratchet.fingerprints`).
    fingerprint: str | None = None


class Outcome(StrEnum):
    """How an attempt ended, as the worker reports it."""

    SUCCEEDED = "SUCCEEDED"  # terminal
    FAILED = "FAILED"  # terminal: the dead-letter queue
    RETRY = "RETRY"  # failed, due again after ``delay``; the attempt counts
    RELEASE = (
        "RELEASE"  # not finished (drain, deferral): back to PENDING, the attempt does not count
    )

    @property
    def action(self) -> Action:
        return {
            Outcome.SUCCEEDED: Action.SUCCEED,
            Outcome.FAILED: Action.FAIL,
            Outcome.RETRY: Action.RESCHEDULE,
            Outcome.RELEASE: Action.RELEASE,
        }[self]

    @property
    def terminal(self) -> bool:
        return self in (Outcome.SUCCEEDED, Outcome.FAILED)


@dataclass(frozen=True, slots=True)
class Finished:
    """One attempt's outcome, ready to write."""

    job_id: uuid.UUID
    outcome: Outcome
    task: str
    attempt: int
    started_at: datetime | None = None
    duration_ms: float | None = None
    queue_wait_ms: float | None = None
    result: str | None = None
    error: str | None = None
    traceback: str | None = None
    delay: float = 0.0
    logs: Sequence[LogLine] = field(default_factory=tuple)
    #: The job's end sets off more work (see :mod:`.flow`); a batch child's batch.
    follow_up: bool = False
    batch_id: uuid.UUID | None = None
    #: The job's queue (for the worker's log lines about the outcome).
    queue: str = "default"
    #: An encrypted job's result as JSON, for its ``when()`` branches' predicates (``result``
    #: is sealed); ``None``: ``result`` is the JSON.
    clear_result: str | None = None

    @property
    def execution_status(self) -> str | None:
        """The execution row's status, or None when the attempt is not recorded (a release)."""
        if self.outcome == Outcome.RELEASE:
            return None
        return "SUCCEEDED" if self.outcome == Outcome.SUCCEEDED else "FAILED"


@dataclass(frozen=True, slots=True)
class Refused:
    """What became of a job its worker refused (see
    :meth:`~flask_ratchet.store.executions.Executions.refuse`): handed back, due for the
    dead-letter queue with ``dead_letter`` as the reason, or neither (no longer the worker's)."""

    handed_back: bool
    dead_letter: str | None = None


@dataclass(frozen=True, slots=True)
class Ended:
    """A job that has just reached a terminal status in this transaction."""

    job_id: uuid.UUID
    status: JobStatus
    result: str | None = None  # JSON
    run_ms: float | None = None
    wait_ms: float | None = None
    cascade: bool = False  # canceled because an upstream job ended
    #: The batch of a child, when the caller knows it (a batch child has nothing else to
    #: follow up: no dependents, no callbacks), which spares looking the job up.
    batch_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class NewBatch:
    """A batch's row, inserted with its parent job."""

    batch_id: uuid.UUID
    name: str
    total: int
    progress_task: str | None = None


#: ``evaluate(parent job id, predicate task name) -> bool``; may raise. The worker evaluates
#: predicates on the parent's result before its write transaction and looks the values up here.
Evaluator = Callable[[uuid.UUID, str], bool]


def no_predicates(parent_id: uuid.UUID, name: str) -> bool:
    """The evaluator outside a worker: predicates only run where the parent succeeded."""
    raise RuntimeError(f"predicate {name} can only be evaluated by a worker")


@dataclass(frozen=True, slots=True)
class Link:
    """A dependent's condition on its parent, to insert with the dependent."""

    job_id: uuid.UUID
    parent_id: uuid.UUID
    kind: Condition
    predicate: str | None = None
    threshold: float | None = None


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """What a worker process says about itself in ``ratchet_node``."""

    node_id: str
    host: str
    pid: int
    version: str
    concurrency: int


@dataclass(frozen=True, slots=True)
class Recovered:
    """Jobs taken back from dead nodes: requeued, or failed for good (they used every attempt)."""

    requeued: list[uuid.UUID]
    failed: list[uuid.UUID]
    #: The task of each job taken back, and why they were, for the worker's log lines.
    tasks: dict[uuid.UUID, str] = field(default_factory=dict, compare=False)
    reason: str = field(default="", compare=False)


class Permit(StrEnum):
    """What :meth:`~flask_ratchet.store.resources.Resources.acquire_permit` answered."""

    GRANTED = "GRANTED"  # a permit row is held: release it after the run
    UNLIMITED = "UNLIMITED"  # the resource has no limit row: run, there is nothing to release
    FULL = "FULL"  # every permit is out, or the rate's window is full: defer the job
    COUNTED = "COUNTED"  # a resource with a rate only: the start is counted, no permit held
    #: The limit row holds what ratchet never writes: defer the job (see ``reason``) until the
    #: limit is set again (``configure_resource``, or a worker starting with RATCHET_RESOURCES).
    UNREADABLE = "UNREADABLE"
    GONE = "GONE"  # the job is no longer RUNNING on this node (canceled, recovered): skip it


@dataclass(frozen=True, slots=True)
class Acquisition:
    """The answer to one permit request."""

    permit: Permit
    #: FULL: seconds until the job should try again (the limit's retry_delay, or until the
    #: rate's window has room).
    retry_delay: float = 0.0
    #: Permits of the resource out after the request (this job's included if GRANTED).
    in_use: int = 0
    #: UNREADABLE: which column of the limit row holds what, and what is allowed; FULL by the
    #: rate: which rate.
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Fired:
    """One child created by :meth:`~flask_ratchet.store.recurring.Recurring.fire_due`."""

    recurring_id: str
    fire_time: datetime
    job_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class FirePass:
    """What one firing pass did, and when the next occurrence is due (database time)."""

    now: datetime
    fired: list[Fired]
    next_due: datetime | None


@dataclass(frozen=True, slots=True)
class ReplicaLag:
    """How far a read replica is behind its primary, as the replica says
    (:meth:`~flask_ratchet.store.dialect.Dialect.replica_lag`)."""

    #: Whether the server replays another's changes at all; ``False``: it is a primary.
    replica: bool
    #: Everything it received is replayed: no lag, however old its newest replayed commit is
    #: (a primary with nothing to send leaves that commit's age growing).
    in_sync: bool
    #: Seconds since the newest commit it replayed was made on the primary; ``None``: none
    #: replayed since it started.
    seconds: float | None
