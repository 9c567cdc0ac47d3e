"""``JobContext``: what a running job can know about itself and tell the operator.

The worker makes one per attempt and binds it to the executing thread. A task gets it from
``JobContext.current()`` or by declaring a parameter annotated ``JobContext``.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn, Protocol

from .job import BatchChild, BatchProgress
from .redact import text_masked
from .retry import Retry, sanitize

#: What one attempt's log may store, so one chatty job cannot flood the table or the job's
#: page: at most this many lines, of at most this many characters each, and at most this many
#: bytes of text (UTF-8) in all. Lines past either limit are dropped and counted, and a last line
#: says how many (it fits in the byte budget too).
MAX_LOG_LINES = 1000
MAX_LOG_LINE = 2000
MAX_LOG_BYTES = 64 * 1024
#: The part of :data:`MAX_LOG_BYTES` kept for the line saying what was dropped.
_DROPPED_NOTE_ROOM = 200
#: How often a job's progress or cancel check may reach the database.
CHECK_INTERVAL = 1.0
#: Children a follow-up reads per query by default (``BatchContext.results()``), and at most.
BATCH_PAGE = 500
BATCH_PAGE_MAX = 10_000

_current: contextvars.ContextVar[JobContext | None] = contextvars.ContextVar(
    "ratchet_job_context", default=None
)
job_logger = logging.getLogger("flask_ratchet.job")
_UNREAD: Any = object()


class MaskedLines(logging.Filter):
    """Makes a line of a job's logger that shows a secret (a URL's password, a
    ``password=…``-style pair) its text with the secret masked, before any handler sees it:
    the worker's terminal, the app's own handlers, an error tracker's breadcrumbs, as well as
    the stored line. A line without one keeps its template and arguments (for grouping)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            text = record.getMessage()
        except Exception:  # a line whose arguments do not fit: logging reports it as ever
            return True
        hidden = text_masked(text)
        if hidden != text:
            record.msg, record.args = hidden, None
        if record.exc_info and not record.exc_text:
            # Formatters print the traceback from exc_text when it is set: masked, once.
            record.exc_text = text_masked(_TRACEBACKS.formatException(record.exc_info))
        return True


#: Formats a line's traceback as logging's formatters do.
_TRACEBACKS = logging.Formatter()


job_logger.addFilter(MaskedLines())


class Supervisor(Protocol):
    """The worker side of a context: where progress goes and whether the job may go on."""

    def report_progress(self, job_id: uuid.UUID, progress: dict[str, Any]) -> None: ...
    def still_running(self, job_id: uuid.UUID) -> bool: ...
    def result_of(self, job_id: uuid.UUID) -> Any: ...
    def signal_payload_of(self, job_id: uuid.UUID) -> Any: ...
    def batch_of(self, batch_id: uuid.UUID) -> BatchProgress | None: ...
    def batch_children(
        self, batch_id: uuid.UUID, after: uuid.UUID | None, limit: int
    ) -> list[BatchChild]: ...


@dataclass(frozen=True, slots=True)
class BatchContext:
    """The batch a follow-up job runs after (``on_success``, ``on_failure``,
    ``when_success_rate``, ``when_failure_count``), as ``JobContext.current().batch`` gives it:
    its counts, and its children's results, read from the database a page at a time.

    ::

        @ratchet.task
        def report(name: str, ctx: JobContext) -> int:   # batch.on_success(report, "import")
            assert ctx.batch is not None
            return sum(ctx.batch.results())              # each child's result, in order
    """

    #: The batch's counts as the follow-up started (its parent job's id is ``progress.batch_id``).
    progress: BatchProgress
    _supervisor: Supervisor = field(repr=False)

    @property
    def id(self) -> uuid.UUID:
        """The batch's id (its parent job's)."""
        return self.progress.batch_id

    def children(self, page_size: int = BATCH_PAGE) -> Iterator[BatchChild]:
        """Every child, in the order it was added to the batch, with its status and result.

        Streamed: one query per ``page_size`` children (a keyset page), each read when the
        iteration reaches it, so a batch of 100,000 children is never held at once.
        """
        if isinstance(page_size, bool) or not isinstance(page_size, int):
            raise TypeError(f"page_size must be a whole number, got {page_size!r}")
        if not 1 <= page_size <= BATCH_PAGE_MAX:
            raise ValueError(f"page_size must be from 1 to {BATCH_PAGE_MAX}, got {page_size}")
        after: uuid.UUID | None = None
        while True:
            page = self._supervisor.batch_children(self.id, after, page_size)
            yield from page
            if len(page) < page_size:
                return
            after = page[-1].id

    def results(self, page_size: int = BATCH_PAGE) -> Iterator[Any]:
        """Each child's result, in the order the children were added (a chord's list of
        results, streamed as :meth:`children` is); ``None`` for a child that did not succeed
        (``on_success`` runs only once all did)."""
        for child in self.children(page_size):
            yield child.result


