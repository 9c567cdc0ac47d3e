"""OpenTelemetry spans, recorded by the real SDK with its in-memory exporter: a submission's
PRODUCER span, each run's CONSUMER span in the same trace, and the fast-path statements' CLIENT
spans; and nothing at all, nor any stored context, while nothing traces."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import sqlalchemy as sa
from flask import Flask
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from flask_ratchet import DuplicateBusinessKey, schema, tracing
from flask_ratchet.testing import eager, run_jobs
from tests import tracing_app
from tests.apps import add, db, fail_until, ratchet
from tests.tracing_app import call_downstream

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    """Where the spans go: a real SDK provider, exporting to memory as each span ends, that
    ratchet (and the tasks, ``tests.tracing_app.provider``) record with."""
    memory = InMemorySpanExporter()
    traced = TracerProvider()
    traced.add_span_processor(SimpleSpanProcessor(memory))
    tracing.use_tracer_provider(traced)
    tracing_app.provider = traced
    yield memory
    tracing.use_tracer_provider(None)
    tracing_app.provider = None
    traced.shutdown()


def named(spans: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def one(spans: Sequence[ReadableSpan], name: str) -> ReadableSpan:
    (span,) = named(spans, name)
    return span


def span_id(span: ReadableSpan) -> int:
    context = span.get_span_context()
    assert context is not None
    return context.span_id


def trace_id(span: ReadableSpan) -> int:
    context = span.get_span_context()
    assert context is not None
    return context.trace_id


def parent_id(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def traceparent(span: ReadableSpan) -> str:
    """The W3C ``traceparent`` header of ``span``."""
    context = span.get_span_context()
    assert context is not None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def stored_context(job_id: object) -> str | None:
    """What the job's row holds in ``trace_context``, as committed."""
    with db.engine.connect() as conn:
        value = conn.execute(
            sa.select(schema.job.c.trace_context).where(
                schema.job.c.job_id == uuid.UUID(str(job_id))
            )
        ).scalar_one()
    return None if value is None else str(value)


def test_a_request_its_job_and_what_the_job_calls_are_one_trace(
    app: Flask, exporter: InMemorySpanExporter
) -> None:
    server = tracing_app.provider.get_tracer("web")  # type: ignore[union-attr]

    @app.post("/orders")
    def order() -> str:
        # What a web framework's instrumentation does around each request.
        with server.start_as_current_span("POST /orders", kind=SpanKind.SERVER):
            handle = call_downstream.builder(7).with_queue("billing").submit()
            db.session.commit()
            return str(handle.id)

    job_id = app.test_client().post("/orders").text
    (ran,) = run_jobs(app)
    assert str(ran.id) == job_id and ran.result == 7
    spans = exporter.get_finished_spans()
    request = one(spans, "POST /orders")
    send = one(spans, "send billing")
    process = one(spans, "process billing")
    downstream = one(spans, "GET /inventory")

    assert send.kind is SpanKind.PRODUCER and parent_id(send) == span_id(request)
    assert dict(send.attributes or {}) == {
        "messaging.system": "flask_ratchet",
        "messaging.operation.name": "send",
        "messaging.operation.type": "send",
        "messaging.destination.name": "billing",
        "messaging.message.id": job_id,
        "messaging.flask_ratchet.task": "tests.tracing_app:call_downstream",
    }
    # The run is the child of the submission, in the request's trace, and linked to it.
    assert process.kind is SpanKind.CONSUMER
    assert trace_id(process) == trace_id(send) == trace_id(request)
    assert parent_id(process) == span_id(send)
    assert [link.context.span_id for link in process.links] == [span_id(send)]
    assert dict(process.attributes or {}) == {
        "messaging.system": "flask_ratchet",
        "messaging.operation.name": "process",
        "messaging.operation.type": "process",
        "messaging.destination.name": "billing",
        "messaging.message.id": job_id,
        "messaging.client.id": "inline",
        "messaging.flask_ratchet.task": "tests.tracing_app:call_downstream",
        "messaging.flask_ratchet.attempt": 1,
        "messaging.flask_ratchet.outcome": "SUCCEEDED",
    }
    assert process.status.status_code is StatusCode.UNSET
    # What the job calls is inside its run.
    assert parent_id(downstream) == span_id(process)
    # The job's row holds the submission's W3C trace context.
    stored = json.loads(stored_context(job_id) or "{}")
    assert stored == {"traceparent": traceparent(send)}


