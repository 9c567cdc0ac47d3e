"""What revision 0007 (named queues) costs on a large table, on PostgreSQL.

    python -m bench.migrate_queues [--pg URL] [--jobs 1000000] [--pending 100000]

Builds a database at revision 0006 holding ``--jobs`` jobs (cold rows), ``--pending`` of them
still PENDING (hot rows), written with ``generate_series``; then times ``flask ratchet db
upgrade`` to 0007 (adding the ``queue`` column to both tables, the per-queue claim index, the
``ratchet_queue`` table) and reports whether ``ratchet_job`` was rewritten (its file node
changes when PostgreSQL rewrites a table). Prints one table. Nothing here is asserted.
"""

from __future__ import annotations

import argparse
import time

import sqlalchemy as sa

from bench.enqueue_claim import DEFAULT_PG, fresh_database
from flask_ratchet import migrate

_FILL_JOBS = """
INSERT INTO ratchet_job (job_id, task, job_type, priority, payload, max_retries, backoff,
    backoff_base, created_at, first_due_at, attempts, terminal_status, finished_at)
SELECT gen_random_uuid(), 'bench:noop', 'SINGLE', 2, '{"args":[],"kwargs":{}}', 3,
    'EXPONENTIAL', 10, now(), now(), 0,
    CASE WHEN i > :pending THEN 'SUCCEEDED' END, CASE WHEN i > :pending THEN now() END
FROM generate_series(1, :jobs) AS i
"""
_FILL_HOT = """
INSERT INTO ratchet_job_queue (job_id, status, scheduled_time, priority, attempts,
    max_retries, version, updated_at)
SELECT job_id, 'PENDING', first_due_at, 2, 0, 3, 0, now()
FROM ratchet_job WHERE terminal_status IS NULL
"""
_FILENODE = "SELECT pg_relation_filenode('ratchet_job')"


def run(args: argparse.Namespace) -> list[tuple[str, str]]:
    url = fresh_database(args.pg, "ratchet_bench_migrate")
    engine = sa.create_engine(url)
    migrate.downgrade(engine, "0006")
    with engine.begin() as conn:
        conn.execute(sa.text(_FILL_JOBS), {"jobs": args.jobs, "pending": args.pending})
        conn.execute(sa.text(_FILL_HOT))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("VACUUM ANALYZE")
        before = conn.exec_driver_sql(_FILENODE).scalar()
    start = time.perf_counter()
    migrate.upgrade(engine, "0007")
    took = time.perf_counter() - start
    with engine.connect() as conn:
        after = conn.exec_driver_sql(_FILENODE).scalar()
        default = conn.exec_driver_sql(
            "SELECT count(*) FROM ratchet_job WHERE queue = 'default'"
        ).scalar()
    engine.dispose()
    return [
        ("jobs (cold rows) / pending (hot rows)", f"{args.jobs:,} / {args.pending:,}"),
        ("upgrade 0006 → 0007, one transaction", f"{took:.2f} s"),
        ("ratchet_job rewritten", "yes" if before != after else "no (catalogue change only)"),
        ("jobs reading queue 'default' after it", f"{default:,}"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg", default=DEFAULT_PG)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--pending", type=int, default=100_000)
    args = parser.parse_args()
    print("| measurement | figure |\n|---|---:|")
    for what, figure in run(args):
        print(f"| {what} | {figure} |")


if __name__ == "__main__":
    main()
