"""Whether long jobs are hoarded: two ``flask ratchet worker`` processes, long jobs, and which
worker ran each and when it started.

    python -m bench.prefetch [--pg URL] [--jobs 20] [--seconds 2] [--concurrency 10]

For each store (SQLite, PostgreSQL) and each prefetch setting (the adaptive default,
``--prefetch 0``, and ``--prefetch 10``, which holds jobs as the worker did before prefetch was
bounded), starts two workers, waits until both have reported in, enqueues ``--jobs`` jobs of
``--seconds`` each in one transaction, and waits for them all. Prints, per run, how many jobs
each worker ran, when each worker started its first and its last job (seconds after the
enqueue), and the wall time. Nothing here is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from flask import Flask
from flask_sqlalchemy import SQLAlchemy

from bench.enqueue_claim import DEFAULT_PG, fresh_database
from flask_ratchet import JobStatus, Ratchet

ROOT = Path(__file__).resolve().parents[1]
db = SQLAlchemy()
ratchet = Ratchet()


@ratchet.task
def hold(seconds: float) -> dict[str, float]:
    """Runs ``seconds``; returns which process ran it and when it started."""
    started = time.time()
    time.sleep(seconds)
    return {"pid": os.getpid(), "started": started}


def create_app(url: str | None = None) -> Flask:
    app = Flask(__name__)
    app.config["SQLALCHEMY_DATABASE_URI"] = url or os.environ["BENCH_URL"]
    if app.config["SQLALCHEMY_DATABASE_URI"].startswith("sqlite"):
        app.config["SQLALCHEMY_ENGINE_OPTIONS"] = {"connect_args": {"timeout": 30}}
    app.config.update(json.loads(os.environ.get("BENCH_CONFIG", "{}")))
    db.init_app(app)
    ratchet.init_app(app)
    return app


def one_run(url: str, args: argparse.Namespace, prefetch: list[str]) -> dict[str, Any]:
    app = create_app(url)
    env = os.environ | {
        "BENCH_URL": url,
        "BENCH_CONFIG": json.dumps(
            {"RATCHET_HEARTBEAT_INTERVAL": 0.5, "RATCHET_POLL_INTERVAL": 0.5}
        ),
        "PYTHONPATH": str(ROOT),
    }
    command = [sys.executable, "-m", "flask", "--app", "bench.prefetch:create_app()", "ratchet"]
    worker = [*command, "worker", "--concurrency", str(args.concurrency), *prefetch]
    procs = [
        subprocess.Popen(worker, cwd=ROOT, env=env, stderr=subprocess.DEVNULL) for _ in range(2)
    ]
    try:
        with app.app_context():
            ratchet.runtime.ensure_schema()
            while _nodes() < 2:
                time.sleep(0.1)
            start = time.time()
            ids = [
                h.id
                for h in ratchet.enqueue_many(
                    ratchet.enqueue(hold, args.seconds) for _ in range(args.jobs)
                )
            ]
            deadline = time.monotonic() + args.jobs * args.seconds + 60
            while not all(_ended(i) for i in ids):
                if time.monotonic() > deadline:
                    raise SystemExit("the jobs did not all succeed in time")
                time.sleep(0.1)
            wall = time.time() - start
            runs = [ratchet.get_job(i).result for i in ids]  # type: ignore[union-attr]
            db.engine.dispose()
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(30)
    by_worker = {}
    for proc in procs:
        mine = sorted(r["started"] - start for r in runs if r["pid"] == proc.pid)
        by_worker[proc.pid] = (len(mine), mine[0] if mine else None, mine[-1] if mine else None)
    return {"workers": list(by_worker.values()), "wall": wall}


def _nodes() -> int:
    with db.engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT count(*) FROM ratchet_node")).scalar_one())


def _ended(job_id: Any) -> bool:
    found = ratchet.get_job(job_id)
    if found is not None and found.status == JobStatus.FAILED:
        raise SystemExit(f"job {job_id} failed: {found.error}")
    return found is not None and found.status == JobStatus.SUCCEEDED


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg", default=DEFAULT_PG)
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--concurrency", type=int, default=10)
    args = parser.parse_args()
    settings: dict[str, list[str]] = {
        "adaptive (default)": [],
        "--prefetch 0": ["--prefetch", "0"],
        "--prefetch 10": ["--prefetch", "10"],
    }
    print(
        f"{args.jobs} jobs of {args.seconds:g} s, two workers of concurrency {args.concurrency}\n"
    )
    print("| store | prefetch | jobs per worker | first / last start per worker (s) | wall (s) |")
    print("|---|---|---|---|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for label in ("SQLite", "PostgreSQL"):
            for i, (name, flag) in enumerate(settings.items()):
                url = (
                    f"sqlite:///{Path(tmp) / f'prefetch-{i}.db'}"
                    if label == "SQLite"
                    else fresh_database(args.pg, "ratchet_bench_prefetch")
                )
                result = one_run(url, args, flag)
                counts = " / ".join(str(c) for c, _, _ in result["workers"])
                starts = " · ".join(
                    "-" if first is None else f"{first:.2f} / {last:.2f}"
                    for _, first, last in result["workers"]
                )
                print(f"| {label} | {name} | {counts} | {starts} | {result['wall']:.2f} |")


if __name__ == "__main__":
    # Run as bench.prefetch, not __main__: the workers know the task as bench.prefetch:hold.
    from bench.prefetch import main as run

    run()