def test_a_job_run_in_process_inside_a_span_links_to_that_span_too(
    app: Flask, exporter: InMemorySpanExporter
) -> None:
    """Eager mode runs the job at once, inside the caller's span: the run is still the child of
    its submission, and links to both."""
    caller = tracing_app.provider.get_tracer("web")  # type: ignore[union-attr]
    with eager(app), caller.start_as_current_span("POST /orders", kind=SpanKind.SERVER):
        add.enqueue(2, 3)
    spans = exporter.get_finished_spans()
    request, send = one(spans, "POST /orders"), one(spans, "send default")
    process = one(spans, "process default")
    assert parent_id(send) == span_id(request) and parent_id(process) == span_id(send)
    assert [link.context.span_id for link in process.links] == [span_id(send), span_id(request)]


def test_a_failed_attempt_marks_its_span_with_the_error_as_stored(
    app: Flask, exporter: InMemorySpanExporter
) -> None:
    job_id = str(fail_until.enqueue(2).id)  # fails once ("password=hunter2"), then works
    run_jobs(app)
    spans = exporter.get_finished_spans()
    send = one(spans, "send default")
    failed, worked = named(spans, "process default")
    assert [s.attributes["messaging.flask_ratchet.attempt"] for s in (failed, worked)] == [1, 2]  # type: ignore[index]
    # Both attempts are children of the one submission.
    assert parent_id(failed) == parent_id(worked) == span_id(send)
    assert failed.attributes["messaging.flask_ratchet.outcome"] == "RETRY"  # type: ignore[index]
    assert failed.attributes["error.type"] == "ConnectionError"  # type: ignore[index]
    assert failed.status.status_code is StatusCode.ERROR
    (event,) = failed.events
    assert event.name == "exception"
    assert event.attributes["exception.type"] == "ConnectionError"  # type: ignore[index]
    message = str(event.attributes["exception.message"])  # type: ignore[index]
    assert message.startswith("ConnectionError: attempt 1 failed")
    # The error as ratchet stores it: secrets masked, in the message and the traceback alike.
    assert "hunter2" not in message and "hunter2" not in str(failed.status.description)
    assert "fail_until" in str(event.attributes["exception.stacktrace"])  # type: ignore[index]
    assert "hunter2" not in str(event.attributes["exception.stacktrace"])  # type: ignore[index]
    assert worked.attributes["messaging.flask_ratchet.outcome"] == "SUCCEEDED"  # type: ignore[index]
    assert "error.type" not in (worked.attributes or {}) and not worked.events
    assert worked.attributes["messaging.message.id"] == job_id  # type: ignore[index]


def test_many_jobs_at_once_are_one_send_span_and_share_its_context(
    app: Flask, exporter: InMemorySpanExporter, dialect: str
) -> None:
    handles = ratchet.enqueue_many(
        [
            add.builder(1, 1),
            add.builder(2, 2).with_queue("reports"),
            call_downstream.builder(3),
        ]
    )
    spans = exporter.get_finished_spans()
    send = one(spans, "send")  # two queues: no destination in the name
    attributes = dict(send.attributes or {})
    assert attributes["messaging.batch.message_count"] == 3
    assert "messaging.destination.name" not in attributes
    assert "messaging.message.id" not in attributes
    assert "messaging.flask_ratchet.task" not in attributes  # two tasks
    contexts = {stored_context(h.id) for h in handles}
    assert contexts == {json.dumps({"traceparent": traceparent(send)}, separators=(",", ":"))}
    if dialect == "postgresql":  # many plain jobs are written with COPY, past the engine
        copies = [s for s in spans if s.name.startswith("COPY ")]
        assert [s.name for s in copies] == ["COPY ratchet_job", "COPY ratchet_job_queue"]
        assert all(parent_id(s) == span_id(send) for s in copies)
        assert all(s.kind is SpanKind.CLIENT for s in copies)
    exporter.clear()
    run_jobs(app)
    runs = [s for s in exporter.get_finished_spans() if s.name.startswith("process ")]
    assert sorted(s.name for s in runs) == ["process default", "process default", "process reports"]
    assert {parent_id(s) for s in runs} == {span_id(send)}


