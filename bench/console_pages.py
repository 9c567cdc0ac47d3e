"""How long each console page takes with a million jobs in PostgreSQL.

    python -m bench.console_pages [--pg URL] [--jobs 1000000] [--runs 7] [--keep]

Builds a database ``ratchet_console_bench`` on the server of ``--pg`` (default
``$RATCHET_TEST_DATABASE_URL``): ``--jobs`` jobs over the last week (70 % SUCCEEDED, 10 % FAILED,
5 % CANCELED, 1 % PAUSED, 0.1 % RUNNING on four nodes, the rest PENDING), 20 tasks, tags on a
tenth of them, a business key on each, 60,000 executions in the last hour and a dead-letter alert
per failed job of the last day; then ``ANALYZE``. Each page is requested ``--runs`` times through
``app.test_client()`` (the whole Flask request: auth, queries, template) after one warm-up, and
the median and the slowest are printed. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import sqlalchemy as sa
from flask import Flask
from flask_sqlalchemy import SQLAlchemy

from flask_ratchet import Ratchet, migrate

DATABASE = "ratchet_console_bench"

FILL = """
CREATE TEMP TABLE gen AS
SELECT g,
       encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid()) PLACING
         substring(int8send((extract(epoch FROM t) * 1000)::bigint) FROM 3) FROM 1 FOR 6),
         52, 1), 53, 1), 'hex')::uuid AS job_id,
       t AS created_at,
       CASE WHEN g % 100 < 70 THEN 'SUCCEEDED' WHEN g % 100 < 80 THEN 'FAILED'
            WHEN g % 100 < 85 THEN 'CANCELED' WHEN g % 100 = 85 THEN 'PAUSED'
            WHEN g % 1000 = 999 THEN 'RUNNING' ELSE 'PENDING' END AS status
FROM (SELECT g, now() - (:n - g) * (interval '7 days' / :n) AS t
      FROM generate_series(1, :n) AS g) AS s;

INSERT INTO ratchet_job (job_id, task, job_type, priority, payload, params, max_retries, backoff,
  backoff_base, business_key, created_at, first_due_at, terminal_status, terminal_error,
  attempts, finished_at)
SELECT job_id, 'app.tasks:task_' || (g % 20), 'SINGLE', g % 5,
       '{"args": [' || g || ', "user-' || g || '@example.com"], "kwargs": {}}', NULL, 3,
       'EXPONENTIAL', 10, 'order-' || g, created_at, created_at,
       CASE WHEN status IN ('SUCCEEDED', 'FAILED', 'CANCELED') THEN status END,
       CASE WHEN status = 'FAILED' THEN 'ConnectionError: upstream ' || (g % 7) || ' refused' END,
       CASE WHEN status IN ('SUCCEEDED', 'FAILED') THEN 1 ELSE 0 END,
       CASE WHEN status IN ('SUCCEEDED', 'FAILED', 'CANCELED') THEN created_at END
FROM gen;

INSERT INTO ratchet_job_queue (job_id, status, scheduled_time, priority, attempts, max_retries,
  picked_by, picked_at, paused_from_status, version, updated_at)
SELECT job_id, status, created_at, g % 5, CASE WHEN status = 'RUNNING' THEN 1 ELSE 0 END, 3,
       CASE WHEN status = 'RUNNING' THEN 'node-' || (g % 4) END,
       CASE WHEN status = 'RUNNING' THEN now() END,
       CASE WHEN status = 'PAUSED' THEN 'PENDING' END, 0, now()
FROM gen WHERE status IN ('PENDING', 'RUNNING', 'PAUSED');

INSERT INTO ratchet_business_key (business_key, job_id, reserved_at)
SELECT 'order-' || g, job_id, now() FROM gen WHERE status IN ('PENDING', 'RUNNING', 'PAUSED');

INSERT INTO ratchet_job_tag (job_id, tag)
SELECT job_id, 'tenant-' || (g % 50) FROM gen WHERE g % 10 = 0;

INSERT INTO ratchet_execution (execution_id, job_id, attempt, node_id, status, started_at,
  finished_at, duration_ms, queue_wait_ms, error)
SELECT gen_random_uuid(), job_id, 1, 'node-' || (g % 4),
       CASE WHEN g % 20 = 0 THEN 'FAILED' ELSE 'SUCCEEDED' END,
       now() - (g % 3600) * interval '1 second', now() - (g % 3600) * interval '1 second',
       12.5, (g % 1000)::float, CASE WHEN g % 20 = 0 THEN 'boom' END
FROM gen WHERE g > :n - 60000;

INSERT INTO ratchet_dlq_alert (alert_id, job_id, task, error_hash, error, hour, occurrences,
  created_at, last_seen_at)
SELECT gen_random_uuid(), job_id, 'app.tasks:task_' || (g % 20), md5((g % 20) || '/' || (g % 7)),
       'ConnectionError: upstream ' || (g % 7) || ' refused', date_trunc('hour', created_at), 1,
       created_at, created_at
FROM gen WHERE status = 'FAILED' AND created_at > now() - interval '1 day';

