"""Operations on jobs that exist: cancel, pause, resume, retry, delete, replace, read, claim.

Each joins the caller's transaction (a request's, or ``ratchet.transaction()``) or runs in one of
its own; the state change itself is the store's guarded compare-and-swap.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypedDict, Unpack

from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from ..errors import IllegalTransition, JobNotAuthorized, JobNotFound
from ..ids import job_id_of
from ..job import Job, opened
from ..options import seconds, validate_queue
from ..paging import JOB_CURSOR, Page
from ..paging import cursor as cursor_of
from ..payload import Sealed
from ..runtime import Runtime
from ..states import Action, JobStatus, allowed
from ..store import Jobs
from ..store.types import ClaimedJob, JobFilter
from . import policy
from .handles import JobHandle
from .submit import replacement_builder

#: The largest page ``find_jobs`` returns.
FIND_LIMIT_MAX = 1000

Change = Callable[[Jobs, Connection, uuid.UUID], bool]


def cancel(runtime: Runtime, job_id: uuid.UUID | str) -> bool:
    """PENDING, PAUSED or RUNNING → CANCELED."""
    return _change(runtime, job_id, "cancel")


def pause(runtime: Runtime, job_id: uuid.UUID | str) -> bool:
    """PENDING or FAILED → PAUSED."""
    return _change(runtime, job_id, "pause")


def resume(runtime: Runtime, job_id: uuid.UUID | str) -> bool:
    """PAUSED → the status it was paused from."""
    return _change(runtime, job_id, "resume")


def retry(runtime: Runtime, job_id: uuid.UUID | str) -> bool:
    """FAILED → PENDING, attempts reset, due now."""
    return _change(runtime, job_id, "retry")


def run_now(runtime: Runtime, job_id: uuid.UUID | str) -> bool:
    """A PENDING job due later (scheduled, or retrying after its backoff) → due now."""
    return _change(runtime, job_id, "run_now")


def delete(runtime: Runtime, job_id: uuid.UUID | str) -> bool:
    """Delete a SUCCEEDED, FAILED or CANCELED job with everything recorded about it."""
    return _change(runtime, job_id, "delete")


#: The operations :func:`change_each` applies, by name.
CHANGES: dict[str, Change] = {
    "cancel": Jobs.cancel,
    "pause": Jobs.pause,
    "resume": Jobs.resume,
    "retry": Jobs.retry,
    "run_now": Jobs.run_now,
    "delete": Jobs.delete_ended,
}


def change_each(
    runtime: Runtime, action: str, job_ids: Sequence[uuid.UUID]
) -> tuple[list[uuid.UUID], list[uuid.UUID]]:
    """Apply one of :data:`CHANGES` to each job, in one transaction (the caller's, or one of
    its own); return the jobs it changed and the ones it refused (those included that the
    policy, :mod:`.policy`, does not let the principal change).

    The jobs' batches are locked first, all at once and in order (the lock order of every
    batch writer): locked job by job, two batches could be taken out of order against a
    worker completing children of both. Each job's operation runs in a savepoint: one that fails
    in the database (a concurrent change breaking a constraint, say) is rolled back alone and
    counted as refused, instead of taking the other jobs' changes down with it.

    :raises KeyError: for an action that is not one of :data:`CHANGES`.
    """
    op = CHANGES[action]
    store = runtime.store

    def change(conn: Connection) -> tuple[list[uuid.UUID], list[uuid.UUID]]:
        changed: list[uuid.UUID] = []
        refused: list[uuid.UUID] = []
        store.flows.batches.lock_of(conn, job_ids)
        allowed = set(policy.permitted(runtime, conn, action, job_ids))
        for job_id in job_ids:
            if job_id not in allowed:
                refused.append(job_id)
                continue
            try:
                with store.savepoint(conn):  # SQLite: begun first, never a commit of its own
                    ok = op(store.jobs, conn, job_id)
            except DBAPIError as exc:
                if store.dialect.transient(exc):  # the whole transaction is gone: again
                    raise
                ok = False
            (changed if ok else refused).append(job_id)
        return changed, refused

    return runtime.run(change)


def _change(runtime: Runtime, job_id: uuid.UUID | str, action: str) -> bool:
    key = job_id_of(job_id)
    op = CHANGES[action]
    return runtime.run(
        lambda conn: policy.may(runtime, conn, action, key) and op(runtime.store.jobs, conn, key)
    )


def replace(
    runtime: Runtime,
    job_id: uuid.UUID | str,
    delay: Any,
    fn: Callable[..., Any] | str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> JobHandle:
    """Cancel a job and submit ``fn(*args, **kwargs)`` in its place, in one transaction.

    :raises JobNotFound: if there is no such job.
    :raises IllegalTransition: if the job already ended (nothing is written).
    """
    key = job_id_of(job_id)
    store = runtime.store

    # Atomic: the new job's insert may be refused (its business key held meanwhile) after
    # the old job's cancel was written.
    def replaced(conn: Connection) -> uuid.UUID:
        found = store.jobs.get_job(conn, key)
        if found is None or not policy.allows(runtime, "read", found):
            raise JobNotFound(f"no job has id {key}")
        if not policy.allows(runtime, "replace", found):
            raise JobNotAuthorized(f"RATCHET_AUTHORIZE does not let this principal replace {key}")
        old = opened(found, runtime.keyring)  # its params, to keep them
        if not isinstance(old.status, JobStatus) or not allowed(Action.CANCEL, old.status):
            raise IllegalTransition(
                f"job {key} is {old.status}: only PENDING, WAITING, PAUSED or RUNNING jobs can be "
                "replaced"
            )
        wait = seconds("delay", delay)
        sealed = isinstance(found.args, Sealed)  # an encrypted job's replacement is too
        new = replacement_builder(runtime, old, fn, args, kwargs, wait, encrypt=sealed).build()
        policy.stamp(runtime, [new])  # the caller may create it…
        new.principal = old.principal  # …in the name of whoever submitted the old one
        if not store.jobs.cancel(conn, key):  # the swap: lost if the job just ended
            raise IllegalTransition(f"job {key} ended while it was being replaced")
        (inserted,) = store.jobs.insert_jobs(conn, [new])
        store.jobs.mark_superseded(conn, key, inserted.job_id)
        return inserted.job_id

    return JobHandle(runtime.run(replaced, atomic=True))


def logs(runtime: Runtime, job_id: uuid.UUID | str, limit: int) -> list[Any]:
    """The first ``limit`` log lines of one job, oldest first, as stored (not masked): rows
    with ``logged_at``, ``attempt``, ``level`` and ``message``; none for a job the principal
    may not read (:mod:`.policy`)."""
    key = job_id_of(job_id)

    def read(conn: Connection) -> list[Any]:
        if not policy.may(runtime, conn, "read", key):
            return []
        return runtime.store.executions.logs(conn, key, limit)

    return runtime.run(read)


def get(
    runtime: Runtime, job_id: uuid.UUID | str, *, decrypt: bool = True, scoped: bool = True
) -> Job | None:
    """A snapshot of one job, or ``None`` if there is no such job (or, ``scoped``, the
    principal may not read it: :mod:`.policy`); its encrypted columns opened unless
    ``decrypt`` is false (the console's reads: it never shows them)."""
    key = job_id_of(job_id)
    found = runtime.run(lambda conn: runtime.store.jobs.get_job(conn, key))
    if found is None or (scoped and not policy.allows(runtime, "read", found)):
        return None
    return opened(found, runtime.keyring) if decrypt else found


def find(
    runtime: Runtime,
    *,
    limit: int = 50,
    cursor: str | None = None,
    scoped: bool = True,
    **filters: Unpack[JobFilters],
) -> Page[Job]:
    """Jobs matching every given filter, newest first, a page at a time; ``scoped``: only
    those the principal may read (:mod:`.policy`), the app's own reads (the testing kit) not.

    :raises ValueError: for a limit out of range or a bad filter (see :func:`job_filter`).
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= FIND_LIMIT_MAX:
        raise ValueError(f"limit must be from 1 to {FIND_LIMIT_MAX}, got {limit!r}")
    where = job_filter(runtime, **filters)

    def read(after: str | None) -> Page[Job]:
        return runtime.run(lambda conn: runtime.store.jobs.find_jobs(conn, where, limit, after))

    page = read(cursor)
    if scoped and policy.active(runtime):
        page = _visible_page(runtime, read, limit, page)
    return dataclasses.replace(page, items=[opened(j, runtime.keyring) for j in page.items])


def _visible_page(
    runtime: Runtime, read: Callable[[str | None], Page[Job]], limit: int, page: Page[Job]
) -> Page[Job]:
    """A page of the jobs the principal may read: further pages are read until ``limit`` of
    them are found or none is left, so that a page is short only at the end."""
    items = policy.visible(runtime, page.items)
    more = page.next_cursor
    while len(items) < limit and more is not None:
        page = read(more)
        items += policy.visible(runtime, page.items)
        more = page.next_cursor
    if len(items) > limit:  # the page ends at the last job returned: the next one follows it
        items = items[:limit]
        more = cursor_of(JOB_CURSOR, items[-1].id)
    return Page(items, more)


class JobFilters(TypedDict, total=False):
    """The filters of ``find_jobs`` and the bulk operations (``ratchet.cancel_jobs(task=...,
    tag=...)``): a job matches when it matches every one given; ``None`` means any."""

    #: One status or several.
    status: JobStatus | str | Iterable[JobStatus | str] | None
    #: The task function, or its name.
    task: Callable[..., Any] | str | None
    tag: str | None
    business_key: str | None
    queue: str | None
    #: The children of this batch (its id).
    batch: uuid.UUID | str | None
    created_after: datetime | None
    created_before: datetime | None
    ended_after: datetime | None
    ended_before: datetime | None
    #: The jobs this principal submitted (``Job.principal``).
    principal: str | None
    #: The FAILED jobs of one dead-letter group: their error's fingerprint
    #: (:func:`flask_ratchet.fingerprints.fingerprint`), as the console shows it.
    fingerprint: str | None


_TIMES = ("created_after", "created_before", "ended_after", "ended_before")


def job_filter(runtime: Runtime, **filters: Unpack[JobFilters]) -> JobFilter:
    """The filter ``find_jobs`` and the bulk operations take, checked.

    :raises ValueError: for an unknown filter or status, a malformed batch id or queue name,
        or a time that is not a :class:`~datetime.datetime`.
    """
    if unknown := sorted(set(filters) - set(JobFilters.__annotations__)):
        known = ", ".join(JobFilters.__annotations__)
        raise ValueError(f"unknown filter {', '.join(unknown)}: the filters are {known}")
    status = filters.get("status")
    statuses: tuple[JobStatus, ...] | None = None
    if status is not None:
        items = [status] if isinstance(status, str) else list(status)
        try:
            statuses = tuple(JobStatus(s) for s in items)
        except ValueError:
            names = ", ".join(JobStatus)
            raise ValueError(f"status must be one of {names}, got {status!r}") from None
    for name in _TIMES:
        value = filters.get(name)
        if value is not None and not isinstance(value, datetime):
            raise ValueError(f"{name} must be a datetime, got {value!r}")
    task = filters.get("task")
    principal = filters.get("principal")
    if principal is not None and not isinstance(principal, str):
        raise ValueError(f"principal must be a text, got {principal!r}")
    fingerprint = filters.get("fingerprint")
    if fingerprint is not None and not isinstance(fingerprint, str):
        raise ValueError(f"fingerprint must be a text, got {fingerprint!r}")
    task_name = (
        task
        if task is None or isinstance(task, str)
        else runtime.registry.for_submit(task, runtime.config.allowed_modules).name
    )
    queue, batch = filters.get("queue"), filters.get("batch")
    return JobFilter(
        statuses,
        task_name,
        filters.get("tag"),
        filters.get("business_key"),
        filters.get("created_after"),
        filters.get("created_before"),
        None if queue is None else validate_queue(queue),
        None if batch is None else job_id_of(batch),
        filters.get("ended_after"),
        filters.get("ended_before"),
        principal,
        fingerprint,
    )


def queue_health(runtime: Runtime, queue: str | None = None) -> dict[str, Any]:
    """Counts per status, due jobs, oldest due job's wait and p95 queue wait (seconds), of
    every job or of one queue's."""
    name = None if queue is None else validate_queue(queue)
    store = runtime.store
    return runtime.run(lambda conn: store.health.queue_health(conn, store.now(conn), name))


def claim_due(
    runtime: Runtime,
    limit: int,
    node_id: str,
    queues: Mapping[str, int] | Iterable[str] | None = None,
) -> list[ClaimedJob]:
    """Mark up to ``limit`` due jobs RUNNING for ``node_id`` and return them, always in a short
    transaction of its own: a claim never joins a request. ``queues``: only from these (a
    mapping gives the most to take from each), else from every queue; never a paused one.

    :raises InvalidOption: for a name that is no queue name.
    """
    quotas = None
    if queues is not None:
        wanted = queues if isinstance(queues, Mapping) else dict.fromkeys(queues, limit)
        quotas = {validate_queue(name): quota for name, quota in wanted.items()}
    runtime.ensure_schema()
    with runtime.store.single_statement(runtime.engine) as conn:
        return runtime.store.jobs.claim_due(
            conn, limit, node_id, runtime.config.priority_boost_minutes, quotas
        )
