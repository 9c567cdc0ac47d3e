"""What callers read back: :class:`Job` snapshots, :class:`BatchProgress`, :class:`Progress` and
:class:`QueueSummary` (a submitted job's handle is :mod:`flask_ratchet.api.handles`)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, TypeVar

from . import payload
from .errors import UnreadableJob
from .options import Backoff, JobOptions, Priority
from .payload import Sealed, Unreadable, decode_stored
from .sealing import Keyring
from .states import JobStatus

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Progress:
    """What a job last reported with :meth:`JobContext.set_progress
    <flask_ratchet.JobContext.set_progress>`: ``done`` of ``total`` (if it gave one), and a
    message. Kept after the job ends."""

    done: float
    total: float | None = None
    message: str | None = None

    @property
    def fraction(self) -> float | None:
        """``done / total`` between 0 and 1, or ``None`` without a positive total."""
        if self.total is None or not self.total > 0:
            return None
        return min(max(self.done / self.total, 0.0), 1.0)


def decode_progress(text: str) -> Progress:
    """A stored progress column as a :class:`Progress`.

    :raises ~flask_ratchet.errors.UnreadableJob: unless it is the JSON object ratchet writes there.
    """
    stored = decode_stored("progress", text, dict)
    done, total, message = stored.get("done"), stored.get("total"), stored.get("message")
    if (
        not _is_number(done)
        or not (total is None or _is_number(total))
        or not (message is None or isinstance(message, str))
    ):
        raise UnreadableJob(
            "column 'progress' is not an object with a number 'done', a number or null 'total' "
            "and a text or null 'message'"
        )
    return Progress(done, total, message)


def _is_number(value: object) -> bool:
    return type(value) in (int, float)


@dataclass(frozen=True, slots=True)
class Job:
    """A read-only snapshot of one job, as :meth:`Ratchet.get_job` and ``find_jobs`` return it.

    Stored values are read defensively. A JSON column that does not hold what ratchet writes
    there (a row written by hand, or damaged) is an :class:`~flask_ratchet.payload.Unreadable`
    holding the raw text and the reason, instead of raising: ``args`` and ``kwargs`` (both the
    same one, for the ``payload`` column), ``params`` and ``result``; so is a ``status``,
    ``paused_from``, ``priority`` or ``backoff`` that is not one of its enum's values (compare
    ``status`` with a :class:`JobStatus`: an unreadable one equals none). A stored time outside
    what Python can hold (before year 1, after 9999, ``infinity``) reads as
    :data:`~flask_ratchet.columns.EARLIEST` or :data:`~flask_ratchet.columns.LATEST`.
    """

    id: uuid.UUID
    task: str
    #: The queue it was submitted to (see ``with_queue``).
    queue: str
    status: JobStatus | Unreadable
    priority: Priority | Unreadable
    args: list[Any] | Unreadable
    kwargs: dict[str, Any] | Unreadable
    params: dict[str, Any] | Unreadable
    attempts: int
    max_retries: int
    backoff: Backoff | Unreadable
    backoff_base: float
    timeout: float | None
    resource: str | None
    tags: tuple[str, ...]
    idempotency_key: str | None
    business_key: str | None
    created_at: datetime
    #: When the job is (or was first) due to run.
    scheduled_at: datetime
    picked_by: str | None
    picked_at: datetime | None
    paused_from: JobStatus | Unreadable | None
    finished_at: datetime | None
    error: str | None
    result: Any
    superseded_by: uuid.UUID | None
    depends_on: uuid.UUID | None
    recurring_id: str | None
    #: What the job last reported with ``ctx.set_progress`` (while it runs, and after it ended);
    #: ``None`` if it never did.
    progress: Progress | Unreadable | None = None
    #: The time it must have started by, or it ends CANCELED ("expired"); ``None``: none.
    expires_at: datetime | None = None
    #: The signal key the job awaits or awaited (``await_signal``); a WAITING job's deadline
    #: for it is its ``scheduled_at``.
    signal_key: str | None = None
    #: How long each of its waits for that signal lasts, in seconds.
    signal_wait: float | None = None
    #: Who submitted it, as ``RATCHET_PRINCIPAL`` named them then; ``None``: nobody was named.
    principal: str | None = None

    @property
    def is_terminal(self) -> bool:
        """True for SUCCEEDED, FAILED and CANCELED."""
        return self.status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELED)

    @property
    def options(self) -> JobOptions:
        """Every option the job was submitted with (queue, priority, retries, backoff, timeout,
        resource, tags, params), as one :class:`~flask_ratchet.options.JobOptions`: what a job
        submitted in its place (``ratchet.replace``) runs with. Its deadline is
        :attr:`expires_at`, a time, not an option counted from a due time.

        :raises ~flask_ratchet.errors.UnreadableJob: naming the column, if one holds what
            ratchet never writes.
        """
        for column, value in (
            ("priority", self.priority),
            ("backoff", self.backoff),
            ("params", self.params),
        ):
            if isinstance(value, Unreadable):
                raise UnreadableJob(f"job {self.id}: column {column!r} holds {value.text!r}")
        assert not isinstance(self.priority, Unreadable)
        assert not isinstance(self.backoff, Unreadable)
        assert not isinstance(self.params, Unreadable)
        return JobOptions(
            queue=self.queue,
            priority=self.priority,
            max_retries=self.max_retries,
            backoff=self.backoff,
            backoff_base=self.backoff_base,
            timeout=self.timeout,
            resource=self.resource,
            tags=self.tags,
            params=dict(self.params),
        )


@dataclass(frozen=True, slots=True)
class BatchChild:
    """One child of a batch, as its follow-up reads it (``BatchContext.children()``): its id,
    its status now, and its result if it SUCCEEDED (else ``None``). A status or result that is
    not what ratchet writes reads as :class:`~flask_ratchet.payload.Unreadable`."""

    id: uuid.UUID
    status: JobStatus | Unreadable
    result: Any


@dataclass(frozen=True, slots=True)
class BatchProgress:
    """A batch's children so far: ``succeeded + failed`` of ``total`` have ended (a canceled
    child counts as failed). ``finished`` once the batch has settled."""

    batch_id: uuid.UUID
    name: str
    total: int
    succeeded: int
    failed: int
    finished: bool = False
    #: Summed run time of the children's last attempts, and their summed queue wait.
    child_run_ms: float = 0.0
    child_wait_ms: float = 0.0
    created_at: datetime | None = None
    finished_at: datetime | None = None
    #: The columns of the batch's row that hold what ratchet never writes, with their values as
    #: stored (``total='<b>x'``); each such count reads as 0 and each such sum as 0.0.
    damaged: str | None = None

    @property
    def ended(self) -> int:
        """Children that have ended."""
        return self.succeeded + self.failed

    @property
    def remaining(self) -> int:
        """Children that have not ended yet (never below zero)."""
        return max(self.total - self.ended, 0)

    @property
    def wall_ms(self) -> float | None:
        """From submission to the last child's end (None until the batch has settled)."""
        if self.created_at is None or self.finished_at is None:
            return None
        return (self.finished_at - self.created_at).total_seconds() * 1000

    @property
    def overhead_ms(self) -> float | None:
        """Wall time not spent running children one after another: the cost of queueing and
        scheduling when the batch ran serially, and negative when it ran in parallel."""
        wall = self.wall_ms
        return None if wall is None else wall - self.child_run_ms