def test_fast_path_statements_are_client_spans_without_their_values(
    app: Flask, exporter: InMemorySpanExporter, dialect: str
) -> None:
    secret = "s3cr3t-argument-value"
    ratchet.enqueue(call_downstream, 1).with_tags(secret).with_business_key(secret).submit()
    run_jobs(app)
    spans = exporter.get_finished_spans()
    statements = [s for s in spans if "db.system.name" in (s.attributes or {})]
    for span in statements:
        attributes = dict(span.attributes or {})
        assert span.kind is SpanKind.CLIENT
        assert attributes["db.system.name"] == attributes["db.system"] == dialect
        assert attributes["db.query.summary"] == span.name
        assert span.name.startswith(str(attributes["db.operation.name"]))
    names = [s.name for s in statements]
    send = one(spans, "send default")
    if dialect == "postgresql":
        # One statement writes the job, its hot row, tags and key; the claim and the batch of
        # outcomes are one statement each.
        submit = one(statements, names[0])
        assert names[0] == (
            "INSERT ratchet_job INSERT ratchet_job_queue INSERT ratchet_job_tag "
            "INSERT ratchet_business_key"
        )
        assert parent_id(submit) == span_id(send)
        assert "UPDATE ratchet_job_queue" in names  # the claim
        complete = [n for n in names if n.startswith("DELETE ratchet_job_queue UPDATE")]
        assert len(complete) == 1
    else:
        # SQLite and MariaDB: one job's rows are inserted on the cursor; on SQLite the
        # worker's write transactions begin IMMEDIATE there too, outside any trace, where a
        # BEGIN (it changes nothing) is no span.
        assert "BEGIN" not in names
        inserts = [s for s in statements if s.name.startswith("INSERT ")]
        assert [s.name for s in inserts][:2] == ["INSERT ratchet_job", "INSERT ratchet_job_queue"]
        assert all(parent_id(s) == span_id(send) for s in inserts[:2])
        assert one(statements, "INSERT ratchet_job").attributes["db.collection.name"] == (  # type: ignore[index]
            "ratchet_job"
        )
    # Never a value: not the tag, the key or the arguments.
    for span in spans:
        assert secret not in repr(dict(span.attributes or {})), span.name
        assert secret not in span.name


def test_a_refused_submission_marks_its_spans_failed(
    app: Flask, exporter: InMemorySpanExporter, dialect: str
) -> None:
    ratchet.enqueue(add, 1, 2).with_business_key("order-9").submit()
    exporter.clear()
    with pytest.raises(DuplicateBusinessKey):
        ratchet.enqueue(add, 3, 4).with_business_key("order-9").submit()
    spans = exporter.get_finished_spans()
    send = one(spans, "send default")
    assert send.status.status_code is StatusCode.ERROR
    assert send.attributes["error.type"] == "flask_ratchet.errors.DuplicateBusinessKey"  # type: ignore[index]
    assert "order-9" not in str(send.status.description)  # the type, never the message
    if dialect == "postgresql":  # the held key fails the submission's one statement
        (refused,) = [s for s in spans if s.status.status_code is StatusCode.ERROR and s != send]
        assert refused.name.startswith("INSERT ratchet_job ")
        assert refused.attributes["error.type"] == "psycopg.errors.UniqueViolation"  # type: ignore[index]
        assert refused.attributes["db.response.status_code"] == "23505"  # type: ignore[index]
        assert parent_id(refused) == span_id(send)


def test_nothing_is_traced_or_stored_without_a_provider(app: Flask) -> None:
    """OpenTelemetry's API is installed here, but no SDK is set up: no tracer, no span, and
    the job is written without a context. Traced later, its run starts a trace of its own."""
    assert tracing.tracer() is None
    job_id = add.enqueue(1, 2).id
    assert stored_context(job_id) is None
    traced = TracerProvider()
    memory = InMemorySpanExporter()
    traced.add_span_processor(SimpleSpanProcessor(memory))
    tracing.use_tracer_provider(traced)
    try:
        run_jobs(app)
    finally:
        tracing.use_tracer_provider(None)
    process = one(memory.get_finished_spans(), "process default")
    assert process.parent is None and not process.links
    assert tracing.tracer() is None


