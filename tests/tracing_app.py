"""The tasks the tracing tests run, and the app a traced worker subprocess loads.

``create_app()`` sets OpenTelemetry's global tracer provider, as an app that traces does at
start-up, with an exporter that writes each ended span as one JSON line to the file named by
``RATCHET_TEST_SPANS``: the test reads the worker's spans back from it.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from flask import Flask
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from tests.apps import create_app as create_test_app
from tests.apps import ratchet

#: The provider the tasks' own spans go to: a test's (in-process), else the global one.
provider: TracerProvider | None = None


@ratchet.task
def call_downstream(n: int) -> int:
    """A job that calls something traced (a span of the app's own, as an HTTP client's
    instrumentation would make), then returns ``n``."""
    tracer = trace.get_tracer("tests.tracing_app", tracer_provider=provider)
    with tracer.start_as_current_span("GET /inventory", kind=trace.SpanKind.CLIENT):
        return n


class JsonLinesExporter(SpanExporter):
    """Appends each span to a file, one JSON object a line (job threads end spans at once)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(json.dumps(described(span)) + "\n" for span in spans)
        with self._lock, self.path.open("a") as out:
            out.write(lines)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def described(span: ReadableSpan) -> dict[str, Any]:
    """What the tests compare of a span, with ids as lowercase hex."""
    context = span.get_span_context()
    assert context is not None
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_id": None if span.parent is None else f"{span.parent.span_id:016x}",
        "links": [f"{link.context.span_id:016x}" for link in span.links],
        "attributes": dict(span.attributes or {}),
        "status": span.status.status_code.name,
    }


def create_app() -> Flask:
    """The test app, with the global tracer provider set to write spans to a file."""
    traced = TracerProvider()
    traced.add_span_processor(
        SimpleSpanProcessor(JsonLinesExporter(Path(os.environ["RATCHET_TEST_SPANS"])))
    )
    trace.set_tracer_provider(traced)
    return create_test_app()
