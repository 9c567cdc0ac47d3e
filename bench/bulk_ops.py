"""Bulk operations at scale: ``cancel_jobs``, ``retry_jobs`` and ``delete_jobs`` by tag.

    python -m bench.bulk_ops [--jobs 100000] [--pg URL] [--mariadb URL] [--stores sqlite,postgresql]

For each store, in a database of its own: ``--jobs`` PENDING jobs with one tag (and as many
without it, which must stay), then the seconds ``cancel_jobs(tag=…)`` takes, ``retry_jobs``
after those jobs are FAILED (set by hand, as a worker would have), and ``delete_jobs``. Prints
one table. Nothing here is asserted.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import sqlalchemy as sa

from bench.enqueue_claim import DEFAULT_MARIADB, DEFAULT_PG, fresh_database, make_app, noop, ratchet
from flask_ratchet import migrate
from flask_ratchet.schema import job, job_queue


def seed(n: int) -> None:
    """``n`` tagged and ``n`` untagged PENDING jobs."""
    for start in range(0, n, 5000):
        size = min(n, start + 5000) - start
        ratchet.enqueue_many(ratchet.enqueue(noop, i).with_tags("bulk") for i in range(size))
        ratchet.enqueue_many(ratchet.enqueue(noop, i) for i in range(size))


def fail_tagged() -> None:
    """The canceled tagged jobs FAILED instead, as after their last attempt."""
    with ratchet.runtime.engine.begin() as conn:
        conn.execute(
            sa.update(job)
            .where(job.c.terminal_status == "CANCELED")
            .values(terminal_status="FAILED")
        )


def timed(what: str, fn: object) -> tuple[str, float, int]:
    started = time.perf_counter()
    n = fn()  # type: ignore[operator]
    return what, time.perf_counter() - started, n


def measure(url: str, n: int) -> list[tuple[str, float, int]]:
    app = make_app(url)
    with app.app_context():
        seed(n)
        rows = [timed("cancel_jobs(tag=…)", lambda: ratchet.cancel_jobs(tag="bulk"))]
        fail_tagged()
        rows.append(timed("retry_jobs(tag=…)", lambda: ratchet.retry_jobs(tag="bulk")))
        ratchet.cancel_jobs(tag="bulk")
        rows.append(timed("delete_jobs(tag=…)", lambda: ratchet.delete_jobs(tag="bulk")))
        with ratchet.runtime.engine.connect() as conn:
            left = conn.execute(sa.select(sa.func.count()).select_from(job_queue)).scalar_one()
        assert left == n, f"{left} untagged jobs left of {n}"
        ratchet.runtime.engine.dispose()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--pg", default=DEFAULT_PG)
    parser.add_argument("--mariadb", default=DEFAULT_MARIADB)
    parser.add_argument("--stores", default="sqlite,postgresql,mariadb")
    args = parser.parse_args()
    name = f"ratchet_bench_bulk_{os.getpid()}"
    print(f"{'store':<11} {'operation':<22} {'jobs':>8} {'seconds':>8} {'jobs/s':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for store in args.stores.split(","):
            if store == "sqlite":
                url = f"sqlite:///{Path(tmp) / 'bulk.db'}"
                engine = sa.create_engine(url)
                migrate.upgrade(engine)
                engine.dispose()
            else:
                url = fresh_database(args.pg if store == "postgresql" else args.mariadb, name)
            for what, seconds, n in measure(url, args.jobs):
                print(f"{store:<11} {what:<22} {n:>8,} {seconds:>8.2f} {n / seconds:>9,.0f}")
            if store != "sqlite":
                drop(args.pg if store == "postgresql" else args.mariadb, name)


def drop(server: str, name: str) -> None:
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    force = " WITH (FORCE)" if admin.dialect.name == "postgresql" else ""
    with admin.connect() as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}{force}")
    admin.dispose()


if __name__ == "__main__":
    main()
