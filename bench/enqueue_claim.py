"""Enqueue and claim cost, on PostgreSQL, MariaDB and SQLite.

    python -m bench.enqueue_claim [--pg URL] [--mariadb URL] [--deep 1000000] [--single 2000]
                                  [--bulk 20000]

Measures, each in a database of its own:
- single enqueue: one job per transaction (``enqueue_now`` outside a request), jobs/s;
- bulk enqueue: ``enqueue_many`` in transactions of 5,000 jobs, jobs/s;
- claim cost: the mean and p95 time of ``claim_due(10)`` (then released, so the backlog stays the
  same) with 10k pending jobs and again with ``--deep`` pending jobs (PostgreSQL and MariaDB);
- the same for a worker naming one queue of 10k jobs, with none and with ``--deep`` pending jobs
  (a tenth of it on SQLite) in another queue; and for a worker of every queue while that other
  queue is paused.

Prints one table. Nothing here is asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from flask import Flask
from flask_sqlalchemy import SQLAlchemy

from flask_ratchet import Ratchet, migrate
from flask_ratchet.schema import job_queue

#: The PostgreSQL server the benchmarks use unless ``--pg`` names another: the test suite's.
DEFAULT_PG = os.environ.get(
    "RATCHET_TEST_DATABASE_URL", "postgresql+psycopg://root@127.0.0.1:5432/test"
)

#: The MariaDB server, likewise.
DEFAULT_MARIADB = os.environ.get(
    "RATCHET_TEST_MARIADB_URL", "mariadb+pymysql://root@127.0.0.1:3306/test"
)

db = SQLAlchemy()
ratchet = Ratchet()


@ratchet.task
def noop(i: int) -> None:
    """The job every benchmark enqueues."""


@ratchet.task
async def async_noop(i: int) -> None:
    """The ``async def`` twin of :func:`noop` (``bench.worker --task async``)."""


@ratchet.task
def sleep_ms(ms: float) -> None:
    """A job that waits ``ms`` milliseconds, as one calling a service would (``bench.scale``)."""
    time.sleep(ms / 1000)


#: The key of the encrypted runs: a benchmark's, never a secret.
BENCH_KEY = "YmVuY2gtYmVuY2gtYmVuY2gtYmVuY2gtYmVuY2gtYmU="


def make_app(
    url: str, config: Mapping[str, Any] | None = None, extension: Ratchet | None = None
) -> Flask:
    """The benchmarks' app on ``url``; wake-ups through ``$BENCH_WAKEUP_URL`` if it is set (the
    workers a benchmark starts inherit it). ``config`` is added to the app's configuration, and
    ``extension`` (a benchmark's own tasks) takes the place of this module's ``ratchet``."""
    app = Flask(__name__)
    app.config["SQLALCHEMY_DATABASE_URI"] = url
    app.config["SQLALCHEMY_ENGINE_OPTIONS"] = {"pool_size": 5}
    app.config["RATCHET_WAKEUP_URL"] = os.environ.get("BENCH_WAKEUP_URL")
    app.config.update(config or {})
    if os.environ.get("BENCH_POOLED"):  # through PgBouncer (bench.pgbouncer)
        app.config["SQLALCHEMY_ENGINE_OPTIONS"]["connect_args"] = {"prepare_threshold": None}
        app.config["RATCHET_TRANSACTION_POOLING"] = True
        app.config["RATCHET_LISTEN_URL"] = os.environ.get("BENCH_LISTEN_URL") or None
    if os.environ.get("BENCH_ENCRYPT"):  # every job sealed (bench.compare --encryption)
        app.config["RATCHET_ENCRYPTION_KEYS"] = {"bench": BENCH_KEY}
        app.config["RATCHET_ENCRYPTION_CURRENT_KEY"] = "bench"
        app.config["RATCHET_ENCRYPT_ALL"] = True
    db.init_app(app)
    (extension or ratchet).init_app(app)
    return app


def fresh_database(server: str, name: str) -> str:
    """A new, migrated database ``name`` on the PostgreSQL or MariaDB ``server``."""
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    force = " WITH (FORCE)" if admin.dialect.name == "postgresql" else ""
    with admin.connect() as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}{force}")
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    admin.dispose()
    url = sa.make_url(server).set(database=name).render_as_string(hide_password=False)
    engine = sa.create_engine(url)
    migrate.upgrade(engine)
    engine.dispose()
    return url


def rate(n: int, fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return n / (time.perf_counter() - start)


def single(n: int) -> None:
    for i in range(n):
        ratchet.enqueue_now(noop, i)


def bulk(n: int, chunk: int = 5000, queue: str = "default", task: Any = noop) -> None:
    for start in range(0, n, chunk):
        ratchet.enqueue_many(
            ratchet.enqueue(task, i).with_queue(queue) for i in range(start, min(n, start + chunk))
        )


def claim_cost(
    rounds: int = 300, batch: int = 10, queues: list[str] | None = None
) -> tuple[float, float]:
    """Mean and p95 milliseconds of one claim; each claimed batch is put back afterwards."""
    runtime = ratchet.runtime
    times: list[float] = []
    for _ in range(rounds):
        start = time.perf_counter()
        claimed = ratchet.claim_due(batch, "bench", queues)
        times.append((time.perf_counter() - start) * 1000)
        assert len(claimed) == batch
        with runtime.engine.begin() as conn:  # back to PENDING, so the backlog does not shrink
            conn.execute(
                sa.update(job_queue)
                .where(job_queue.c.job_id.in_([c.job_id for c in claimed]))
                .values(status="PENDING", picked_by=None)
            )
    times.sort()
    return statistics.fmean(times), times[int(len(times) * 0.95)]


def analyze() -> None:
    """Fresh statistics for the hot table (PostgreSQL, MariaDB), as the server would gather."""
    engine = ratchet.runtime.engine
    if engine.dialect.name == "postgresql":
        with engine.execution_options(isolation_level="AUTOCOMMIT").connect() as conn:
            conn.exec_driver_sql("VACUUM ANALYZE ratchet_job_queue")
    elif engine.dialect.name != "sqlite":
        with engine.connect() as conn:
            conn.exec_driver_sql("ANALYZE TABLE ratchet_job_queue")


Row = tuple[str, str, str]


def run(args: argparse.Namespace) -> list[Row]:
    rows: list[tuple[str, str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        stores = (
            ("PostgreSQL", fresh_database(args.pg, "ratchet_bench")),
            ("MariaDB", fresh_database(args.mariadb, "ratchet_bench")),
            ("SQLite", f"sqlite:///{Path(tmp) / 'bench.db'}"),
        )
        for label, url in stores:
            app = make_app(url)
            with app.app_context():
                ratchet.runtime.ensure_schema()
                single(100)  # warm up connections and statement caches
                r = rate(args.single, lambda: single(args.single))
                rows.append((label, f"single enqueue ({args.single:,} jobs)", f"{r:,.0f} jobs/s"))
                r = rate(args.bulk, lambda: bulk(args.bulk))
                rows.append((label, f"bulk enqueue ({args.bulk:,} jobs)", f"{r:,.0f} jobs/s"))
                db.engine.dispose()
        # Claim cost against a backlog of each depth, in a database of its own.
        for label, server in (("PostgreSQL", args.pg), ("MariaDB", args.mariadb)):
            app = make_app(fresh_database(server, "ratchet_bench_claim"))
            with app.app_context():
                have = 0
                for depth in (10_000, args.deep):
                    bulk(depth - have, chunk=5000)
                    have = depth
                    analyze()
                    mean, p95 = claim_cost()
                    figure = f"{mean:.2f} ms (p95 {p95:.2f})"
                    rows.append((label, f"claim 10 of {depth:,} pending", figure))
                db.engine.dispose()
        rows += other_queues(
            "PostgreSQL", fresh_database(args.pg, "ratchet_bench_queues"), args.deep
        )
        rows += other_queues(
            "MariaDB", fresh_database(args.mariadb, "ratchet_bench_queues"), args.deep
        )
        rows += other_queues("SQLite", f"sqlite:///{Path(tmp) / 'queues.db'}", args.deep // 10)
        rows += refused_claim("PostgreSQL", fresh_database(args.pg, "ratchet_bench_refused"))
        rows += refused_claim("MariaDB", fresh_database(args.mariadb, "ratchet_bench_refused"))
        rows += refused_claim("SQLite", f"sqlite:///{Path(tmp) / 'refused.db'}")
    return rows


def other_queues(label: str, url: str, deep: int) -> list[tuple[str, str, str]]:
    """Claim cost of a worker naming queue ``mail`` (10k jobs) as a backlog of ``deep`` jobs
    grows in queue ``bulk``; then of a worker of every queue while both are paused."""
    rows = []
    app = make_app(url)
    with app.app_context():
        ratchet.runtime.ensure_schema()
        bulk(10_000, queue="mail")
        for other in (0, deep):
            bulk(other, queue="bulk")
            analyze()
            mean, p95 = claim_cost(queues=["mail"])
            what = f"claim 10 of queue mail (10,000), {other:,} in another queue"
            rows.append((label, what, f"{mean:.2f} ms (p95 {p95:.2f})"))
        # Older jobs than any of queue ``late``'s, all paused: a claim that read through them
        # would grow with them.
        bulk(10_000, queue="late")
        ratchet.pause_queue("mail")
        ratchet.pause_queue("bulk")
        analyze()  # else the plan depends on when autovacuum last looked (1 to 15 ms a claim)
        mean, p95 = claim_cost()
        what = f"claim 10 of every queue, {deep + 10_000:,} older ones paused"
        rows.append((label, what, f"{mean:.2f} ms (p95 {p95:.2f})"))
        db.engine.dispose()
    return rows


def refused_claim(label: str, url: str, pending: int = 10_000, rounds: int = 50) -> list[Row]:
    """Mean and p95 milliseconds of a claim that refuses the task of all ``pending`` jobs."""
    app = make_app(url)
    with app.app_context():
        runtime = ratchet.runtime
        runtime.ensure_schema()
        bulk(pending)
        analyze()
        times: list[float] = []
        for _ in range(rounds):
            start = time.perf_counter()
            with runtime.store.single_statement(runtime.engine) as conn:
                claimed = runtime.store.jobs.claim_due(conn, 10, "bench", 0, None, [noop.name])
            times.append((time.perf_counter() - start) * 1000)
            assert not claimed
        db.engine.dispose()
    times.sort()
    what = f"claim 10, the task of all {pending:,} pending refused"
    return [
        (label, what, f"{statistics.fmean(times):.2f} ms (p95 {times[int(len(times) * 0.95)]:.2f})")
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg", default=DEFAULT_PG)
    parser.add_argument("--mariadb", default=DEFAULT_MARIADB)
    parser.add_argument("--deep", type=int, default=1_000_000)
    parser.add_argument("--single", type=int, default=2000)
    parser.add_argument("--bulk", type=int, default=20_000)
    rows = run(parser.parse_args())
    width = max(len(r[1]) for r in rows)
    for store, what, figure in rows:
        print(f"{store:<11} {what:<{width}}  {figure}")


if __name__ == "__main__":
    main()