def test_a_disabled_sdk_traces_nothing(app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    disabled = TracerProvider()
    memory = InMemorySpanExporter()
    disabled.add_span_processor(SimpleSpanProcessor(memory))
    tracing.use_tracer_provider(disabled)
    try:
        assert tracing.tracer() is None
        job_id = add.enqueue(1, 2).id
        run_jobs(app)
    finally:
        tracing.use_tracer_provider(None)
    assert stored_context(job_id) is None
    assert memory.get_finished_spans() == ()


HOSTILE_CONTEXTS = [
    "not json {",
    "[" * 100_000,  # nested past the recursion limit
    '{"traceparent": ' + "[" * 100_000 + "}",
    '["00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"]',  # not an object
    json.dumps(  # a real traceparent, with baggage too long to read
        {
            "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "baggage": "k=" + "v" * 400_000,
        }
    ),
    '{"traceparent": "00-00000000000000000000000000000000-0000000000000000-01"}',
]


@pytest.mark.parametrize("stored", HOSTILE_CONTEXTS, ids=range(len(HOSTILE_CONTEXTS)))
def test_a_stored_context_that_is_not_one_starts_a_trace_of_its_own(
    app: Flask, exporter: InMemorySpanExporter, stored: str
) -> None:
    job_id = add.enqueue(1, 2).id
    with db.engine.begin() as conn:
        conn.execute(sa.text("UPDATE ratchet_job SET trace_context = :c"), {"c": stored})
    exporter.clear()
    (ran,) = run_jobs(app)
    assert ran.id == job_id and ran.result == 3
    process = one(exporter.get_finished_spans(), "process default")
    assert process.parent is None and not process.links


class Broken(SpanProcessor):
    """A span processor that raises wherever the SDK calls it (the SDK does not guard them)."""

    def on_start(self, span: object, parent_context: object = None) -> None:
        raise RuntimeError("on_start")

    def on_end(self, span: object) -> None:
        raise RuntimeError("on_end")


def test_a_tracing_pipeline_that_raises_never_fails_a_submission_or_a_run(
    app: Flask, exporter: InMemorySpanExporter
) -> None:
    broken = TracerProvider()
    broken.add_span_processor(Broken())
    tracing.use_tracer_provider(broken)
    try:
        handle = add.enqueue(1, 2)
        flaky = fail_until.enqueue(2).id
        ran = run_jobs(app)
    finally:
        tracing.use_tracer_provider(None)
        broken.shutdown()
    assert {j.id: j.status.value for j in ran} == {handle.id: "SUCCEEDED", flaky: "SUCCEEDED"}
    assert ratchet.get_job(handle.id).result == 3  # type: ignore[union-attr]


def test_without_opentelemetry_nothing_of_it_is_imported(database_url: str) -> None:
    """A process where ``opentelemetry`` cannot be imported (the extra not installed): jobs
    are submitted and run, none carries a context, and no module of it was loaded."""
    script = """
import sys
sys.modules["opentelemetry"] = None  # as if the package were not installed
from flask_ratchet import tracing
from flask_ratchet.testing import eager, run_jobs
from tests.apps import add, create_app, db
import sqlalchemy as sa
assert tracing.AVAILABLE is False and tracing.tracer() is None
app = create_app(sys.argv[1])
with app.app_context():
    add.enqueue(1, 2)
    (ran,) = run_jobs(app)
    assert ran.result == 3, ran
    with db.engine.connect() as conn:
        stored = conn.execute(sa.text("SELECT trace_context FROM ratchet_job")).scalar_one()
    assert stored is None, stored
    db.engine.dispose()
loaded = [m for m in sys.modules if m.startswith("opentelemetry.")]
assert loaded == [], loaded
print("ok")
"""
    done = subprocess.run(
        [sys.executable, "-c", script, database_url],
        cwd=ROOT,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr


def test_every_span_is_recorded_in_flask_ratchets_scope(
    app: Flask, exporter: InMemorySpanExporter
) -> None:
    add.enqueue(1, 1)
    run_jobs(app)
    spans = exporter.get_finished_spans()
    assert {s.name for s in spans} >= {"send default", "process default"}
    scopes = {s.instrumentation_scope.name for s in spans if s.instrumentation_scope}
    assert scopes == {"flask_ratchet"}


def test_outside_a_trace_only_a_statement_that_did_something_is_a_span(
    app: Flask, exporter: InMemorySpanExporter, dialect: str
) -> None:
    # An idle worker's poll: a claim that finds nothing (and SQLite's BEGIN) makes no span.
    assert ratchet.claim_due(10, "node-a") == []
    assert exporter.get_finished_spans() == ()
    # A claim that takes a job is a span of its own, a root: no trace is current.
    job_id = ratchet.enqueue(add, 1, 2).submit().id
    exporter.clear()
    assert [c.job_id for c in ratchet.claim_due(10, "node-a")] == [job_id]
    statements = [s for s in exporter.get_finished_spans() if s.kind is SpanKind.CLIENT]
    if dialect == "postgresql":  # the claim is one statement on the driver's cursor
        (claim,) = statements
        assert claim.name == "UPDATE ratchet_job_queue" and claim.parent is None
        assert claim.start_time is not None and claim.end_time is not None
        assert claim.start_time < claim.end_time
    else:  # SQLite claims through SQLAlchemy: only its BEGIN is the driver's, and changes nothing
        assert statements == []
