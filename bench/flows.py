"""Batches and chains, with a real ``flask ratchet worker`` process.

    python -m bench.flows [--pg URL] [--children 20000] [--store postgresql|sqlite|both]

- submit a batch of ``--children`` no-op children with ``enqueue_batch``: children/s;
- stream 200,000 children with ``streaming_batch``: children/s and how far the submitting
  process's resident memory rose;
- drain: the same number of no-op jobs, once as plain jobs and once as one batch's children, by one
  worker with ``--burst`` at the default concurrency: jobs/s end to end (what counting children
  into their batch costs);
- a chain of 100 steps run by an idle worker: the mean hand-off from one step's end to the next
  step's start.

Prints one table. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

import sqlalchemy as sa

from bench.enqueue_claim import DEFAULT_PG, bulk, db, make_app, noop, ratchet
from bench.worker import _seconds, bench_stores, reset, worker


def rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


def submit_batch(url: str, n: int) -> float:
    reset(url)
    app = make_app(url)
    with app.app_context():
        began = time.perf_counter()
        batch = ratchet.enqueue_batch("bench")
        for i in range(n):
            batch.add(noop, i)
        batch.submit()
        took = time.perf_counter() - began
        db.engine.dispose()
    return n / took


def stream(url: str, n: int = 200_000) -> tuple[float, float]:
    reset(url)
    app = make_app(url)
    with app.app_context():
        base = peak = rss()
        done = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not done.wait(0.01):
                peak = max(peak, rss())

        sampler = threading.Thread(target=sample)
        sampler.start()
        began = time.perf_counter()
        ratchet.streaming_batch("bench").from_iterable(range(n)).process(noop).start()
        took = time.perf_counter() - began
        done.set()
        sampler.join()
        db.engine.dispose()
    return n / took, (peak - base) / 1e6


def drain(url: str, n: int, as_batch: bool) -> float:
    reset(url)
    app = make_app(url)
    with app.app_context():
        if as_batch:
            ratchet.streaming_batch("bench").from_iterable(range(n)).process(noop).start()
        else:
            bulk(n)
        db.engine.dispose()
    began = time.perf_counter()
    proc = worker(url, "--burst", "--concurrency", "10")
    assert proc.wait(timeout=1800) == 0
    return n / (time.perf_counter() - began)


def chain_handoff(url: str, steps: int = 100) -> float:
    """Mean milliseconds from one step's end to the next one's start."""
    reset(url)
    proc = worker(url, "--concurrency", "4")
    app = make_app(url)
    try:
        with app.app_context():
            time.sleep(3)  # let the worker start and go idle
            flow = ratchet.enqueue(noop, 0)
            builder = flow.then(noop, 1)
            for i in range(2, steps):
                builder = builder.then(noop, i)
            handle = builder.submit()
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                last = ratchet.get_job(handle.last)
                if last is not None and last.status == "SUCCEEDED":
                    break
                time.sleep(0.1)
            engine = sa.create_engine(url)
            with engine.connect() as conn:
                rows = conn.execute(
                    sa.text(
                        "SELECT started_at, finished_at FROM ratchet_execution ORDER BY started_at"
                    )
                ).all()
            engine.dispose()
            db.engine.dispose()
    finally:
        proc.terminate()
        proc.wait(30)
    assert len(rows) == steps, f"{len(rows)} of {steps} steps ran"
    gaps = [
        _seconds(rows[i + 1].started_at) - _seconds(rows[i].finished_at)
        for i in range(len(rows) - 1)
    ]
    return 1000 * sum(gaps) / len(gaps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg", default=DEFAULT_PG)
    parser.add_argument("--children", type=int, default=20_000)
    parser.add_argument("--store", choices=["postgresql", "sqlite", "both"], default="both")
    args = parser.parse_args()
    n = args.children
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        stores = bench_stores(args.store, args.pg, "ratchet_bench_flows", Path(tmp))
        for label, url in stores:
            rows.append(
                (
                    label,
                    f"submit a batch of {n:,} children",
                    f"{submit_batch(url, n):,.0f} children/s",
                )
            )
            rate, rise = stream(url)
            rows.append(
                (label, "stream 200,000 children", f"{rate:,.0f} children/s, RSS +{rise:.0f} MB")
            )
            plain = drain(url, n, as_batch=False)
            batched = drain(url, n, as_batch=True)
            rows.append(
                (
                    label,
                    f"drain {n:,} no-op jobs, concurrency 10",
                    f"plain {plain:,.0f} jobs/s, as one batch's children {batched:,.0f} jobs/s",
                )
            )
            rows.append(
                (
                    label,
                    "chain of 100 steps, idle worker",
                    f"{chain_handoff(url):.1f} ms per hand-off",
                )
            )
    width = max(len(r[1]) for r in rows)
    for store, what, figure in rows:
        print(f"{store:<11} {what:<{width}}  {figure}")


if __name__ == "__main__":
    main()
