"""Who submits a job, and who may see and change it: ``RATCHET_PRINCIPAL`` and
``RATCHET_AUTHORIZE``.

The principal is whoever the host app says is asking (``RATCHET_PRINCIPAL``, a callable of no
arguments, such as ``lambda: current_user.get_id()`` with Flask-Login). It is written into each
job submitted (:attr:`Job.principal <flask_ratchet.Job.principal>`) and handed to the policy.

The policy (``RATCHET_AUTHORIZE``, a callable ``(principal, operation, job) -> bool``) decides
for each job an operation touches, the operation being one of :data:`OPERATIONS`:

- a ``create`` it denies raises :class:`~flask_ratchet.errors.JobNotAuthorized` before
  anything is written;
- a job it does not let the principal ``read`` is, to that principal, a job that does not
  exist: ``get_job`` returns ``None``, ``find_jobs`` leaves it out, ``wait`` raises
  ``JobNotFound``, an operation on it returns ``False``;
- a change it denies (``cancel`` …) changes nothing, and a bulk operation leaves that job out.

Without a policy every job is allowed and nothing is read to ask. Internal work (the worker,
maintenance, a recurring master's firing) asks no policy: it acts for the app.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from sqlalchemy.engine import Connection

from .. import payload
from ..errors import ConfigError, JobNotAuthorized
from ..job import Job, opened
from ..runtime import Runtime
from ..states import JobStatus
from ..store.types import NewJob

#: What the policy is asked about: a submission, a read, and each change an operator or the
#: app can make to a job that exists.
OPERATIONS = (
    "create",
    "read",
    "cancel",
    "pause",
    "resume",
    "retry",
    "run_now",
    "delete",
    "replace",
    "signal",
)
#: The longest principal a job can hold (its column).
MAX_PRINCIPAL = 255


def principal(runtime: Runtime) -> str | None:
    """Who is asking, as ``RATCHET_PRINCIPAL`` says (a number is read as its text); ``None``
    without the setting, or when it names nobody.

    :raises ConfigError: if it returns something else than a text, a number or ``None``, or a
        text longer than :data:`MAX_PRINCIPAL`.
    """
    get = runtime.config.principal
    if get is None:
        return None
    value = get()
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value or len(value) > MAX_PRINCIPAL:
        raise ConfigError(
            "RATCHET_PRINCIPAL must return a non-empty text of at most "
            f"{MAX_PRINCIPAL} characters (or None), got {value!r}"
        )
    return value


def active(runtime: Runtime) -> bool:
    """Whether a policy is set: without one, nothing is read to ask it."""
    return runtime.config.authorize is not None


def allows(runtime: Runtime, operation: str, job: Job, who: str | None = None) -> bool:
    """Whether the policy lets ``who`` (default: the current principal) do ``operation`` to
    ``job``; always True without a policy."""
    authorize = runtime.config.authorize
    if authorize is None:
        return True
    return bool(authorize(principal(runtime) if who is None else who, operation, job))


def visible(runtime: Runtime, jobs: Sequence[Job]) -> list[Job]:
    """The jobs of ``jobs`` the current principal may read."""
    if not active(runtime):
        return list(jobs)
    who = principal(runtime)
    return [j for j in jobs if allows(runtime, "read", j, who)]


def permitted(
    runtime: Runtime, conn: Connection, operation: str, ids: Sequence[uuid.UUID]
) -> list[uuid.UUID]:
    """The ids of ``ids`` whose job the current principal may read and ``operation``; all of
    them without a policy (nothing is read)."""
    if not active(runtime) or not ids:
        return list(ids)
    who = principal(runtime)
    return [
        j.id
        for j in runtime.store.jobs.get_jobs(conn, list(ids))
        if allows(runtime, "read", j, who) and allows(runtime, operation, j, who)
    ]


def may(runtime: Runtime, conn: Connection, operation: str, job_id: uuid.UUID) -> bool:
    """Whether the current principal may read the job ``job_id`` and ``operation`` it (True
    without a policy, and for a job that does not exist: its operation then finds none)."""
    if not active(runtime):
        return True
    found = runtime.store.jobs.get_job(conn, job_id)
    if found is None:
        return True
    who = principal(runtime)  # the job just read is asked about, not read again
    return allows(runtime, "read", found, who) and allows(runtime, operation, found, who)


def stamp(runtime: Runtime, jobs: Sequence[NewJob]) -> None:
    """Write the current principal into each job about to be submitted, and ask the policy
    whether it may create each, before anything is written.

    :raises JobNotAuthorized: for the first job the policy refuses (nothing is written).
    """
    config = runtime.config
    if config.principal is None and config.authorize is None:
        return
    who = principal(runtime)
    for new in jobs:
        new.principal = who
    if config.authorize is None:
        return
    now = datetime.now(UTC)
    for new in jobs:
        if not config.authorize(who, "create", preview(runtime, new, now)):
            raise JobNotAuthorized(
                f"RATCHET_AUTHORIZE does not let {who!r} create a job of {new.task}; "
                "nothing was written"
            )


def preview(runtime: Runtime, new: NewJob, now: datetime) -> Job:
    """The snapshot ``new`` will read back as once written (its arguments opened), for the
    policy to decide on before it is."""
    o = new.options
    args, kwargs = payload.read_call(new.payload)
    job = Job(
        id=new.job_id,
        task=new.task,
        queue=o.queue,
        status=JobStatus.PENDING if new.signal is None else JobStatus.WAITING,
        priority=o.priority,
        args=args,
        kwargs=kwargs,
        params=payload.read_stored("params", new.params, dict) or {},
        attempts=0,
        max_retries=o.max_retries,
        backoff=o.backoff,
        backoff_base=o.backoff_base,
        timeout=o.timeout,
        resource=o.resource,
        tags=tuple(o.tags),
        idempotency_key=new.idempotency_key,
        business_key=new.business_key,
        created_at=now,
        scheduled_at=new.run_at or now + timedelta(seconds=new.delay),
        picked_by=None,
        picked_at=None,
        paused_from=None,
        finished_at=None,
        error=None,
        result=None,
        superseded_by=None,
        depends_on=new.depends_on,
        recurring_id=new.recurring_id,
        expires_at=new.expires_at,
        signal_key=None if new.signal is None else new.signal[0],
        principal=new.principal,
    )
    return opened(job, runtime.keyring)
