"""Exceptions raised by flask-ratchet.

Every error says what was wrong and how to fix it, and is raised before anything is written.
"""

from __future__ import annotations

from typing import Any


class RatchetError(Exception):
    """Base class for every error flask-ratchet raises on purpose."""


class SchemaNotReady(RatchetError, RuntimeError):
    """ratchet's tables are missing or older than this version needs; the message names the
    revision found, the one needed and the command that brings them up to date."""


class ConfigError(RatchetError, ValueError):
    """A ``RATCHET_*`` configuration value is invalid; the message names the key."""


class TaskNotAllowed(RatchetError, LookupError):
    """The function is not a registered task and is not under ``RATCHET_ALLOWED_MODULES``."""


class UnknownTask(TaskNotAllowed):
    """A stored job names a task this worker does not know: not registered here, and not a
    function an allowed module of this worker defines (another app's task, or one only newer
    code has). Unlike a task that exists and is not allowed, it may run elsewhere: the worker
    hands the job back instead of failing it (see ``RATCHET_UNKNOWN_TASK_GRACE``)."""


class PayloadError(RatchetError, TypeError, ValueError):
    """Arguments, params or a result cannot be stored: not JSON, nested more than
    :data:`~flask_ratchet.payload.MAX_DEPTH` levels deep, or holding text that is not valid
    Unicode (a lone surrogate). A ``TypeError`` for callers that catch it as one, and a
    ``ValueError`` like every other refused value."""


class InvalidOption(RatchetError, ValueError):
    """A value given to a submission (an option, key, name, tag, duration or due time) is not
    allowed; the message names it and says what is. Raised before anything is written."""


class PayloadTooLarge(RatchetError, ValueError):
    """The encoded payload is larger than ``RATCHET_MAX_PAYLOAD_BYTES``."""


class UnreadableJob(RatchetError):
    """A claimed job's stored row cannot be run as it is: a column holds text that is not JSON,
    JSON of another shape than ratchet writes, or a value outside what the column allows.

    The message names the column. The job ends FAILED for good (a dead letter): running it
    again would read the same row.
    """


class DuplicateBusinessKey(RatchetError):
    """Another active (PENDING, RUNNING or PAUSED) job already holds this business key."""

    def __init__(self, business_key: str) -> None:
        super().__init__(
            f"business key {business_key!r} is held by another active job; wait for it to "
            "finish, cancel it, or use replace() to supersede it"
        )
        self.business_key = business_key


class JobNotFound(RatchetError, LookupError):
    """No job has the given id."""


class JobNotAuthorized(RatchetError, PermissionError):
    """``RATCHET_AUTHORIZE`` did not let the principal submit this job; nothing was written."""


class InvalidJobId(RatchetError, ValueError):
    """A job id that is neither a ``uuid.UUID`` nor the text of one (``get_job("42")``), raised
    before anything is read or written. A ``ValueError``, as it was before it had a name; a
    well-formed id of no job is not an error (``get_job`` returns ``None``)."""


class JobFailed(RatchetError):
    """A job ended without a result where its result was asked for: FAILED (retries spent,
    ``DoNotRetry``, a timeout) or CANCELED (by an operator, an upstream step, or past its
    deadline: ``expires``). Raised by ``wait(..., raise_on_failure=True)`` and by the testing
    kit's ``run_jobs(raise_errors=True)`` for an error that is no exception of this process.

    ``job`` is the ended :class:`~flask_ratchet.job.Job`; ``error`` what it ended with (a FAILED
    job's ``"Type: message"``, a canceled job's reason, or ``None``) and ``status`` its status.
    """

    def __init__(self, job: Any) -> None:
        # Typed Any: errors.py is the bottom layer and cannot name flask_ratchet.job.Job.
        self.job = job
        self.status = job.status
        self.error: str | None = job.error
        why = f": {job.error}" if job.error else ""
        super().__init__(f"job {job.id} ({job.task}) ended {job.status}{why}")


class WaitTimeout(RatchetError, TimeoutError):
    """A job did not end within the time ``wait`` was given."""


class WaitInTransaction(RatchetError, RuntimeError):
    """``wait`` was called inside an open transaction, which the job's end could never be seen
    from (or, for a job enqueued in it, could never happen before)."""


class IllegalTransition(RatchetError):
    """The requested state change is not allowed from the job's current status."""


class DoNotRetry(Exception):
    """Raise from a task (or chain from it) to skip retries and go straight to the DLQ."""
