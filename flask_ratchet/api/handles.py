"""A submitted job's handle, and waiting for a job to end.

::

    handle = report.enqueue(month)
    db.session.commit()                      # the job exists once this commits
    job = handle.wait(timeout=60)            # the ended Job: job.result, or job.error
    job = handle.wait(raise_on_failure=True)  # JobFailed unless it SUCCEEDED
"""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta

from ..errors import JobFailed, JobNotFound, WaitInTransaction, WaitTimeout
from ..ids import job_id_of
from ..job import Job, opened
from ..options import seconds
from ..runtime import Runtime
from ..runtime import current as current_runtime
from ..states import JobStatus
from ..wakeups.hub import LISTEN_TIMEOUT
from . import policy

#: The longest a waiter goes without reading the job: the floor under the notifications.
READ_AT_LEAST_EVERY = 1.0


@dataclass(frozen=True, slots=True)
class JobHandle:
    """A submitted job's id. ``created`` is False when an idempotency key matched an earlier job."""

    id: uuid.UUID
    created: bool = True

    def wait(
        self, timeout: timedelta | float | None = 30.0, *, raise_on_failure: bool = False
    ) -> Job:
        """Wait for the job to end (SUCCEEDED, FAILED or CANCELED) and return it, with its
        ``result`` or ``error``; with ``raise_on_failure``, a job that did not succeed raises
        :class:`~flask_ratchet.errors.JobFailed` instead. See :func:`wait`."""
        return wait(current_runtime(), self.id, timeout, raise_on_failure=raise_on_failure)


def wait(
    runtime: Runtime,
    job_id: uuid.UUID | str,
    timeout: timedelta | float | None,
    *,
    raise_on_failure: bool = False,
) -> Job:
    """Wait up to ``timeout`` (seconds or a ``timedelta``; ``None``: no limit) for a job to end.

    On PostgreSQL the waiter LISTENs for the notice that jobs ended, on the connection every
    waiter of the process shares (and reads the job at least every second besides); on SQLite
    it watches the file for commits.

    :raises WaitInTransaction: inside an open transaction (a request's ``db.session`` that has
        not committed, or ``ratchet.transaction()``): a job enqueued in it does not exist for
        the workers until it commits. Commit first, then wait.
    :raises WaitTimeout: if the job has not ended by then (it goes on; wait again, or cancel).
    :raises JobNotFound: if there is no such job (or it was deleted meanwhile).
    :raises JobFailed: with ``raise_on_failure``, if the job ended FAILED or CANCELED (as
        Celery's ``AsyncResult.get()`` raises for a failed or revoked task): the caller asked
        for a result and there is none. The ended job is its ``job``.
    :raises InvalidJobId: for an id that is no UUID, before anything is read.
    :raises RuntimeError: from a job run in-process by the testing kit, where the awaited job
        could not run before this one returns.
    """
    key = job_id_of(job_id)
    limit = math.inf if timeout is None else seconds("timeout", timeout)
    if runtime.in_inline_run():
        raise RuntimeError(
            f"cannot wait for job {key} from a job run in-process (run_jobs, eager mode): "
            "no other job runs until this one returns. Chain the work instead (.then())"
        )
    if runtime.in_transaction():
        raise WaitInTransaction(
            f"cannot wait for job {key} inside an open transaction: the job's end cannot be "
            "seen from it, and a job enqueued in it does not exist for the workers until it "
            "commits. Call db.session.commit() (or leave ratchet.transaction()) first"
        )
    runtime.ensure_schema()
    engine, store = runtime.engine, runtime.store
    deadline = time.monotonic() + limit
    # Listen before the first read, so that an end between the read and the wait is not lost.
    watch = runtime.wakeups.end_watch(min(limit, LISTEN_TIMEOUT))
    try:
        while True:
            with engine.connect() as conn:
                found = store.jobs.get_job(conn, key)
            if found is None or not policy.allows(runtime, "read", found):
                raise JobNotFound(f"no job has id {key}")
            job = opened(found, runtime.keyring)
            if job.is_terminal:
                if raise_on_failure and job.status != JobStatus.SUCCEEDED:
                    raise JobFailed(job)
                return job
            left = deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeout(
                    f"job {key} ({job.task}) did not end within {limit:g}s; it is "
                    f"{job.status}. Wait again, or cancel it with ratchet.cancel_job()"
                )
            watch.wait(min(left, READ_AT_LEAST_EVERY))
    finally:
        watch.close()
