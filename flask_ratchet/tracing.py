"""OpenTelemetry tracing (the ``otel`` extra, ``opentelemetry-api``).

What is traced, following OpenTelemetry's semantic conventions for messaging and databases:

- each submission: a PRODUCER span ``send <queue>`` around writing its jobs; its context (what
  the configured propagator injects, W3C ``traceparent`` by default) is stored with every job
  it wrote (``ratchet_job.trace_context``, JSON);
- each run of a job: a CONSUMER span ``process <queue>``, the child of that stored context and
  linked to it, current while the task runs, so that one trace holds the request that enqueued
  the job, each attempt and what the task calls;
- each statement ratchet sends on the driver's cursor (:mod:`flask_ratchet.store.driver`, the
  binary ``COPY``), which SQLAlchemy's engine events and so its instrumentation never see: a
  CLIENT span named by a summary of the statement (``UPDATE ratchet_job_queue``), without its
  text or parameters; outside a trace only for a statement that failed or touched rows.

Whether ``opentelemetry`` is importable is decided once, when this module is imported: without
it :func:`tracer` answers ``None`` at its first line and every hook does nothing more. With it,
spans go to the global tracer provider (or the one :func:`use_tracer_provider` names), read at
each use, so a provider set after start-up is found. While there is none (OpenTelemetry's
placeholder), or the SDK is disabled, :func:`tracer` is ``None`` too: no span is made, and jobs
are written with no trace context.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

try:
    from opentelemetry import context as context_api
    from opentelemetry import propagate, trace
except ImportError:  # the otel extra is not installed: every hook stays a no-op
    AVAILABLE = False
else:
    AVAILABLE = True

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer, TracerProvider

#: ``messaging.system``: no well-known value fits, so a custom one (and the namespace of the
#: attributes only ratchet has, ``messaging.flask_ratchet.*``).
SYSTEM = "flask_ratchet"
#: The instrumentation scope the spans are recorded under.
SCOPE = "flask_ratchet"
#: The longest stored context read back (``traceparent``, ``tracestate`` and some baggage fit
#: many times over); a longer value is no context.
MAX_STORED_CONTEXT = 8192

log = logging.getLogger(__name__)

#: The provider :func:`use_tracer_provider` named, if any.
_chosen: TracerProvider | None = None
#: The provider last looked at, and its tracer (``None``: it records nothing).
_resolved: tuple[object, Tracer | None] = (None, None)


def use_tracer_provider(provider: TracerProvider | None) -> None:
    """Record flask-ratchet's spans with ``provider`` instead of the global tracer provider
    (``None``: the global one again), in this whole process.

    For an application that keeps a provider of its own rather than setting the global one,
    and for tests, which cannot replace the global provider once it is set.
    """
    global _chosen
    _chosen = provider


def tracer() -> Tracer | None:
    """The tracer ratchet's spans go to, or ``None`` when nothing would record them (the
    ``otel`` extra is not installed, no SDK is configured, or it is disabled)."""
    if not AVAILABLE:
        return None
    provider = _chosen if _chosen is not None else trace.get_tracer_provider()
    seen, found = _resolved
    if provider is seen:
        return found
    return _resolve(provider)


def _resolve(provider: TracerProvider) -> Tracer | None:
    global _resolved
    found: Tracer | None = None
    if not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        found = provider.get_tracer(SCOPE, _version())
        if isinstance(found, trace.NoOpTracer):  # an SDK turned off (OTEL_SDK_DISABLED)
            found = None
    _resolved = (provider, found)
    return found


def _version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("flask-ratchet")
    except PackageNotFoundError:
        return None


# -- submissions and runs ------------------------------------------------------------------------


@contextmanager
def sending(
    tracer: Tracer, queues: set[str], tasks: set[str], count: int, message_id: str | None
) -> Iterator[str | None]:
    """The PRODUCER span of one submission of ``count`` jobs (to ``queues``, of ``tasks``;
    ``message_id``: the job's id if there is one job), current inside the block. Yields the
    span's context as the text to store with each job, or ``None`` if it has none to pass on.
    """
    queue = next(iter(queues)) if len(queues) == 1 else None
    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.operation.name": "send",
        "messaging.operation.type": "send",
    }
    if queue is not None:
        attributes["messaging.destination.name"] = queue
    if count > 1:
        attributes["messaging.batch.message_count"] = count
    elif message_id is not None:
        attributes["messaging.message.id"] = message_id
    if len(tasks) == 1:
        attributes["messaging.flask_ratchet.task"] = next(iter(tasks))
    name = "send" if queue is None else f"send {queue}"
    with _current(tracer, name, trace.SpanKind.PRODUCER, attributes) as span:
        yield _creation_context(span)


def _creation_context(span: Span) -> str | None:
    """What the configured propagator writes for ``span`` (``traceparent``, ``tracestate``,
    baggage), as JSON; ``None`` for a span with no valid context."""
    if not span.get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    try:
        propagate.inject(carrier, context=trace.set_span_in_context(span))
    except Exception:  # a propagator's own error: the jobs are written without a context
        log.warning("the trace context could not be written with the jobs", exc_info=True)
        return None
    return json.dumps(carrier, separators=(",", ":")) if carrier else None


def processing(
    tracer: Tracer,
    *,
    queue: str,
    job_id: str,
    task: str,
    attempt: int,
    node: str | None,
    stored: str | None,
) -> AbstractContextManager[Span]:
    """The CONSUMER span of one run of a job, current inside the block: the child of the
    context the job was stored with (``stored``), and linked to it; a job stored without one
    starts a trace of its own (or continues the caller's, in-process). An ambient span that is
    not the parent (a run in-process, inside a request) is linked too."""
    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.operation.name": "process",
        "messaging.operation.type": "process",
        "messaging.destination.name": queue,
        "messaging.message.id": job_id,
        "messaging.flask_ratchet.task": task,
        "messaging.flask_ratchet.attempt": attempt,
    }
    if node is not None:
        attributes["messaging.client.id"] = node
    parent = _extracted(stored)
    links = []
    if parent is not None:
        created = trace.get_current_span(parent).get_span_context()
        links.append(trace.Link(created))
        ambient = trace.get_current_span().get_span_context()
        if ambient.is_valid and ambient.span_id != created.span_id:
            links.append(trace.Link(ambient))
    name = f"process {queue}"
    return _current(tracer, name, trace.SpanKind.CONSUMER, attributes, parent, links)


@functools.lru_cache(maxsize=256)
def _extracted(stored: str | None) -> Context | None:
    """The context a job was stored with, or ``None`` if it has none (or what its row holds
    is not a context: a run never fails over it).

    Cached: the jobs of one submission share their context, and a context is immutable."""
    if stored is None or len(stored) > MAX_STORED_CONTEXT:
        return None  # a propagator writes far less; more would be parsed, and logged, in full
    try:
        carrier = json.loads(stored)
        if not isinstance(carrier, dict):
            return None
        context = propagate.extract({str(k): str(v) for k, v in carrier.items()})
        return context if trace.get_current_span(context).get_span_context().is_valid else None
    except Exception:  # nesting deep enough for RecursionError, a propagator's own error
        return None


def ran(
    span: Span,
    outcome: str,
    failure: BaseException | None,
    error: str | None,
    traceback: str | None,
) -> None:
    """Record how a run ended on its span: ``outcome`` (``SUCCEEDED``, ``RETRY``, ``FAILED``,
    ``RELEASE``), and for a failed attempt its exception's type with ``error`` and
    ``traceback`` as ratchet stores them (secrets masked), never the raw message."""
    try:
        span.set_attribute("messaging.flask_ratchet.outcome", outcome)
        if failure is None:
            return
        kind = error_type(failure)
        span.set_attribute("error.type", kind)
        event = {"exception.type": kind, "exception.message": error or kind}
        if traceback:
            event["exception.stacktrace"] = traceback
        span.add_event("exception", event)
        span.set_status(trace.Status(trace.StatusCode.ERROR, error or kind))
    except Exception:  # never the attempt's outcome: that is written all the same
        log.warning("the outcome could not be recorded on the run's span", exc_info=True)


# -- statements past SQLAlchemy's engine events --------------------------------------------------


class Statement:
    """A CLIENT span around one statement sent on the driver's cursor, made when the statement
    ends (from the time it began), so that it is made only when it tells something: inside a
    trace always; outside one (a worker's poller and completer) only when the statement failed
    or touched rows. An idle worker's polls (a claim that found nothing, SQLite's ``BEGIN``)
    are not a trace each. The caller sets :attr:`affected` to the rows returned or changed.

    The span is named by :func:`summarize`; neither the statement's text nor its parameters
    are recorded. On a failure the span gets the driver's error class (and PostgreSQL's
    SQLSTATE), not its message, which may quote parameters."""

    __slots__ = ("_began", "_sql", "_system", "_tracer", "affected")

    def __init__(self, tracer: Tracer | None, system: str, sql: str) -> None:
        self._tracer = tracer
        self._system = system
        self._sql = sql
        self._began = 0
        self.affected = 0

    def __enter__(self) -> Statement:
        if self._tracer is not None:
            self._began = time.time_ns()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        if self._tracer is None:
            return
        if exc is None and self.affected <= 0 and not trace.get_current_span().is_recording():
            return
        try:
            self._record(self._tracer, exc)
        except Exception:  # never over the statement, which did (or failed) its work already
            log.warning("the span of a statement could not be recorded", exc_info=True)

    def _record(self, tracer: Tracer, exc: BaseException | None) -> None:
        summary, operation, collection = summarize(self._sql)
        attributes: dict[str, Any] = {
            # The stable name, and the one SQLAlchemy's instrumentation still writes by default.
            "db.system.name": self._system,
            "db.system": self._system,
            "db.operation.name": operation,
            "db.query.summary": summary,
        }
        if collection is not None:
            attributes["db.collection.name"] = collection
        span = tracer.start_span(
            summary,
            kind=trace.SpanKind.CLIENT,
            attributes=attributes,
            start_time=self._began,
            record_exception=False,
            set_status_on_exception=False,
        )
        if isinstance(exc, Exception):
            _failed(span, exc)
        span.end()


#: What :func:`statement` gives while tracing is off: shared, as it records nothing.
UNTRACED = Statement(None, "", "")


def statement(system: str, sql: str) -> Statement:
    """The :class:`Statement` span of one statement on the driver's cursor (``system``: the
    database, ``postgresql`` or ``sqlite``); one that makes nothing while tracing is off."""
    found = tracer()
    return UNTRACED if found is None else Statement(found, system, sql)


_COMMENT = re.compile(r"--[^\n]*")
# The tables a statement writes, in order ("DO UPDATE" and "FOR UPDATE" are not statements).
_WRITE = re.compile(
    r"\b(INSERT\s+INTO|(?<!DO )(?<!FOR )UPDATE|DELETE\s+FROM|COPY)\s+(\w+)", re.IGNORECASE
)
_FIRST_WORD = re.compile(r"\s*(\w+)")


@functools.lru_cache(maxsize=256)
def summarize(sql: str) -> tuple[str, str, str | None]:
    """``(db.query.summary, db.operation.name, db.collection.name)`` of a statement: the
    tables it writes with each write's operation, in order (``INSERT ratchet_job INSERT
    ratchet_job_queue``), or its first word when it writes none (``BEGIN``, ``SAVEPOINT``);
    the collection only when it names one table. Low-cardinality by construction: ratchet's own
    statements, never a value."""
    text = _COMMENT.sub(" ", sql)
    writes = [(op.split()[0].upper(), table) for op, table in _WRITE.findall(text)]
    if not writes:
        first = _FIRST_WORD.match(text)
        word = first.group(1).upper() if first else "SQL"
        return word, word, None
    summary = " ".join(dict.fromkeys(f"{op} {table}" for op, table in writes))
    tables = {table for _, table in writes}
    return summary, writes[0][0], next(iter(tables)) if len(tables) == 1 else None


# -- spans ---------------------------------------------------------------------------------------


@contextmanager
def _current(
    tracer: Tracer,
    name: str,
    kind: trace.SpanKind,
    attributes: Mapping[str, Any],
    context: Context | None = None,
    links: list[trace.Link] | None = None,
) -> Iterator[Span]:
    """A span, current inside the block and ended after it. An exception leaving the block
    marks it failed with the exception's type only (OpenTelemetry's own handling would record
    the message, where a driver quotes parameters)."""
    try:
        span = tracer.start_span(
            name,
            context=context,
            kind=kind,
            attributes=attributes,
            links=links,
            record_exception=False,
            set_status_on_exception=False,
        )
        # attach/detach rather than trace.use_span: the same, without its own error handling
        # (done here) and a generator of its own, on the path of every run.
        token = context_api.attach(trace.set_span_in_context(span))
    except Exception:  # a provider's or processor's own error: the work goes on untraced
        log.warning("span %r could not be started", name, exc_info=True)
        yield trace.INVALID_SPAN
        return
    try:
        yield span
    except Exception as exc:
        _failed(span, exc)
        raise
    finally:
        _end(span, token)


def _end(span: Span, token: object) -> None:
    """Detach and end ``span``; an error of the SDK's (a span processor's) is logged, never
    raised over the work the span describes."""
    try:
        context_api.detach(token)  # type: ignore[arg-type]
    except Exception:
        log.warning("a span's context could not be detached", exc_info=True)
    try:
        span.end()
    except Exception:
        log.warning("a span could not be ended", exc_info=True)


def _failed(span: Span, exc: Exception) -> None:
    """Mark ``span`` failed with the exception's type only (never raising over ``exc``)."""
    try:
        kind_of = error_type(exc)
        span.set_attribute("error.type", kind_of)
        code = getattr(exc, "sqlstate", None)  # psycopg's errors carry the SQLSTATE
        if isinstance(code, str):
            span.set_attribute("db.response.status_code", code)
        span.set_status(trace.Status(trace.StatusCode.ERROR, kind_of))
    except Exception:
        log.warning("a failed span could not be marked", exc_info=True)


def error_type(exc: BaseException) -> str:
    """``error.type``: the exception's class, qualified by its module unless it is a builtin."""
    cls = type(exc)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"