INSERT INTO ratchet_node (node_id, host, pid, version, concurrency, started_at, last_heartbeat)
SELECT 'node-' || i, 'host-' || i, 1000 + i, '0.1.0', 10, now(), now()
FROM generate_series(0, 3) AS i;
"""


def build(url: str, n: int) -> None:
    engine = sa.create_engine(url)
    migrate.upgrade(engine)
    started = time.perf_counter()
    with engine.begin() as conn:
        for statement in FILL.split(";\n"):
            if statement.strip():
                conn.execute(sa.text(statement), {"n": n})
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("VACUUM ANALYZE")
    engine.dispose()
    print(f"built {n:,} jobs in {time.perf_counter() - started:.0f} s")


def pages(url: str) -> list[tuple[str, str]]:
    """The URLs to time, found in the data just built."""
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        newest = conn.exec_driver_sql(
            "SELECT job_id FROM ratchet_job ORDER BY job_id DESC LIMIT 1"
        ).scalar_one()
        failed = conn.exec_driver_sql(
            "SELECT job_id FROM ratchet_job WHERE terminal_status = 'FAILED' "
            "ORDER BY job_id DESC LIMIT 1"
        ).scalar_one()
        old = conn.exec_driver_sql(
            "SELECT job_id FROM ratchet_job ORDER BY job_id LIMIT 1 "
            "OFFSET (SELECT count(*) / 2 FROM ratchet_job)"
        ).scalar_one()
    engine.dispose()
    return [
        ("overview", "/ratchet/"),
        ("jobs", "/ratchet/jobs"),
        ("jobs, page after a cursor", f"/ratchet/jobs?cursor=n.{old}"),
        ("jobs, 200 a page", "/ratchet/jobs?size=200"),
        ("jobs, PENDING", "/ratchet/jobs?status=PENDING"),
        ("jobs, PAUSED", "/ratchet/jobs?status=PAUSED"),
        ("jobs, RUNNING", "/ratchet/jobs?status=RUNNING"),
        ("jobs, FAILED", "/ratchet/jobs?status=FAILED"),
        ("jobs, CANCELED + task", "/ratchet/jobs?status=CANCELED&task=app.tasks:task_3"),
        ("jobs, task", "/ratchet/jobs?task=app.tasks:task_7"),
        ("jobs, tag", "/ratchet/jobs?tag=tenant-10"),
        ("jobs, business key", "/ratchet/jobs?business_key=order-123456"),
        ("jobs, priority, sorted by priority", "/ratchet/jobs?priority=LOW&sort=priority"),
        ("jobs, priority NORMAL (primary key)", "/ratchet/jobs?priority=NORMAL"),
        ("jobs, priority HIGH", "/ratchet/jobs?priority=HIGH"),
        ("jobs, sorted by priority", "/ratchet/jobs?sort=priority"),
        ("jobs, oldest first", "/ratchet/jobs?sort=oldest"),
        ("jobs, PENDING, oldest first", "/ratchet/jobs?status=PENDING&sort=oldest"),
        ("jobs, node", "/ratchet/jobs?node=node-1"),
        (
            "jobs, created range",
            "/ratchet/jobs?created_after=2000-01-01T00:00&created_before=2100-01-01T00:00",
        ),
        ("jobs, search by id", f"/ratchet/jobs?q={old}"),
        ("jobs, search argument text", "/ratchet/jobs?q=user-999999@"),
        ("jobs, new-job banner", f"/ratchet/jobs/new-count?newest={old}"),
        ("job detail", f"/ratchet/jobs/{failed}"),
        ("job detail (newest)", f"/ratchet/jobs/{newest}"),
        ("dead letters", "/ratchet/dead-letters"),
        ("nodes", "/ratchet/nodes"),
        ("bulk confirmation count", "/ratchet/jobs/bulk?action=retry&status=FAILED"),
        (
            "bulk confirmation, retry on a task",
            "/ratchet/jobs/bulk?action=retry&task=app.tasks:task_3",
        ),
        ("bulk confirmation, cancel PENDING", "/ratchet/jobs/bulk?action=cancel&status=PENDING"),
    ]


def measure(url: str, runs: int) -> None:
    app = Flask(__name__)
    app.config["SQLALCHEMY_DATABASE_URI"] = url
    app.config["RATCHET_CONSOLE_AUTH"] = lambda request: "admin"
    SQLAlchemy(app)
    Ratchet(app)
    client = app.test_client()
    print(f"{'page':<38} {'median ms':>10} {'max ms':>8}")
    for name, path in pages(url):
        client.get(path)  # warm-up: plan caches, pages in memory
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            response = client.get(path)
            times.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200, (path, response.status_code)
        print(f"{name:<38} {statistics.median(times):>10.1f} {max(times):>8.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--pg",
        default=os.environ.get(
            "RATCHET_TEST_DATABASE_URL", "postgresql+psycopg://root@127.0.0.1:5432/test"
        ),
    )
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    parser.add_argument("--reuse", action="store_true", help="time a database kept earlier")
    args = parser.parse_args()
    server = sa.make_url(args.pg)
    url = server.set(database=DATABASE).render_as_string(hide_password=False)
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    if not args.reuse:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
            conn.exec_driver_sql(f"CREATE DATABASE {DATABASE}")
        build(url, args.jobs)
    try:
        measure(url, args.runs)
    finally:
        if not args.keep:
            with admin.connect() as conn:
                conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        admin.dispose()


if __name__ == "__main__":
    main()