@dataclass(frozen=True, slots=True)
class QueueSummary:
    """One queue's live jobs and state (see :meth:`Ratchet.queues`).
    ``oldest_due_wait``: seconds the oldest due job has waited, ``None`` if none is due."""

    name: str
    paused: bool
    pending: int = 0
    due: int = 0
    running: int = 0
    paused_jobs: int = 0
    oldest_due_wait: float | None = None


def opened(job: Job, keyring: Keyring) -> Job:
    """``job`` with its encrypted columns opened with the app's keys (one that does not open
    is :class:`~flask_ratchet.payload.Unreadable`, saying why)."""
    changes: dict[str, Any] = {}

    def clear(column: str, value: Sealed) -> str | Unreadable:
        try:
            return keyring.open(value.text, job.id, column)
        except UnreadableJob as exc:
            return Unreadable(value.text, str(exc))

    if isinstance(job.args, Sealed):
        call = clear("payload", job.args)
        changes["args"], changes["kwargs"] = (
            (call, call) if isinstance(call, Unreadable) else payload.read_call(call)
        )
    if isinstance(job.params, Sealed):
        params = clear("params", job.params)
        changes["params"] = (
            params if isinstance(params, Unreadable) else payload.read_stored("params", params)
        )
    if isinstance(job.result, Sealed):
        result = clear("result", job.result)
        changes["result"] = (
            result if isinstance(result, Unreadable) else payload.read_stored("result", result)
        )
    return replace(job, **changes) if changes else job
