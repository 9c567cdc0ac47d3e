"""Scaling out: 1, 2, 4 and 8 worker processes on one PostgreSQL.

    python -m bench.scale [--pg URL] [--workers 1,2,4,8] [--noop 100000] [--slow 20000]
                          [--slow-ms 5] [--concurrency 10]

For each number of workers and each load (``--noop`` no-op jobs, then ``--slow`` jobs that wait
``--slow-ms`` each), in a database of its own: the jobs are enqueued in bulk, then the workers
(``flask ratchet worker --concurrency 10 --metrics-port …``) start together and drain them.
Reported per run: throughput (jobs over the span from the first job's start to the last job's
end: the workers' start-up left out), the claims' p50 and p99 (from every worker's
``ratchet_worker_claim_seconds`` histogram: the bucket a percentile falls in, as an upper
bound), how often a session of the
database waited for a lock (sampled every 50 ms from ``pg_locks``), and the CPU seconds the
PostgreSQL server processes and the workers spent, per 1,000 jobs: the per-job database cost
a reader sizes a cluster by. On this 2-core machine workers and database share the cores.
Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from bench.enqueue_claim import DEFAULT_PG, bulk, db, fresh_database, make_app, sleep_ms
from bench.pgbouncer import free_port

ROOT = Path(__file__).resolve().parents[1]
CLK = os.sysconf("SC_CLK_TCK")


@dataclass
class Run:
    workers: int
    load: str
    jobs: int
    seconds: float
    claim_p50: float
    claim_p99: float
    lock_waits: int
    samples: int
    db_cpu: float
    worker_cpu: float

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds


def cpu_seconds(pids: list[int]) -> float:
    """User and system CPU seconds the processes ``pids`` spent so far (those still there)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / CLK


def postgres_pids() -> list[int]:
    """The PostgreSQL server's processes on this machine."""
    out = subprocess.run(["pgrep", "-f", "postgres"], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def children_cpu(pid: int) -> float:
    """CPU seconds a worker process spent, its ended children included."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / CLK


def claim_percentiles(ports: list[int]) -> tuple[float, float]:
    """The p50 and p99 of every worker's claims, as the upper bounds of their buckets."""
    buckets: dict[float, float] = {}
    for port in ports:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
        for family in text_string_to_metric_families(text.decode()):
            for s in family.samples:
                if s.name == "ratchet_worker_claim_seconds_bucket":
                    le = float(s.labels["le"])
                    buckets[le] = buckets.get(le, 0.0) + s.value
    total = buckets.get(float("inf"), 0.0)

    def upper(p: float) -> float:
        for le in sorted(buckets):
            if total and buckets[le] >= p * total:
                return le
        return float("nan")

    return upper(0.5), upper(0.99)


def run(pg: str, workers: int, load: str, jobs: int, ms: float, concurrency: int) -> Run:
    url = fresh_database(pg, f"ratchet_scale_{load}_{workers}")
    app = make_app(url)
    with app.app_context():
        if load == "noop":
            bulk(jobs)
        else:
            _bulk_sleep(jobs, ms)
        db.engine.dispose()
    engine = sa.create_engine(url)
    ports = [free_port() for _ in range(workers)]
    env = os.environ | {"BENCH_URL": url, "PYTHONPATH": str(ROOT)}
    waits = samples = 0
    stop = threading.Event()

    def sample_locks() -> None:
        nonlocal waits, samples
        watcher = sa.create_engine(url, pool_size=1)
        with watcher.connect() as conn:
            while not stop.wait(0.05):
                n = conn.exec_driver_sql(
                    "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                    "WHERE NOT l.granted AND a.datname = current_database()"
                ).scalar_one()
                waits += int(n)
                samples += 1
        watcher.dispose()

    db_pids = postgres_pids()
    db_before = cpu_seconds(db_pids)
    started = time.perf_counter()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "flask",
                "--app",
                "bench.worker:bench_app()",
                "ratchet",
                "worker",
                "--concurrency",
                str(concurrency),
                "--metrics-port",
                str(port),
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for port in ports
    ]
    sampler = threading.Thread(target=sample_locks, daemon=True)
    sampler.start()
    try:
        with engine.connect() as conn:
            while conn.exec_driver_sql("SELECT EXISTS (SELECT 1 FROM ratchet_job_queue)").scalar():
                time.sleep(0.05)
                conn.rollback()
            ended = conn.exec_driver_sql("SELECT max(finished_at) FROM ratchet_job").scalar()
            first = conn.exec_driver_sql("SELECT min(started_at) FROM ratchet_execution").scalar()
        seconds = time.perf_counter() - started
        if ended is not None and first is not None:  # the workers' start-up left out
            seconds = (ended - first).total_seconds() or seconds
        p50, p99 = claim_percentiles(ports)
        db_cpu = cpu_seconds(postgres_pids()) - db_before
        worker_cpu = sum(children_cpu(p.pid) for p in procs)
    finally:
        stop.set()
        sampler.join(5)
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(30)
        engine.dispose()
    return Run(workers, load, jobs, seconds, p50, p99, waits, samples, db_cpu, worker_cpu)


def _bulk_sleep(jobs: int, ms: float) -> None:
    from bench.enqueue_claim import ratchet

    for start in range(0, jobs, 5000):
        ratchet.enqueue_many(
            ratchet.enqueue(sleep_ms, ms) for _ in range(min(jobs, start + 5000) - start)
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg", default=DEFAULT_PG)
    parser.add_argument("--workers", default="1,2,4,8")
    parser.add_argument("--noop", type=int, default=100_000)
    parser.add_argument("--slow", type=int, default=20_000)
    parser.add_argument("--slow-ms", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=10)
    args = parser.parse_args()
    counts = [int(n) for n in args.workers.split(",")]
    loads = [("noop", args.noop), (f"sleep {args.slow_ms:g} ms", args.slow)]
    print(
        f"{'load':<14} {'workers':>7} {'jobs/s':>8} {'claim p50':>10} {'claim p99':>10} "
        f"{'lock waits':>11} {'db cpu/1k':>10} {'workers cpu/1k':>15}"
    )
    for label, jobs in loads:
        if not jobs:
            continue
        for n in counts:
            load = "noop" if label == "noop" else "slow"
            r = run(args.pg, n, load, jobs, args.slow_ms, args.concurrency)
            waits = f"{r.lock_waits / max(r.samples, 1):.2f}/sample"
            print(
                f"{label:<14} {n:>7} {r.rate:>8,.0f} {r.claim_p50 * 1000:>8.1f}ms "
                f"{r.claim_p99 * 1000:>8.1f}ms {waits:>11} {r.db_cpu / r.jobs * 1000:>9.2f}s "
                f"{r.worker_cpu / r.jobs * 1000:>14.2f}s",
                flush=True,
            )


if __name__ == "__main__":
    main()
