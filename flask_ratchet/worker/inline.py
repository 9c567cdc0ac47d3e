"""Running jobs in the calling process, one at a time: the testing kit's engine.

:class:`InlineRunner` is a burst worker without a subprocess or threads of its own. It claims one
due job at a time on the app's own engine (so an in-memory SQLite database works), runs it through
the worker's executor in the calling thread (gates, timeouts aside, the app context, the
``JobContext``, ``async def`` tasks) and writes the outcome through the worker's completer (retries,
callbacks, chains, batches and events, as a worker writes them), until nothing is due.

What a worker process does and this does not: poll, heartbeat, recover orphans, fire recurring
jobs, and enforce timeouts (there is no watchdog thread: a job that never returns never returns).
"""

from __future__ import annotations

import functools
import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from flask import Flask
from sqlalchemy.engine import Engine

from ..api.jobs import claim_due, get
from ..context import CaptureHandler, job_logger
from ..delivery import announce
from ..errors import JobFailed, JobNotFound
from ..facts import Event
from ..runtime import Runtime
from ..store import Store
from ..store.types import ClaimedJob, Finished, Outcome
from .announcer import predicate_evaluator
from .completer import Completer
from .executor import Executor
from .supervision import Supervision

#: The node id in-process runs are claimed under (shown as ``picked_by``).
NODE_ID = "inline"
#: How long writing an outcome is retried (the database locked or away) before it raises.
GIVE_UP_AFTER = 10.0


@dataclass(frozen=True, slots=True)
class Ran:
    """What one in-process run did: the job's id, the outcome written (``None``: none, it was
    canceled meanwhile), and what it raised (if it did)."""

    job_id: uuid.UUID
    finished: Finished | None
    failure: BaseException | None = None

    @property
    def outcome(self) -> Outcome | None:
        return None if self.finished is None else self.finished.outcome


@dataclass(frozen=True, slots=True)
class _Parts:
    """What an in-process run uses, made at the first run (in an app context: the app's own
    engine)."""

    store: Store
    engine: Engine
    executor: Executor
    completer: Completer


class InlineRunner:
    """Runs an app's due jobs in the calling thread. One per app (its circuit breakers and
    executor live as long as it does); safe to call from several threads, one run at a time."""

    def __init__(self, app: Flask) -> None:
        self.app = app
        self.runtime: Runtime = app.extensions["ratchet"]
        self._lock = threading.RLock()
        self._written: list[Finished] = []
        self._parts: _Parts | None = None

    def run(
        self,
        *,
        queues: Mapping[str, int] | list[str] | None = None,
        limit: int | None = None,
        retry_delays: bool = True,
        raise_errors: bool = False,
    ) -> list[uuid.UUID]:
        """Run due jobs until none is due (or ``limit`` have run); return their ids in the order
        they ran. Jobs a run makes due (follow-ups, retries) run too; with ``retry_delays=False``
        a retry is due at once instead of after its backoff.

        :raises: with ``raise_errors``, the error of the first job that failed for good, after
            its outcome is written (the jobs after it stay due).
        """
        if self.runtime.in_inline_run():
            return []  # a job run here enqueued more: the loop below picks them up
        with self._lock, self.app.app_context(), self.runtime.running_inline():
            return self._drain(queues, limit, retry_delays, raise_errors)

    def _drain(
        self,
        queues: Mapping[str, int] | list[str] | None,
        limit: int | None,
        retry_delays: bool,
        raise_errors: bool,
    ) -> list[uuid.UUID]:
        parts = self._start()
        ran: list[uuid.UUID] = []
        while limit is None or len(ran) < limit:
            claimed = claim_due(self.runtime, 1, NODE_ID, queues)
            if not claimed:
                return ran
            done = self._run_one(parts, claimed[0])
            ran.append(done.job_id)
            if done.outcome is Outcome.RETRY and not retry_delays:
                with parts.store.begin(parts.engine) as conn:
                    parts.store.jobs.make_due(conn, done.job_id)
            if raise_errors and done.outcome is Outcome.FAILED:
                if done.failure is not None:
                    raise done.failure
                # An error that is no exception of this process (an unreadable row): the job.
                ended = get(self.runtime, done.job_id, scoped=False)
                if ended is None:  # deleted meanwhile (a callback of its own)
                    raise JobNotFound(f"job {done.job_id} failed and is gone")
                raise JobFailed(ended)
        return ran

    def _start(self) -> _Parts:
        if self._parts is not None:
            return self._parts
        store, engine = self.runtime.store, self.runtime.engine

        def send(events: list[Event]) -> None:
            # Events of this process's writes are sent at once, after their commit.
            announce(self.app, events, self.runtime.wake)

        # No other worker here to hand a job of an unknown task to: it fails for good at once.
        config = self.runtime.config
        supervision = Supervision(
            store, engine, NODE_ID, config, send, keyring=self.runtime.keyring, hand_back=False
        )
        completer = Completer(
            store,
            engine,
            NODE_ID,
            predicate=predicate_evaluator(self.app),
            on_events=send,
            more_coming=lambda: False,
            give_up_after=GIVE_UP_AFTER,  # a test fails, rather than hang on a lost database
        )
        # No job threads: run_here runs each job in the calling thread.
        executor = Executor(
            self.app, self.runtime, supervision, self._written.append, 0, lambda: None
        )
        if job_logger.level == logging.NOTSET:
            job_logger.setLevel(logging.INFO)  # as a worker does: the job's info lines are kept
        self._parts = _Parts(store, engine, executor, completer)
        return self._parts

    def _run_one(self, parts: _Parts, claimed: ClaimedJob) -> Ran:
        capture = CaptureHandler()  # the job's log lines are stored with its attempt
        logging.getLogger().addHandler(capture)
        try:
            run = parts.executor.run_here(claimed)
        finally:
            logging.getLogger().removeHandler(capture)
        finished, self._written[:] = list(self._written), []
        if finished:
            parts.completer.write(finished)
        return Ran(claimed.job_id, finished[0] if finished else None, run.failure)


def eager_hook(app: Flask, *, raise_errors: bool) -> Callable[[], object]:
    """What eager mode sets as ``Runtime.run_inline``: run what is due now, retries at once."""
    return functools.partial(inline_runner(app).run, raise_errors=raise_errors, retry_delays=False)


def inline_runner(app: Flask) -> InlineRunner:
    """The app's one :class:`InlineRunner`, made at first use and kept on its runtime."""
    runtime: Runtime = app.extensions["ratchet"]
    runner = runtime.inline_runner
    if not isinstance(runner, InlineRunner):
        runner = runtime.inline_runner = InlineRunner(app)
    return runner
