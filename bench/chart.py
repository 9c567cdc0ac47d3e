"""How long the console's overview chart takes to read each window, with a day of runs.

    python -m bench.chart [--store postgresql|sqlite|both] [--runs 1440000] [--repeat 7]

Fills ``ratchet_execution`` with ``--runs`` executions spread evenly over the last 24 hours
(one in fifty FAILED) in a fresh PostgreSQL database (``ratchet_chart_bench`` on the server of
``$RATCHET_TEST_DATABASE_URL``) or a SQLite file in a temporary folder, then times the chart's
read (:func:`flask_ratchet.console.reads.overview.throughput`) for each window: the median of
``--repeat`` runs after one warm-up. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import sqlalchemy as sa

from bench.enqueue_claim import DEFAULT_PG, fresh_database
from flask_ratchet import migrate
from flask_ratchet.console.reads import overview
from flask_ratchet.ids import uuid7
from flask_ratchet.schema import execution, job
from flask_ratchet.store import store_for

DATABASE = "ratchet_chart_bench"
#: Rows per INSERT while filling.
CHUNK = 20_000


def fill(engine: sa.Engine, runs: int) -> None:
    """``runs`` executions of one job over the last day, one in fifty FAILED."""
    migrate.upgrade(engine)  # a fresh PostgreSQL database is at HEAD already: a no-op there
    store = store_for(engine)
    with engine.begin() as conn:
        now = store.now(conn)
        job_id = uuid7()
        conn.execute(
            sa.insert(job).values(
                job_id=job_id,
                task="bench:run",
                job_type="SINGLE",
                priority=2,
                payload='{"args": [], "kwargs": {}}',
                max_retries=0,
                backoff="FIXED",
                backoff_base=1.0,
                created_at=now,
                first_due_at=now,
                attempts=1,
            )
        )
        gap = timedelta(days=1) / runs
        for first in range(0, runs, CHUNK):
            conn.execute(
                sa.insert(execution),
                [
                    {
                        "execution_id": uuid7(),
                        "job_id": job_id,
                        "attempt": 1,
                        "node_id": "bench",
                        "status": "FAILED" if i % 50 == 0 else "SUCCEEDED",
                        "started_at": now - gap * (i + 1),
                        "finished_at": now,
                    }
                    for i in range(first, min(first + CHUNK, runs))
                ],
            )
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("ANALYZE"))
        if engine.dialect.name == "postgresql":
            conn.execute(sa.text("VACUUM ratchet_execution"))  # as autovacuum leaves it


def read(conn: sa.Connection, now: object, window: overview.Window) -> int:
    """The chart's read; the older signature took the dialect too."""
    if "dialect" in inspect.signature(overview.throughput).parameters:
        dialect = store_for(conn.engine).dialect
        bars = overview.throughput(conn, dialect, now, window)  # type: ignore[call-arg,arg-type]
    else:
        bars = overview.throughput(conn, now, window)  # type: ignore[arg-type]
    return sum(b.succeeded + b.failed for b in bars)


def time_windows(engine: sa.Engine, repeat: int) -> None:
    store = store_for(engine)
    for key, window in overview.WINDOWS.items():
        took = []
        for _ in range(repeat + 1):
            with engine.connect() as conn:
                now = store.now(conn)
                started = time.perf_counter()
                counted = read(conn, now, window)
                took.append(time.perf_counter() - started)
        median = statistics.median(took[1:]) * 1000
        print(f"  {key:>4}: {median:7.1f} ms  ({counted:,} runs)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store", choices=["postgresql", "sqlite", "both"], default="both")
    parser.add_argument("--pg", default=DEFAULT_PG)
    parser.add_argument("--runs", type=int, default=1_440_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    stores = ["postgresql", "sqlite"] if args.store == "both" else [args.store]
    for name in stores:
        with tempfile.TemporaryDirectory() as folder:
            if name == "postgresql":
                engine = sa.create_engine(fresh_database(args.pg, DATABASE))
            else:
                engine = sa.create_engine(f"sqlite:///{Path(folder) / 'chart.db'}")
            fill(engine, args.runs)
            print(f"{name}, {args.runs:,} runs over the last day:")
            time_windows(engine, args.repeat)
            engine.dispose()


if __name__ == "__main__":
    main()
