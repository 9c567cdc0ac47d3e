"""Worker throughput and latency, with a real ``flask ratchet worker`` process.

    python -m bench.worker [--pg URL] [--jobs 20000] [--store postgresql|sqlite|both]
                           [--task sync|async] [--metrics] [--tracing]

- drain: ``--jobs`` no-op jobs (``def``, or ``async def`` with ``--task async``) enqueued in
  bulk, then one worker with ``--burst`` at concurrency 1 and at the default. Reported end to
  end: jobs over the worker process's whole wall time (start-up and every outcome written
  included), and, for reference, over the span from the first job's start to the last job's
  end;
- pickup latency: an idle worker, 200 jobs enqueued 20 ms apart; each job's latency is its
  execution's start minus its creation; p50/p95/p99;
- with ``--backlog N`` (PostgreSQL), the worker's resident memory with N pending jobs: one
  worker at the default concurrency runs for ``--backlog-seconds`` against the backlog; its
  peak RSS (``VmHWM``) is read from ``/proc`` before it is stopped.
- with ``--tracing``, the enqueuing process and the workers record OpenTelemetry spans with
  the SDK (a batch span processor, as in production) and an exporter that only counts them:
  the jobs carry a trace context, each run is a span, and so is each fast-path statement. The
  drain rows then say how many spans the worker exported.

Prints one table. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bench.enqueue_claim import (
    DEFAULT_PG,
    async_noop,
    bulk,
    db,
    fresh_database,
    make_app,
    noop,
    ratchet,
)

ROOT = Path(__file__).resolve().parents[1]


def worker(
    url: str,
    *args: str,
    app: str = "bench.worker:bench_app()",
    env: dict[str, str] | None = None,
    log: Path | None = None,
) -> subprocess.Popen[bytes]:
    """A ``flask ratchet worker`` process on ``url`` with ``args``, loading ``app``, with
    ``env`` added to this process's environment; what it prints goes to ``log`` (else nowhere)."""
    added = {"BENCH_URL": url, "PYTHONPATH": str(ROOT)} | (env or {})
    command = [sys.executable, "-m", "flask", "--app", app, "ratchet", "worker", *args]
    if log is None:
        return subprocess.Popen(
            command,
            cwd=ROOT,
            env=os.environ | added,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    with log.open("wb") as out:  # the child has its own copy of the file
        return subprocess.Popen(
            command, cwd=ROOT, env=os.environ | added, stdout=out, stderr=subprocess.STDOUT
        )


def bench_app():  # type: ignore[no-untyped-def]
    """The app the benchmark's workers load (``--app bench.worker:bench_app()``)."""
    if os.environ.get("BENCH_TRACING"):
        trace_all(Path(os.environ["BENCH_TRACING"]))
    return make_app(os.environ["BENCH_URL"])


def trace_all(counted: Path | None = None) -> None:
    """Set OpenTelemetry's global tracer provider: the SDK with a batch span processor whose
    exporter sends nothing and counts what it is given, adding the count to ``counted`` (one
    line) when the process exits."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Counting(SpanExporter):
        def __init__(self) -> None:
            self.spans = 0

        def export(self, spans: Any) -> SpanExportResult:
            self.spans += len(spans)
            return SpanExportResult.SUCCESS

        def shutdown(self) -> None:
            if counted is not None:
                with counted.open("a") as out:
                    out.write(f"{self.spans}\n")

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Counting()))
    trace.set_tracer_provider(provider)


def spans_exported(counted: Path) -> int:
    """The spans the workers' exporters counted so far (see :func:`trace_all`), and restart."""
    if not counted.exists():
        return 0
    total = sum(int(line) for line in counted.read_text().split())
    counted.unlink()
    return total


def reset(url: str) -> None:
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        for table in (
            "ratchet_job_log",
            "ratchet_execution",
            "ratchet_dlq_alert",
            "ratchet_job_tag",
            "ratchet_business_key",
            "ratchet_job_queue",
            "ratchet_job",
            "ratchet_node",
            "ratchet_lock",
        ):
            conn.exec_driver_sql(f"DELETE FROM {table}")
    engine.dispose()


def fill(url: str, jobs: int, task: object = noop) -> None:
    """Empty the tables, then enqueue ``jobs`` no-op jobs in bulk, 5,000 per transaction."""
    reset(url)
    app = make_app(url)
    with app.app_context():
        bulk(jobs, task=task)
        db.engine.dispose()


def drain(
    url: str, jobs: int, concurrency: int, task: object = noop, extra: tuple[str, ...] = ()
) -> tuple[float, float]:
    fill(url, jobs, task)
    began = time.perf_counter()
    proc = worker(url, "--burst", "--concurrency", str(concurrency), *extra)
    assert proc.wait(timeout=1800) == 0
    wall = time.perf_counter() - began
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        first, last, done = conn.execute(
            sa.text("SELECT min(started_at), max(finished_at), count(*) FROM ratchet_execution")
        ).one()
    engine.dispose()
    assert done == jobs, f"{done} of {jobs} ran"
    return jobs / (_seconds(last) - _seconds(first)), wall


def backlog_rss(url: str, backlog: int, seconds: float) -> tuple[float, int]:
    """Peak RSS in MB of a worker (default concurrency) running ``seconds`` against a backlog
    of ``backlog`` pending jobs, and how many jobs it ran meanwhile."""
    fill(url, backlog)
    proc = worker(url)
    try:
        time.sleep(seconds)
        status = Path(f"/proc/{proc.pid}/status").read_text().splitlines()
        peak_kb = next(int(line.split()[1]) for line in status if line.startswith("VmHWM"))
    finally:
        proc.terminate()
        assert proc.wait(60) == 0
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        ran = conn.execute(sa.text("SELECT count(*) FROM ratchet_execution")).scalar_one()
    engine.dispose()
    return peak_kb / 1024, int(ran)


def _seconds(value: object) -> float:
    """A timestamp column as epoch seconds (SQLite hands back naive UTC text)."""
    stamp = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return (stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)).timestamp()


