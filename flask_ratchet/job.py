"""What callers get back: :class:`JobHandle`, read-only :class:`Job` snapshots and :class:`Page`."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

from .options import Backoff, Priority
from .states import JobStatus

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class JobHandle:
    """A submitted job's id. ``created`` is False when an idempotency key matched an earlier job."""

    id: uuid.UUID
    created: bool = True


@dataclass(frozen=True, slots=True)
class Job:
    """A read-only snapshot of one job, as :meth:`Ratchet.get_job` and ``find_jobs`` return it."""

    id: uuid.UUID
    task: str
    status: JobStatus
    priority: Priority
    args: list[Any]
    kwargs: dict[str, Any]
    params: dict[str, Any]
    attempts: int
    max_retries: int
    backoff: Backoff
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
    paused_from: JobStatus | None
    finished_at: datetime | None
    error: str | None
    result: Any
    superseded_by: uuid.UUID | None
    depends_on: uuid.UUID | None
    recurring_id: str | None

    @property
    def is_terminal(self) -> bool:
        """True for SUCCEEDED, FAILED and CANCELED."""
        return self.status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELED)


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of results, newest first; pass ``next_cursor`` back to get the next page."""

    items: list[T] = field(default_factory=list)
    next_cursor: str | None = None