@dataclass(frozen=True, slots=True)
class LogLine:
    """One line a job logged, kept with its attempt."""

    logged_at: datetime
    level: str
    message: str


@dataclass
class JobContext:
    """The running job: its id, attempt (1-based), params, logger, progress and cancellation."""

    job_id: uuid.UUID
    task: str
    attempt: int
    params: dict[str, Any]
    #: The job this one ran after (a chain step's previous step), whose result it may read.
    depends_on: uuid.UUID | None = None
    #: The queue it was submitted to, and the node (worker) running it.
    queue: str = "default"
    node: str | None = None
    _supervisor: Supervisor | None = field(default=None, repr=False)
    # A plain flag, not an Event: nothing waits on it, and an Event per job is costly.
    _stopped: bool = field(default=False, repr=False)
    _lines: list[LogLine] = field(default_factory=list, repr=False)
    #: Lines kept for storage this attempt, flushed ones included (the limit counts them all).
    _kept: int = field(default=0, repr=False)
    # The job's thread records lines while the worker's watchdog takes them for an early write.
    _lines_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _dropped: int = field(default=0, repr=False)
    _log_bytes: int = field(default=0, repr=False)
    _last_check: float = field(default=0.0, repr=False)
    _last_progress: float = field(default=0.0, repr=False)
    _previous: Any = field(default=_UNREAD, repr=False)
    _batch: Any = field(default=_UNREAD, repr=False)
    _signal_payload: Any = field(default=_UNREAD, repr=False)
    #: Called once when the job is stopped: an ``async def`` task's cancellation.
    _on_stop: Callable[[], None] | None = field(default=None, repr=False)

    @staticmethod
    def current() -> JobContext:
        """The context of the job running in this thread.

        :raises RuntimeError: outside a job.
        """
        ctx = _current.get()
        if ctx is None:
            raise RuntimeError("JobContext.current() is only available while a job runs")
        return ctx

    @property
    def previous_result(self) -> Any:
        """In a chain, the previous step's result (None for a first step, or when the previous
        job returned nothing). Read from the database once, on first use."""
        if self._previous is _UNREAD:
            if self.depends_on is None or self._supervisor is None:
                self._previous = None
            else:
                self._previous = self._supervisor.result_of(self.depends_on)
        return self._previous

    @property
    def signal_payload(self) -> Any:
        """For a job that awaited a signal (``await_signal``), the payload its signal delivered
        (``None`` if it carried none). Read from the database once, on first use."""
        if self._signal_payload is _UNREAD:
            supervisor = self._supervisor
            found = None if supervisor is None else supervisor.signal_payload_of(self.job_id)
            self._signal_payload = found
        return self._signal_payload

    @property
    def batch(self) -> BatchContext | None:
        """In a batch's follow-up (``on_success``, ``on_failure``, ``when_…``), that batch: its
        counts and its children's results (:meth:`BatchContext.results`); ``None`` in any
        other job. Its counts are read from the database once, on first use."""
        if self._batch is _UNREAD:
            found = None
            if self.depends_on is not None and self._supervisor is not None:
                found = self._supervisor.batch_of(self.depends_on)
            supervisor = self._supervisor
            self._batch = (
                None if found is None or supervisor is None else BatchContext(found, supervisor)
            )
        return self._batch  # type: ignore[no-any-return]

    @property
    def logger(self) -> logging.LoggerAdapter[logging.Logger]:
        """A logger whose lines are stored with this attempt (and shown in the console)."""
        fields = {
            "job_id": str(self.job_id),
            "task": self.task,
            "queue": self.queue,
            "attempt": self.attempt,
            "node": self.node,
        }
        return logging.LoggerAdapter(job_logger, fields)

    def set_progress(
        self, done: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Report progress, e.g. ``set_progress(40, 100, "resizing")``; stored once a second."""
        now = time.monotonic()
        if self._supervisor is None or (
            now - self._last_progress < CHECK_INTERVAL and done != total
        ):
            return
        self._last_progress = now
        progress: dict[str, Any] = {"done": done, "total": total, "message": message}
        self._supervisor.report_progress(self.job_id, progress)

    def is_canceled(self) -> bool:
        """True once the job was canceled or timed out: a long job should check and stop."""
        if self._stopped:
            return True
        now = time.monotonic()
        if self._supervisor is not None and now - self._last_check >= CHECK_INTERVAL:
            self._last_check = now
            if not self._supervisor.still_running(self.job_id):
                self._stopped = True
        return self._stopped

    def retry(self, message: str = "", *, in_: timedelta | float | None = None) -> NoReturn:
        """Run this job again ``in_`` from now (``None``: after its backoff), as Celery's
        ``self.retry(countdown=…)``: raises :class:`~flask_ratchet.retry.Retry`, which must
        leave the task. It counts against ``max_retries``.

        :raises InvalidOption: for an ``in_`` that is negative, NaN or over 100 years.
        """
        raise Retry(message, in_=in_)

    def stop(self) -> None:
        """Ask the job to stop (the worker calls this on cancel or timeout). An ``async def``
        task is cancelled: ``asyncio.CancelledError`` is raised at its next ``await``."""
        self._stopped = True
        callback = self._on_stop  # read once: the job's thread may clear it meanwhile
        if callback is not None:
            callback()

    def on_stop(self, callback: Callable[[], None] | None) -> None:
        """Call ``callback`` when the job is stopped (at once if it already was); ``None``
        forgets it. For the worker's event loop."""
        self._on_stop = callback
        if callback is not None and self._stopped:
            callback()

    def record(self, record: logging.LogRecord) -> None:
        """Keep one log line for storage: cut, with its secrets masked like an error's, while
        the attempt's log is within its limits; after that only counted."""
        with self._lines_lock:
            if self._dropped or self._kept >= MAX_LOG_LINES:
                self._dropped += 1
                return
            message = sanitize(record.getMessage(), MAX_LOG_LINE)
            size = len(message.encode())
            if self._log_bytes + size > MAX_LOG_BYTES - _DROPPED_NOTE_ROOM:
                # Every later line is dropped too, so what is kept is the log's unbroken start.
                self._dropped += 1
                return
            self._log_bytes += size
            self._kept += 1
            self._lines.append(
                LogLine(datetime.fromtimestamp(record.created, UTC), record.levelname, message)
            )

    def take_lines(self, *, final: bool = True) -> list[LogLine]:
        """The lines logged since the last take, emptying the buffer. ``final`` (the attempt
        has ended): with a note of any lines dropped, and the limits start again for the next
        attempt; otherwise (an early write of a running attempt's lines) the limits go on."""
        with self._lines_lock:
            lines, self._lines = self._lines, []
            if not final:
                return lines
            if self._dropped:
                note = (
                    f"{self._dropped} more log lines were dropped (an attempt keeps at most "
                    f"{MAX_LOG_LINES} lines and {MAX_LOG_BYTES // 1024} KiB of log text)"
                )
                lines.append(LogLine(datetime.now(UTC), "WARNING", note))
                self._dropped = 0
            self._log_bytes = 0
            self._kept = 0
            return lines

    def give_back_lines(self, lines: list[LogLine]) -> None:
        """Put back, before any logged since, the ``lines`` an early write could not store."""
        with self._lines_lock:
            self._lines[:0] = lines

    @contextmanager
    def bound(self) -> Iterator[JobContext]:
        """Make this the current context while the job runs."""
        token = _current.set(self)
        try:
            yield self
        finally:
            _current.reset(token)


class CaptureHandler(logging.Handler):
    """Sends every line logged during a job (to any logger) to that job's context."""

    def emit(self, record: logging.LogRecord) -> None:
        ctx = _current.get()
        if ctx is not None:
            ctx.record(record)


# -- which parameter of a task receives the context -------------------------------------------


def _parameters(func: Callable[..., Any]) -> Mapping[str, inspect.Parameter]:
    """``func``'s parameters, with string annotations resolved where they can be."""
    try:
        return inspect.signature(func, eval_str=True).parameters
    except (NameError, TypeError, ValueError):
        return inspect.signature(func).parameters


def _takes_context(param: inspect.Parameter) -> bool:
    return param.annotation is JobContext or param.annotation == "JobContext"


@functools.lru_cache(maxsize=1024)  # looked up for every job run
def context_parameter(func: Callable[..., Any]) -> str | None:
    """The name of ``func``'s parameter annotated ``JobContext``, if it has one: the worker
    passes the running job's context there."""
    for name, param in _parameters(func).items():
        if _takes_context(param):
            return name
    return None


def required_arguments(func: Callable[..., Any]) -> list[str]:
    """The parameters a caller must fill in: no default, not ``*args``/``**kwargs``, and not
    the ``JobContext`` one (the worker fills that in)."""
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return [
        name
        for name, param in _parameters(func).items()
        if param.default is param.empty and param.kind not in variadic and not _takes_context(param)
    ]
