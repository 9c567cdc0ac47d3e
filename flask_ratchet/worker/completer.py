"""Writes outcomes in batches: one transaction per few milliseconds or per ``max_batch`` jobs.

Each write is fenced (see :mod:`flask_ratchet.store.executions`). A store error never turns an
outcome into something else: the batch is retried with backoff, and if the worker must stop
before it lands, the jobs stay RUNNING and orphan recovery (or this node's own reclaim at its next
start) runs them again.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import (
    DataError,
    DBAPIError,
    IntegrityError,
    InternalError,
    ProgrammingError,
    SQLAlchemyError,
)

from .. import events, facts, payload
from ..facts import Event
from ..retry import first_line
from ..services import QueueService
from ..store import Store
from ..store.types import Evaluator, Finished, Outcome, no_predicates
from .logs import FAILED_ATTEMPT, job_fields

log = logging.getLogger("flask_ratchet.worker")


class Completer(QueueService[Finished]):
    """The thread that writes outcomes. ``put`` from any thread; ``stop`` flushes and joins.
    Each batch written (or given up) is a pass: :attr:`passed` fires."""

    def __init__(
        self,
        store: Store,
        engine: Engine,
        node_id: str,
        *,
        max_batch: int = 200,
        max_wait: float = 0.005,
        on_written: Callable[[], None] = lambda: None,
        predicate: Callable[[str, Any], bool] | None = None,
        on_events: Callable[[list[Event]], None] = lambda _: None,
        more_coming: Callable[[], bool] = lambda: True,
        give_up_after: float | None = None,
        on_counted: Callable[[list[Finished], set[uuid.UUID]], None] | None = None,
    ) -> None:
        super().__init__("ratchet-completer")
        self._store = store
        self._engine = engine
        self._node_id = node_id
        self._max_batch = max_batch
        self._max_wait = max_wait
        self._on_written = on_written
        self._predicate = predicate
        self._on_events = on_events
        self._more_coming = more_coming
        #: Seconds of failed tries after which a write raises (``None``: it never gives up).
        self._give_up_after = give_up_after
        #: Told of every batch written, with the ids whose write took effect (metrics).
        self._on_counted = on_counted
        self._backlog = 0
        self._count_lock = threading.Lock()
        self.written = 0
        self.discarded = 0
        #: The jobs whose outcomes are handed over and not yet written (or given up).
        self._unwritten: Counter[uuid.UUID] = Counter()

    def put(self, item: Finished) -> None:
        with self._count_lock:
            self._backlog += 1
            self._unwritten[item.job_id] += 1
        super().put(item)

    def unwritten(self) -> set[uuid.UUID]:
        """The jobs whose outcomes are handed over and not yet written (or given up)."""
        with self._count_lock:
            return set(self._unwritten)

    @property
    def backlog(self) -> int:
        """Outcomes handed over and not yet written (or given up)."""
        return self._backlog

    def pending(self) -> bool:
        """Whether outcomes are waiting to be written."""
        return self._backlog > 0

    def handle(self, first: Finished) -> None:
        batch = [first]
        # Wait for company only if other jobs are under way: a lone outcome (a quiet worker,
        # the step of a chain) is written at once.
        wait = self._max_wait if self._more_coming() else 0.0
        deadline = time.monotonic() + wait
        while len(batch) < self._max_batch:
            item = self.take(deadline - time.monotonic())
            if item is None:
                break
            batch.append(item)
        self._write(batch)

    def write(self, batch: list[Finished]) -> None:
        """Write ``batch`` in the calling thread, as the thread writes what is ``put``."""
        with self._count_lock:
            self._backlog += len(batch)
            self._unwritten.update(item.job_id for item in batch)
        self._write(batch)

    def _write(self, batch: list[Finished]) -> None:
        try:
            self._write_with_retries(batch)
        finally:
            with self._count_lock:
                self._backlog -= len(batch)
                for item in batch:
                    left = self._unwritten[item.job_id] - 1
                    if left > 0:
                        self._unwritten[item.job_id] = left
                    else:
                        self._unwritten.pop(item.job_id, None)
            self._on_written()

    def _write_with_retries(
        self, batch: list[Finished], evaluate: Evaluator | None = None, alone: bool = False
    ) -> None:
        """Write ``batch``; ``alone``: set off each job's follow-ups in a savepoint of its own
        (after a first try failed on what a job's end sets off)."""
        delay = 0.05
        began = time.monotonic()
        while True:
            try:
                # User code (WHEN predicates) runs before the transaction, never inside it,
                # and once per outcome however often the write is tried.
                if evaluate is None:
                    evaluate = self._evaluate(batch)
                with self._store.begin(self._engine) as conn:
                    applied, recorded = self._complete(conn, batch, evaluate, alone)
                break
            except SQLAlchemyError as exc:
                if _refused(exc):
                    # The statement itself was refused (bad data, not a lost connection): it
                    # would be refused again. Try once more with each job's follow-ups apart
                    # (a follow-up that fails must not keep outcomes from being written), then
                    # isolate the outcome at fault instead of retrying the batch for ever,
                    # which would hold back every other outcome.
                    if not alone:
                        alone = True
                        continue
                    self._write_refused(batch, exc, evaluate)
                    return
                if self._stop_event.is_set() and delay > 5:
                    log.exception(
                        "could not write %d outcomes before stopping; the jobs stay RUNNING and "
                        "will be recovered",
                        len(batch),
                    )
                    return
                if (
                    self._give_up_after is not None
                    and time.monotonic() - began > self._give_up_after
                ):
                    raise
                log.warning("writing %d outcomes failed; retrying", len(batch), exc_info=True)
                time.sleep(delay)
                delay = min(delay * 2, 10.0)
            except Exception:
                # Not the database: a value in a row that a job's end reads. The same rows
                # would fail the same way: the outcomes go in with each job's follow-ups apart.
                if not alone:
                    alone = True
                    continue
                log.exception(
                    "%d outcomes cannot be written; the jobs stay RUNNING and will be recovered",
                    len(batch),
                )
                return
        self._count(batch, applied)
        self._announce(batch, applied, recorded)

    def _evaluate(self, batch: list[Finished]) -> Evaluator:
        """Evaluate the WHEN predicates of the batch's succeeded jobs now, outside any
        transaction; return the evaluator that looks the values up (a predicate that raised
        raises again there, failing that job's routing)."""
        results = {
            i.job_id: i.result if i.clear_result is None else i.clear_result
            for i in batch
            if i.follow_up and i.outcome == Outcome.SUCCEEDED and i.batch_id is None
        }
        if not results or self._predicate is None:
            return no_predicates
        with self._engine.connect() as conn:
            pending = self._store.flows.pending_predicates(conn, list(results))
        decoded: dict[uuid.UUID, Any] = {}  # each parent's result once, whatever its branches
        values: dict[tuple[uuid.UUID, str], bool | Exception] = {}
        for parent_id, name in pending:
            try:
                if parent_id not in decoded:
                    decoded[parent_id] = payload.loads(results[parent_id])
                values[parent_id, name] = bool(self._predicate(name, decoded[parent_id]))
            except Exception as exc:
                values[parent_id, name] = exc

        def lookup(parent_id: uuid.UUID, name: str) -> bool:
            value = values.get((parent_id, name))
            if value is None:
                raise RuntimeError(f"predicate {name} was not evaluated before the write")
            if isinstance(value, Exception):
                raise value
            return value

        return lookup

    def _complete(
        self, conn: Connection, batch: list[Finished], evaluate: Evaluator, alone: bool = False
    ) -> tuple[set[uuid.UUID], list[Event]]:
        """Write ``batch``, and what the end of its linked jobs sets off, in ``conn``'s
        transaction; return the jobs changed and the events to send after the commit.
        ``alone``: each job's follow-ups in a savepoint of its own (see
        :meth:`flask_ratchet.store.flows.Flows.ended`)."""
        applied = self._store.executions.complete_many(
            conn, self._node_id, batch, evaluate, isolate=alone
        )
        return applied, facts.take(conn)

    def _announce(
        self, batch: list[Finished], applied: set[uuid.UUID], recorded: list[Event]
    ) -> None:
        """Hand the committed batch's events to the worker's announcer (built only for signals
        someone listens to)."""
        out = [*_outcome_events(batch, applied), *recorded]
        if out:
            self._on_events(out)

    def _write_refused(
        self, batch: list[Finished], exc: SQLAlchemyError, evaluate: Evaluator | None
    ) -> None:
        """Write a refused batch in halves, down to the outcome the database refuses; store that
        one reduced (no log lines or traceback, and for a failure an error saying why), or leave
        its job RUNNING for recovery if even that is refused. An outcome never changes kind: a
        success is never stored as a failure."""
        if len(batch) > 1:
            middle = len(batch) // 2
            self._write_with_retries(batch[:middle], evaluate, alone=True)
            self._write_with_retries(batch[middle:], evaluate, alone=True)
            return
        (item,) = batch
        reduced = _reduced(item, exc)
        try:
            if evaluate is None:
                evaluate = self._evaluate([reduced])
            with self._store.begin(self._engine) as conn:
                applied, recorded = self._complete(conn, [reduced], evaluate, alone=True)
        except SQLAlchemyError:
            log.exception(
                "the outcome of job %s cannot be stored; the job stays RUNNING and will run again "
                "after this worker stops",
                item.job_id,
            )
            return
        log.error(
            "the outcome of job %s was refused (%s); stored without its details",
            item.job_id,
            first_line(exc),
        )
        self._count([reduced], applied)
        self._announce([reduced], applied, recorded)

    def _count(self, batch: list[Finished], applied: set[uuid.UUID]) -> None:
        _log_failures(batch, applied, self._node_id)
        if self._on_counted is not None:
            self._on_counted(batch, applied)
        self.written += len(applied)
        lost = [i.job_id for i in batch if i.job_id not in applied]
        if lost:
            self.discarded += len(lost)
            log.info(
                "%d outcomes discarded: the jobs were canceled or recovered meanwhile (%s)",
                len(lost),
                ", ".join(map(str, lost[:5])),
            )


def _log_failures(batch: list[Finished], applied: set[uuid.UUID], node: str) -> None:
    """One line per failed attempt written: a retry with its due time, or a job failed for good
    (the dead-letter queue), each with the job's fields. Successes stay quiet."""
    for item in batch:
        if item.outcome is Outcome.SUCCEEDED:
            continue  # the common case: no line, no fields to build
        fields = job_fields(item.job_id, item.task, item.queue, item.attempt, node)
        fields[FAILED_ATTEMPT] = True
        if item.outcome is Outcome.RETRY and item.job_id in applied:
            due = datetime.now(UTC) + timedelta(seconds=item.delay)
            log.warning(
                "job %s (%s) failed on attempt %d; retry due at %s: %s",
                item.job_id,
                item.task,
                item.attempt,
                due.isoformat(timespec="seconds"),
                _headline(item.error),
                extra=fields,
            )
        elif item.outcome is Outcome.FAILED and item.job_id in applied:
            log.error(
                "job %s (%s) failed for good on attempt %d (dead-letter queue): %s",
                item.job_id,
                item.task,
                item.attempt,
                _headline(item.error),
                extra=fields,
            )


def _headline(error: str | None) -> str:
    """The first line of a stored error (already cut and masked), for a log line."""
    return (error or "").partition("\n")[0][:300]


def _refused(exc: SQLAlchemyError) -> bool:
    """Whether the database refused the statement itself (constraint, bad data, an error raised
    by a trigger), as opposed to a connection or server that failed along the way."""
    if not isinstance(exc, DBAPIError) or exc.connection_invalidated:
        return False
    return isinstance(exc, IntegrityError | DataError | ProgrammingError | InternalError)


def _reduced(item: Finished, exc: SQLAlchemyError) -> Finished:
    """``item`` without what the database may have refused: log lines, traceback, error text.

    The stored error names only the kind of refusal (the database's message may quote the
    refused data, and be refused in turn); the worker's log has the whole message.
    """
    error = item.error
    if error is not None:
        orig = getattr(exc, "orig", None) or exc
        code = getattr(orig, "sqlstate", None) or getattr(orig, "sqlite_errorname", None)
        kind = type(orig).__name__ + (f" {code}" if code else "")
        error = f"the error could not be stored (the database refused it: {kind})"
    return replace(item, error=error, traceback=None, logs=())


def _outcome_events(batch: list[Finished], applied: set[uuid.UUID]) -> list[Event]:
    """The signals for the outcomes themselves, for the signals someone listens to."""
    completed = events.wanted(events.job_completed)
    failed = events.wanted(events.job_failed)
    retrying = events.wanted(events.job_retrying)
    dead = events.wanted(events.job_dead_lettered)
    if not (completed or failed or retrying or dead):
        return []
    out: list[Event] = []
    for item in batch:
        if item.job_id not in applied or item.outcome == Outcome.RELEASE:
            continue
        about = {"job_id": item.job_id, "task": item.task}
        if item.outcome == Outcome.SUCCEEDED:
            if completed:
                out.append(Event(facts.JOB_COMPLETED, about | {"result": item.result}))
            continue
        failure = about | {"attempt": item.attempt, "error": item.error}
        if failed:
            out.append(Event(facts.JOB_FAILED, failure))
        if item.outcome == Outcome.RETRY and retrying:
            out.append(Event(facts.JOB_RETRYING, failure | {"delay": item.delay}))
        if item.outcome == Outcome.FAILED and dead:
            out.append(Event(facts.JOB_DEAD_LETTERED, failure))
    return out