def pickup(url: str, n: int = 200, spacing: float = 0.02) -> list[float]:
    reset(url)
    proc = worker(url, "--concurrency", "4")
    app = make_app(url)
    latencies: list[float] = []
    try:
        with app.app_context():
            warm_client()
            time.sleep(3)  # let the worker start and go idle
            for i in range(n):
                ratchet.enqueue_now(noop, i)
                time.sleep(spacing)
            deadline = time.monotonic() + 60
            engine = sa.create_engine(url)
            while time.monotonic() < deadline:
                with engine.connect() as conn:
                    rows = conn.execute(
                        sa.text(
                            "SELECT j.created_at, e.started_at FROM ratchet_execution e "
                            "JOIN ratchet_job j ON j.job_id = e.job_id"
                        )
                    ).all()
                if len(rows) == n:
                    break
                time.sleep(0.2)
            engine.dispose()
            latencies = sorted((_seconds(s) - _seconds(c)) * 1000 for c, s in rows)
            db.engine.dispose()
    finally:
        proc.terminate()
        proc.wait(30)
    return latencies


def warm_client() -> None:
    """Open this process's connections before timing pickups, as the peers' drivers have theirs
    open: the pool's (a first enqueue would connect) and the wake-up sender's (a NOTIFY that
    finds nothing to do). Needs an app context."""
    with db.engine.connect() as conn:
        conn.exec_driver_sql("SELECT 1")
    ratchet.runtime.wake()


def bench_stores(which: str, pg: str, pg_name: str, tmp: Path) -> list[tuple[str, str]]:
    """The databases a benchmark runs on (``which``: postgresql, sqlite or both), fresh and
    migrated: (label, URL) pairs."""
    stores = []
    if which in ("postgresql", "both"):
        stores.append(("PostgreSQL", fresh_database(pg, pg_name)))
    if which in ("sqlite", "both"):
        lite = f"sqlite:///{tmp / 'bench.db'}"
        app = make_app(lite)
        with app.app_context():
            ratchet.runtime.ensure_schema()
            db.engine.dispose()
        stores.append(("SQLite", lite))
    return stores


def percentile(values: list[float], p: float) -> float:
    return values[min(len(values) - 1, int(p * len(values)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg", default=DEFAULT_PG)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--store", choices=["postgresql", "sqlite", "both"], default="both")
    parser.add_argument("--backlog", type=int, default=0, help="pending jobs for the RSS figure")
    parser.add_argument("--backlog-seconds", type=float, default=20.0)
    parser.add_argument("--task", choices=["sync", "async"], default="sync")
    parser.add_argument(
        "--metrics", action="store_true", help="workers serve Prometheus metrics (port 9464)"
    )
    parser.add_argument(
        "--tracing", action="store_true", help="record OpenTelemetry spans (exported nowhere)"
    )
    args = parser.parse_args()
    extra = ("--metrics-port", "127.0.0.1:9464") if args.metrics else ()
    task = async_noop if args.task == "async" else noop
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        counted = Path(tmp) / "spans"
        if args.tracing:
            trace_all()  # this process's submissions: the jobs carry a trace context
            os.environ["BENCH_TRACING"] = str(counted)  # the workers' (inherited)
        stores = bench_stores(args.store, args.pg, "ratchet_bench_worker", Path(tmp))
        for label, url in stores:
            for concurrency in (1, 10):
                rate, wall = drain(url, args.jobs, concurrency, task, extra)
                spans = spans_exported(counted)
                rows.append(
                    (
                        label,
                        f"drain {args.jobs:,} {args.task} no-op jobs, concurrency {concurrency}"
                        + (", metrics on" if args.metrics else "")
                        + (", tracing on" if args.tracing else ""),
                        f"{args.jobs / wall:,.0f} jobs/s end to end ({wall:.1f} s wall; "
                        f"{rate:,.0f} jobs/s over the execution span)"
                        + (f"; {spans:,} spans" if args.tracing else ""),
                    )
                )
            lat = pickup(url)
            spans_exported(counted)  # the pickup worker's, not a drain's
            rows.append(
                (
                    label,
                    "idle pickup latency (200 jobs, 20 ms apart)",
                    f"p50 {percentile(lat, 0.5):.1f} ms, p95 {percentile(lat, 0.95):.1f} ms, "
                    f"p99 {percentile(lat, 0.99):.1f} ms",
                )
            )
            # Last: deleting the backlog afterwards keeps the server busy (vacuum) for a while.
            if args.backlog and label == "PostgreSQL":
                peak, ran = backlog_rss(url, args.backlog, args.backlog_seconds)
                rows.append(
                    (
                        label,
                        f"worker RSS with {args.backlog:,} pending (concurrency 10)",
                        f"peak {peak:.0f} MB ({ran:,} jobs run in {args.backlog_seconds:.0f} s)",
                    )
                )
    width = max(len(r[1]) for r in rows)
    for store, what, figure in rows:
        print(f"{store:<11} {what:<{width}}  {figure}")


if __name__ == "__main__":
    main()
