"""A real worker whose app set up OpenTelemetry: the job it runs continues the trace of the
process that enqueued it, across the database (tests/tracing_app.py writes the worker's spans
to a file; this process records its own in memory)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from flask_ratchet import schema, tracing
from tests.acceptance.conftest import Workers
from tests.apps import db, ratchet
from tests.tracing_app import call_downstream

APP = "tests.tracing_app:create_app()"


@pytest.fixture
def spans_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the worker's exporter writes its spans (the worker inherits the env)."""
    path = tmp_path / "spans.jsonl"
    monkeypatch.setenv("RATCHET_TEST_SPANS", str(path))
    return path


@pytest.fixture
def provider() -> Iterator[TracerProvider]:
    """This process's own tracing: what ratchet records of the submission."""
    traced = TracerProvider()
    traced.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    tracing.use_tracer_provider(traced)
    yield traced
    tracing.use_tracer_provider(None)
    traced.shutdown()


def test_a_workers_run_continues_the_trace_of_the_request(
    app: Flask, workers: Workers, spans_file: Path, provider: TracerProvider, dialect: str
) -> None:
    web = provider.get_tracer("web")
    with web.start_as_current_span("POST /restock", kind=SpanKind.SERVER) as request:
        job_id = call_downstream.builder(5).with_queue("stock").submit().id
    proc = workers.start("--burst", "--queues", "stock", app=APP)
    assert proc.wait(60) == 0, workers.output(proc)
    job = ratchet.get_job(job_id)
    assert job is not None and job.result == 5

    spans = [json.loads(line) for line in spans_file.read_text().splitlines()]
    (process,) = [s for s in spans if s["name"] == "process stock"]
    (downstream,) = [s for s in spans if s["name"] == "GET /inventory"]
    stored = json.loads(stored_traceparent(job_id))["traceparent"]
    _, trace_id, send_id, _ = stored.split("-")
    # The worker's run is in the request's trace, the child of the submission (which this
    # process recorded as the request's child) and linked to it.
    assert f"{request.get_span_context().trace_id:032x}" == trace_id
    assert process["trace_id"] == trace_id
    assert process["parent_id"] == send_id and process["links"] == [send_id]
    assert process["kind"] == "CONSUMER" and process["status"] == "UNSET"
    attributes: dict[str, Any] = process["attributes"]
    assert attributes["messaging.message.id"] == str(job_id)
    assert attributes["messaging.destination.name"] == "stock"
    assert attributes["messaging.flask_ratchet.outcome"] == "SUCCEEDED"
    assert attributes["messaging.client.id"] == ran_on(job_id)  # the worker's node id
    # What the job called is inside its run.
    assert downstream["parent_id"] == process["span_id"]
    assert downstream["trace_id"] == trace_id
    # The worker's own statements on the driver's cursor are spans too when they do something:
    # PostgreSQL's claim and its batch of outcomes. SQLite's worker sends only BEGIN there,
    # which changes nothing: outside a trace, no span.
    statements = {
        s["name"] for s in spans if s["kind"] == "CLIENT" and "db.system" in s["attributes"]
    }
    if dialect == "postgresql":
        assert "UPDATE ratchet_job_queue" in statements
        assert any(name.startswith("DELETE ratchet_job_queue") for name in statements)
    else:
        assert statements == set()


def stored_traceparent(job_id: object) -> str:
    """The job's stored trace context."""
    with db.engine.connect() as conn:
        value = conn.execute(
            sa.select(schema.job.c.trace_context).where(schema.job.c.job_id == job_id)
        ).scalar_one()
    assert isinstance(value, str)
    return value


def ran_on(job_id: object) -> str:
    """The node its one execution names."""
    with db.engine.connect() as conn:
        node = conn.execute(
            sa.select(schema.execution.c.node_id).where(schema.execution.c.job_id == job_id)
        ).scalar_one()
    return str(node)
