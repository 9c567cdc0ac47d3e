"""The kit an app's test suite uses: see what was enqueued, and run jobs in the test's process.

::

    from flask_ratchet.testing import assert_enqueued, eager, run_jobs

    def test_signup_sends_a_welcome(client, app):
        client.post("/signup", data={"email": "a@example.org"})
        with app.app_context():
            job = assert_enqueued(send_welcome, args=[1], queue="mail")
            (ran,) = run_jobs(app)            # a burst worker, without a subprocess
            assert ran.result == "sent"

    def test_everything_at_once(client, app):
        with eager(app):                      # jobs run when the enqueuing transaction commits
            client.post("/signup", data={"email": "a@example.org"})

Jobs run in-process go through a worker's own code: the app context, ``JobContext``, ``async def``
tasks, retries, callbacks, chains, batches and events, written to the database as a worker writes
them. There is no subprocess and no thread: no polling, heartbeat, orphan recovery, recurring
firing, nor timeouts.

With ``RATCHET_EAGER = True`` in the app's config, eager mode is on from ``init_app`` (and an
in-memory SQLite database, ``sqlite://``, is allowed: nothing else could see it); with
``RATCHET_EAGER_RAISE = False`` a failed job is only recorded, not raised.

The pytest plugin (``flask_ratchet.testing.plugin``, registered by the package) adds the fixtures
``ratchet_jobs`` and ``ratchet_eager``, for an ``app`` fixture of your own.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from flask import Flask, current_app

from ..api.jobs import find
from ..errors import JobFailed, JobNotFound
from ..job import Job, opened
from ..runtime import Runtime
from ..states import JobStatus
from ..worker.inline import InlineRunner, eager_hook, inline_runner

__all__ = [
    "JobFailed",
    "JobsKit",
    "assert_enqueued",
    "eager",
    "enqueued_jobs",
    "refute_enqueued",
    "run_jobs",
]

_ANY: Any = object()


def _app(app: Flask | None) -> Flask:
    return app if app is not None else current_app._get_current_object()  # type: ignore[attr-defined]


def _runtime(app: Flask | None = None) -> Runtime:
    runtime: Runtime = _app(app).extensions["ratchet"]
    return runtime


# -- running jobs ---------------------------------------------------------------------------------


def run_jobs(
    app: Flask | None = None,
    *,
    queues: Mapping[str, int] | list[str] | None = None,
    limit: int | None = None,
    retry_delays: bool = False,
    raise_errors: bool = False,
) -> list[Job]:
    """Run the due jobs in this process, one at a time, until none is due; return them as they
    are now, in the order they ran (a job retried here is listed once per attempt).

    Jobs a run makes due (a chain's next step, a batch's callback, a retry) run too. A retry
    runs at once unless ``retry_delays``, when it waits for its backoff like any scheduled job.
    Jobs scheduled for later stay PENDING.

    :raises: with ``raise_errors``, what the first job that failed for good raised (or
        :class:`~flask_ratchet.errors.JobFailed`, with the ended job), once its outcome is
        written.
    """
    target = _app(app)
    ran = inline_runner(target).run(
        queues=queues, limit=limit, retry_delays=retry_delays, raise_errors=raise_errors
    )
    with target.app_context():
        return _snapshots(_runtime(target), ran)


@contextmanager
def eager(app: Flask | None = None, *, raise_errors: bool = True) -> Iterator[InlineRunner]:
    """Eager mode inside the block: a job runs in this process as soon as the transaction that
    enqueued it commits (at once outside a transaction), with retries run at once. Jobs
    enqueued in ``db.session`` (a request's) run inside ``db.session.commit()``, once the
    commit is over and the session has no transaction left (a savepoint's wait for the
    outermost commit).

    ``raise_errors``: a job that fails for good raises its error to whoever committed (out of
    ``db.session.commit()``, the session still usable; for a request, the test client sees the
    exception); ``False`` only records it.
    """
    target = _app(app)
    runtime = _runtime(target)
    previous = runtime.run_inline
    runtime.run_inline = eager_hook(target, raise_errors=raise_errors)
    try:
        yield inline_runner(target)
    finally:
        runtime.run_inline = previous


# -- what was enqueued ----------------------------------------------------------------------------


def enqueued_jobs(
    task: Callable[..., Any] | str | None = None,
    *,
    queue: str | None = None,
    status: JobStatus | str | Sequence[JobStatus | str] | None = JobStatus.PENDING,
    app: Flask | None = None,
) -> list[Job]:
    """The jobs of ``task`` (every task for ``None``) in ``queue``, oldest first; by default
    the PENDING ones (``status=None``: all). Inside a transaction, its own jobs count too."""
    runtime = _runtime(app)
    out: list[Job] = []
    cursor: str | None = None
    while True:
        page = find(
            runtime, status=status, task=task, queue=queue, limit=500, cursor=cursor, scoped=False
        )
        out.extend(page.items)
        cursor = page.next_cursor
        if cursor is None:
            return out[::-1]


def assert_enqueued(
    task: Callable[..., Any] | str,
    *,
    args: Sequence[Any] = _ANY,
    kwargs: Mapping[str, Any] = _ANY,
    queue: str | None = None,
    app: Flask | None = None,
    **options: Any,
) -> Job:
    """Assert that exactly one PENDING job of ``task`` matches, and return it.

    ``args`` and ``kwargs`` must equal the job's (as JSON gives them back: lists for tuples);
    ``options`` name :class:`~flask_ratchet.Job` fields: ``priority``, ``max_retries``,
    ``tags`` (in any order), ``business_key``, ``resource``, ``timeout``, ``params``…
    """
    matching, others = _matching(task, args, kwargs, queue, app, options)
    if len(matching) != 1:
        wanted = _describe(task, args, kwargs, queue, options)
        found = "; ".join(_summary(j) for j in (matching or others)[:10]) or "none"
        how_many = "no job" if not matching else f"{len(matching)} jobs"
        raise AssertionError(
            f"expected one PENDING job {wanted}, found {how_many}. "
            f"PENDING jobs of that task: {found}"
        )
    return matching[0]


def refute_enqueued(
    task: Callable[..., Any] | str,
    *,
    args: Sequence[Any] = _ANY,
    kwargs: Mapping[str, Any] = _ANY,
    queue: str | None = None,
    app: Flask | None = None,
    **options: Any,
) -> None:
    """Assert that no PENDING job of ``task`` matches (see :func:`assert_enqueued`)."""
    matching, _ = _matching(task, args, kwargs, queue, app, options)
    if matching:
        wanted = _describe(task, args, kwargs, queue, options)
        found = "; ".join(_summary(j) for j in matching[:10])
        raise AssertionError(f"expected no PENDING job {wanted}, found {len(matching)}: {found}")


def _matching(
    task: Callable[..., Any] | str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    queue: str | None,
    app: Flask | None,
    options: dict[str, Any],
) -> tuple[list[Job], list[Job]]:
    unknown = sorted(set(options) - set(Job.__dataclass_fields__))
    if unknown:
        raise TypeError(
            f"{', '.join(unknown)}: not a job field; match on "
            f"{', '.join(sorted(Job.__dataclass_fields__))}"
        )
    jobs = enqueued_jobs(task, queue=queue, app=app)

    def matches(job: Job) -> bool:
        if args is not _ANY and job.args != list(args):
            return False
        if kwargs is not _ANY and job.kwargs != dict(kwargs):
            return False
        return all(_same(name, getattr(job, name), value) for name, value in options.items())

    hits = [j for j in jobs if matches(j)]
    return hits, jobs


def _same(name: str, actual: Any, wanted: Any) -> bool:
    if name == "tags":
        return sorted(actual) == sorted(wanted)
    return bool(actual == wanted)


def _describe(
    task: Callable[..., Any] | str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    queue: str | None,
    options: dict[str, Any],
) -> str:
    name = task if isinstance(task, str) else getattr(task, "name", None) or repr(task)
    parts = [f"of {name}"]
    if args is not _ANY:
        parts.append(f"args={list(args)!r}")
    if kwargs is not _ANY:
        parts.append(f"kwargs={dict(kwargs)!r}")
    if queue is not None:
        parts.append(f"queue={queue!r}")
    parts.extend(f"{k}={v!r}" for k, v in options.items())
    return " ".join(parts)


def _summary(job: Job) -> str:
    return (
        f"args={job.args!r} kwargs={job.kwargs!r} queue={job.queue!r} "
        f"priority={job.priority!r} tags={list(job.tags)!r}"
    )


class JobsKit:
    """The kit bound to one app (what the pytest fixtures give a test)."""

    def __init__(self, app: Flask) -> None:
        self.app = app

    def run(self, **options: Any) -> list[Job]:
        """:func:`run_jobs` for this app."""
        return run_jobs(self.app, **options)

    def enqueued(self, task: Callable[..., Any] | str | None = None, **filters: Any) -> list[Job]:
        """:func:`enqueued_jobs` of this app."""
        return enqueued_jobs(task, app=self.app, **filters)

    def assert_enqueued(self, task: Callable[..., Any] | str, **match: Any) -> Job:
        """:func:`assert_enqueued` in this app."""
        return assert_enqueued(task, app=self.app, **match)

    def refute_enqueued(self, task: Callable[..., Any] | str, **match: Any) -> None:
        """:func:`refute_enqueued` in this app."""
        refute_enqueued(task, app=self.app, **match)


def _snapshots(runtime: Runtime, ids: list[uuid.UUID]) -> list[Job]:
    out = []
    with runtime.engine.connect() as conn:
        for job_id in ids:
            job = runtime.store.jobs.get_job(conn, job_id)
            if job is None:
                raise JobNotFound(f"job {job_id} ran here and is gone (deleted meanwhile)")
            out.append(opened(job, runtime.keyring))
    return out
