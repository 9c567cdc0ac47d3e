"""How long each console page takes with a million jobs in PostgreSQL.

    python -m bench.console_pages [--pg URL] [--jobs 1000000] [--queues 3] [--runs 7] [--keep]

Builds a database ``ratchet_console_bench`` on the server of ``--pg`` (default
``$RATCHET_TEST_DATABASE_URL``): ``--jobs`` jobs over the last week (70 % SUCCEEDED, 10 % FAILED,
5 % CANCELED, 1 % PAUSED, 0.1 % RUNNING on four nodes, the rest PENDING), 20 tasks, three
queues (a tenth in ``mail``, a fiftieth in ``reports``, the rest ``default``; with ``--queues
N`` over 3, a quarter of all jobs spread over N - 3 more), tags on a
tenth of them, a business key on each, 60,000 executions in the last hour and a dead-letter alert
per failed job of the last day; and flows: 2,000 batches over the week (1,999 of 5 children,
ended, and the newest of 10,000 children, running, with two follow-ups waiting), a chain of 20
steps with three branches half way, and a job whose two branches failed routing; and resources
and breakers: a resource on one job in twenty (five resources, four with a limit, permits up to
each limit among the RUNNING jobs), and on each node 32 circuit breakers, some OPEN or HALF_OPEN,
with a reset asked for one service; then ``ANALYZE``. Each page is requested ``--runs`` times
through ``app.test_client()`` (the whole Flask request: auth, queries, template) after one
warm-up, and the median and the slowest are printed. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import time

import sqlalchemy as sa
from flask import Flask
from flask_sqlalchemy import SQLAlchemy

from bench.enqueue_claim import DEFAULT_PG, fresh_database
from flask_ratchet import Ratchet

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
            WHEN g % 1000 = 999 THEN 'RUNNING' ELSE 'PENDING' END AS status,
       CASE WHEN :queues > 3 AND g % 4 = 1 THEN 'q' || lpad((g % (:queues - 3))::text, 5, '0')
            WHEN g % 10 = 3 THEN 'mail' WHEN g % 50 = 7 THEN 'reports' ELSE 'default'
       END AS queue
FROM (SELECT g, now() - (:n - g) * (interval '7 days' / :n) AS t
      FROM generate_series(1, :n) AS g) AS s;

INSERT INTO ratchet_job (job_id, task, queue, job_type, priority, payload, params, max_retries,
  backoff, backoff_base, resource_name, business_key, created_at, first_due_at, terminal_status,
  terminal_error, fingerprint, attempts, finished_at)
SELECT job_id, 'app.tasks:task_' || (g % 20), queue, 'SINGLE', g % 5,
       '{"args": [' || g || ', "user-' || g || '@example.com"], "kwargs": {}}', NULL, 3,
       'EXPONENTIAL', 10,
       CASE WHEN g % 20 = 19 THEN (ARRAY['payment-api', 'geo-api', 'licence-server', 'mailer',
         'unlimited-export'])[(g / 1000) % 5 + 1] END,
       'order-' || g, created_at, created_at,
       CASE WHEN status IN ('SUCCEEDED', 'FAILED', 'CANCELED') THEN status END,
       CASE WHEN status = 'FAILED' THEN 'ConnectionError: upstream ' || (g % 7) || ' refused' END,
       CASE WHEN status = 'FAILED' THEN 'ConnectionError: upstream {n} refused' END,
       CASE WHEN status IN ('SUCCEEDED', 'FAILED') THEN 1 ELSE 0 END,
       CASE WHEN status IN ('SUCCEEDED', 'FAILED', 'CANCELED') THEN created_at END
FROM gen;

INSERT INTO ratchet_job_queue (job_id, status, queue, scheduled_time, priority, attempts,
  max_retries, picked_by, picked_at, paused_from_status, version, updated_at)
SELECT job_id, status, queue, created_at, g % 5, CASE WHEN status = 'RUNNING' THEN 1 ELSE 0 END, 3,
       CASE WHEN status = 'RUNNING' THEN 'node-' || (g % 4) END,
       CASE WHEN status = 'RUNNING' THEN now() END,
       CASE WHEN status = 'PAUSED' THEN 'PENDING' END, 0, now()
FROM gen WHERE status IN ('PENDING', 'RUNNING', 'PAUSED');

INSERT INTO ratchet_business_key (business_key, job_id, reserved_at)
SELECT 'order-' || g, job_id, now() FROM gen WHERE status IN ('PENDING', 'RUNNING', 'PAUSED');

INSERT INTO ratchet_job_tag (job_id, tag)
SELECT job_id, 'tenant-' || (g % 50) FROM gen WHERE g % 10 = 0;

INSERT INTO ratchet_execution (execution_id, job_id, attempt, node_id, status, started_at,
  finished_at, duration_ms, queue_wait_ms, error, queue)
SELECT gen_random_uuid(), job_id, 1, 'node-' || (g % 4),
       CASE WHEN g % 20 = 0 THEN 'FAILED' ELSE 'SUCCEEDED' END,
       now() - (g % 3600) * interval '1 second', now() - (g % 3600) * interval '1 second',
       12.5, (g % 1000)::float, CASE WHEN g % 20 = 0 THEN 'boom' END, queue
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


#: Batches, a chain with branches and a routing error (the console's batch and flow pages).
FLOWS = """
CREATE FUNCTION pg_temp.uuid7(t timestamptz) RETURNS uuid LANGUAGE sql VOLATILE AS $f$
SELECT encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid()) PLACING
  substring(int8send((extract(epoch FROM t) * 1000)::bigint) FROM 3) FROM 1 FOR 6),
  52, 1), 53, 1), 'hex')::uuid
$f$;

CREATE TEMP TABLE bgen AS
SELECT b, pg_temp.uuid7(t) AS batch_id, t AS created_at, b = :batches AS big
FROM (SELECT b, CASE WHEN b = :batches THEN now() - interval '1 hour'
                     ELSE now() - (:batches - b) * (interval '7 days' / :batches) END AS t
      FROM generate_series(1, :batches) AS b) AS s;

INSERT INTO ratchet_job (job_id, task, job_type, priority, payload, max_retries, backoff,
  backoff_base, created_at, first_due_at, terminal_status, terminal_error, fingerprint, result,
  attempts, finished_at, follow_up)
SELECT batch_id, 'flask_ratchet:batch', 'BATCH', 2, '{"args": [], "kwargs": {}}', 0,
       'EXPONENTIAL', 10, created_at,
       CASE WHEN big THEN '9999-12-31T00:00:00+00'::timestamptz ELSE created_at END,
       CASE WHEN big THEN NULL WHEN b % 10 = 0 THEN 'FAILED' ELSE 'SUCCEEDED' END,
       CASE WHEN NOT big AND b % 10 = 0 THEN '1 of 5 children failed' END,
       CASE WHEN NOT big AND b % 10 = 0 THEN '{n} of {n} children failed' END,
       CASE WHEN NOT big THEN '{"total": 5}' END, 0,
       CASE WHEN NOT big THEN created_at + interval '1 minute' END, true
FROM bgen;

INSERT INTO ratchet_job_queue (job_id, status, scheduled_time, priority, attempts, max_retries,
  version, updated_at)
SELECT batch_id, 'PENDING', '9999-12-31T00:00:00+00', 2, 0, 0, 0, now() FROM bgen WHERE big;

INSERT INTO ratchet_batch (batch_id, name, total, succeeded, failed, child_run_ms, child_wait_ms,
  created_at, finished_at)
SELECT batch_id, 'import-' || b, CASE WHEN big THEN 10000 ELSE 5 END,
       CASE WHEN big THEN 6000 WHEN b % 10 = 0 THEN 4 ELSE 5 END,
       CASE WHEN big THEN 500 WHEN b % 10 = 0 THEN 1 ELSE 0 END,
       CASE WHEN big THEN 6500 ELSE 5 END * 12.5, CASE WHEN big THEN 6500 ELSE 5 END * 40.0,
       created_at, CASE WHEN NOT big THEN created_at + interval '1 minute' END
FROM bgen;

CREATE TEMP TABLE cgen AS
SELECT g.batch_id, c, pg_temp.uuid7(g.created_at + c * interval '10 milliseconds') AS job_id,
       g.created_at + c * interval '10 milliseconds' AS created_at,
       CASE WHEN NOT g.big THEN (CASE WHEN g.b % 10 = 0 AND c = 5 THEN 'FAILED'
                                      ELSE 'SUCCEEDED' END)
            WHEN c <= 6500 THEN (CASE WHEN c % 13 = 0 THEN 'FAILED' ELSE 'SUCCEEDED' END)
            WHEN c <= 6600 THEN 'RUNNING' ELSE 'PENDING' END AS status
FROM bgen AS g, generate_series(1, CASE WHEN g.big THEN 10000 ELSE 5 END) AS c;

INSERT INTO ratchet_job (job_id, task, job_type, priority, payload, max_retries, backoff,
  backoff_base, created_at, first_due_at, terminal_status, terminal_error, fingerprint, attempts,
  finished_at, batch_id, follow_up)
SELECT job_id, 'app.tasks:import_row', 'BATCH_CHILD', 2,
       '{"args": [' || c || '], "kwargs": {}}', 3, 'EXPONENTIAL', 10, created_at, created_at,
       CASE WHEN status IN ('SUCCEEDED', 'FAILED') THEN status END,
       CASE WHEN status = 'FAILED' THEN 'ValueError: row ' || c || ' is malformed' END,
       CASE WHEN status = 'FAILED' THEN 'ValueError: row {n} is malformed' END,
       CASE WHEN status IN ('SUCCEEDED', 'FAILED') THEN 1 ELSE 0 END,
       CASE WHEN status IN ('SUCCEEDED', 'FAILED') THEN created_at + interval '1 second' END,
       batch_id, true
FROM cgen;

INSERT INTO ratchet_job_queue (job_id, status, scheduled_time, priority, attempts, max_retries,
  picked_by, picked_at, version, updated_at)
SELECT job_id, status, created_at, 2, CASE WHEN status = 'RUNNING' THEN 1 ELSE 0 END, 3,
       CASE WHEN status = 'RUNNING' THEN 'node-' || (c % 4) END,
       CASE WHEN status = 'RUNNING' THEN now() END, 0, now()
FROM cgen WHERE status IN ('PENDING', 'RUNNING');

CREATE TEMP TABLE fspec (s int, parent int, kind text, threshold float, status text,
  decision text, task text);

INSERT INTO fspec VALUES
  (1, NULL, NULL, NULL, 'SUCCEEDED', NULL, 'app.flows:fetch'),
  (21, 5, 'ON_SUCCESS', NULL, 'SUCCEEDED', 'TRIGGERED', 'app.flows:notify'),
  (22, 5, 'ON_FAILURE', NULL, 'CANCELED', 'SKIPPED', 'app.flows:refund'),
  (23, 5, 'WHEN', NULL, 'CANCELED', 'SKIPPED', 'app.flows:notify_sales'),
  (24, NULL, NULL, NULL, 'SUCCEEDED', NULL, 'app.flows:charge'),
  (25, 24, 'ON_SUCCESS', NULL, 'CANCELED', 'ERROR', 'app.flows:ship'),
  (26, 24, 'WHEN', NULL, 'CANCELED', 'ERROR', 'app.flows:notify_sales');

INSERT INTO fspec
SELECT s, s - 1, 'THEN', NULL,
       CASE WHEN s <= 10 THEN 'SUCCEEDED' WHEN s = 11 THEN 'RUNNING' ELSE 'PENDING' END,
       CASE WHEN s <= 11 THEN 'TRIGGERED' END, 'app.flows:step_' || s
FROM generate_series(2, 20) AS s;

CREATE TEMP TABLE fgen AS
SELECT f.*, pg_temp.uuid7(now() - interval '30 minutes' + f.s * interval '1 millisecond') AS job_id
FROM fspec AS f
UNION ALL
SELECT k + 100, NULL, CASE k WHEN 1 THEN 'BATCH_SUCCESS' ELSE 'SUCCESS_RATE' END,
       CASE k WHEN 2 THEN 0.95 END, 'PENDING', NULL, 'app.flows:report',
       pg_temp.uuid7(now() - interval '1 hour' + k * interval '1 millisecond')
FROM generate_series(1, 2) AS k;

ALTER TABLE fgen ADD COLUMN parent_id uuid;

UPDATE fgen SET parent_id = p.job_id FROM fgen AS p WHERE p.s = fgen.parent;

UPDATE fgen SET parent_id = (SELECT batch_id FROM bgen WHERE big) WHERE s > 100;

INSERT INTO ratchet_job (job_id, task, job_type, priority, payload, max_retries, backoff,
  backoff_base, created_at, first_due_at, terminal_status, terminal_error, attempts, finished_at,
  depends_on, follow_up)
SELECT job_id, task, CASE WHEN parent_id IS NULL THEN 'SINGLE' ELSE 'STEP' END, 2,
       '{"args": [' || s || '], "kwargs": {}}', 3, 'EXPONENTIAL', 10,
       now() - interval '30 minutes',
       CASE WHEN status = 'PENDING' THEN '9999-12-31T00:00:00+00'::timestamptz
            ELSE now() - interval '30 minutes' END,
       CASE WHEN status IN ('SUCCEEDED', 'CANCELED') THEN status END,
       CASE WHEN decision = 'ERROR' THEN 'predicate app.flows:is_big raised KeyError: ''n''; '
            || 'routing failed and every branch of this job was canceled' END,
       CASE WHEN status = 'SUCCEEDED' THEN 1 ELSE 0 END,
       CASE WHEN status IN ('SUCCEEDED', 'CANCELED') THEN now() - interval '20 minutes' END,
       parent_id, true
FROM fgen;

INSERT INTO ratchet_job_queue (job_id, status, scheduled_time, priority, attempts, max_retries,
  picked_by, picked_at, version, updated_at)
SELECT job_id, status,
       CASE WHEN status = 'PENDING' THEN '9999-12-31T00:00:00+00'::timestamptz ELSE now() END,
       2, CASE WHEN status = 'RUNNING' THEN 1 ELSE 0 END, 3,
       CASE WHEN status = 'RUNNING' THEN 'node-1' END,
       CASE WHEN status = 'RUNNING' THEN now() END, 0, now()
FROM fgen WHERE status IN ('PENDING', 'RUNNING');

INSERT INTO ratchet_workflow_condition (job_id, parent_id, kind, predicate, threshold, decision,
  error, decided_at)
SELECT job_id, parent_id, kind, CASE WHEN kind = 'WHEN' THEN 'app.flows:is_big' END, threshold,
       decision,
       CASE WHEN decision = 'ERROR' THEN 'predicate app.flows:is_big raised KeyError: ''n''; '
            || 'routing failed and every branch of this job was canceled' END,
       CASE WHEN decision IS NOT NULL THEN now() - interval '20 minutes' END
FROM fgen WHERE parent_id IS NOT NULL;
"""
BATCHES = 2_000

#: Resource limits, permits of the RUNNING jobs up to each limit, breakers in every node's info
#: (the services' states differ per node), and a reset asked for one of them.
RESOURCES = """
INSERT INTO ratchet_resource_limit (resource_name, max_concurrent, retry_delay, updated_at)
VALUES ('payment-api', 8, 2, now()), ('geo-api', 4, 5, now()), ('licence-server', 2, 30, now()),
       ('mailer', 50, 1, now());

INSERT INTO ratchet_resource_permit (job_id, resource_name, node_id, acquired_at)
SELECT job_id, resource_name, picked_by, now()
FROM (SELECT q.job_id, j.resource_name, q.picked_by, l.max_concurrent,
             row_number() OVER (PARTITION BY j.resource_name ORDER BY q.job_id) AS k
      FROM ratchet_job_queue AS q
      JOIN ratchet_job AS j ON j.job_id = q.job_id
      JOIN ratchet_resource_limit AS l ON l.resource_name = j.resource_name
      WHERE q.status = 'RUNNING') AS r
WHERE k <= max_concurrent;

UPDATE ratchet_node SET info = (
  SELECT json_build_object('breakers', json_object_agg(s.name, json_build_object(
    'state', CASE WHEN s.name = 'stripe' AND ratchet_node.node_id <> 'node-3' THEN 'OPEN'
                  WHEN s.name = 'geo' AND ratchet_node.node_id = 'node-2' THEN 'HALF_OPEN'
                  ELSE 'CLOSED' END,
    'calls', CASE WHEN s.name IN ('stripe', 'geo') THEN 0 ELSE 20 END,
    'failures', CASE WHEN s.name IN ('stripe', 'geo') THEN 0 ELSE s.i % 5 END,
    'failure_rate', CASE WHEN s.name IN ('stripe', 'geo') THEN 0 ELSE (s.i % 5) / 20.0 END,
    'open_for_left', CASE WHEN s.name = 'stripe' THEN 42.5 ELSE 0 END,
    'trials_running', CASE WHEN s.name = 'geo' AND ratchet_node.node_id = 'node-2' THEN 1
                           ELSE 0 END,
    'trials_succeeded', 0,
    'times_opened', CASE WHEN s.name IN ('stripe', 'geo') THEN 3 ELSE 0 END)))::text
  FROM (SELECT i, 'service-' || i AS name FROM generate_series(1, 30) AS i
        UNION ALL SELECT 31, 'stripe' UNION ALL SELECT 32, 'geo') AS s);

INSERT INTO ratchet_audit (audit_id, at, actor, role, action, scope, target, requested, changed)
VALUES (gen_random_uuid(), now(), 'bench', 'admin', 'reset-breaker', 'breaker', 'geo', 4, 4);
"""


def build(url: str, n: int, queues: int = 3) -> None:
    """Fill the (migrated) database at ``url`` with ``n`` jobs, batches, flows and resources;
    with ``queues`` over 3, a quarter of the jobs spread over ``queues - 3`` more queues."""
    engine = sa.create_engine(url)
    started = time.perf_counter()
    with engine.begin() as conn:
        for statement in FILL.split(";\n"):
            if statement.strip():
                conn.execute(sa.text(statement), {"n": n, "queues": queues})
        for statement in FLOWS.split(";\n\n"):
            if statement.strip():
                conn.execute(sa.text(statement), {"batches": BATCHES})
        for statement in RESOURCES.split(";\n\n"):
            if statement.strip():
                conn.execute(sa.text(statement))
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
        flows = _flow_pages(conn)
    engine.dispose()
    return [
        ("overview", "/ratchet/"),
        ("overview, last 15 minutes", "/ratchet/?window=15m"),
        ("overview, last 24 hours", "/ratchet/?window=24h"),
        ("alarms (every page's header)", "/ratchet/alarms"),
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
        (
            "dead letters, retry a group (confirmation)",
            "/ratchet/jobs/bulk?action=retry&status=FAILED&task=app.tasks:task_3"
            "&fingerprint=ConnectionError:+upstream+{n}+refused",
        ),
        ("nodes", "/ratchet/nodes"),
        ("queues", "/ratchet/queues"),
        ("cluster metrics (Prometheus)", "/ratchet/metrics"),
        ("jobs, queue", "/ratchet/jobs?queue=reports"),
        ("jobs, queue default (primary key)", "/ratchet/jobs?queue=default"),
        ("jobs, FAILED, queue", "/ratchet/jobs?status=FAILED&queue=mail"),
        ("bulk confirmation count", "/ratchet/jobs/bulk?action=retry&status=FAILED"),
        (
            "bulk confirmation, retry on a task",
            "/ratchet/jobs/bulk?action=retry&task=app.tasks:task_3",
        ),
        ("bulk confirmation, cancel PENDING", "/ratchet/jobs/bulk?action=cancel&status=PENDING"),
        *flows,
        ("resources", "/ratchet/resources"),
        ("resource limit page", "/ratchet/resources/limit?name=payment-api"),
        ("breakers", "/ratchet/breakers"),
        ("breaker reset confirmation", "/ratchet/breakers/reset?service=stripe"),
    ]


def _flow_pages(conn: sa.Connection) -> list[tuple[str, str]]:
    """The batch and flow pages to time (none in a database kept from before flows)."""

    def one(sql: str) -> object:
        return conn.exec_driver_sql(sql).scalar()

    big = one(
        "SELECT batch_id FROM ratchet_batch WHERE finished_at IS NULL "
        "ORDER BY batch_id DESC LIMIT 1"
    )
    if big is None:
        return []
    mid_batch = one("SELECT batch_id FROM ratchet_batch ORDER BY batch_id LIMIT 1 OFFSET 1000")
    child = one(
        f"SELECT job_id FROM ratchet_job WHERE batch_id = '{big}' ORDER BY job_id "
        "LIMIT 1 OFFSET 5000"
    )
    step = one("SELECT job_id FROM ratchet_job WHERE task = 'app.flows:step_15'")
    error = one(
        "SELECT job_id FROM ratchet_workflow_condition WHERE decision = 'ERROR' "
        "ORDER BY job_id LIMIT 1"
    )
    return [
        ("batches", "/ratchet/batches"),
        ("batches, 200 a page", "/ratchet/batches?size=200"),
        ("batches, page after a cursor", f"/ratchet/batches?cursor=b.{mid_batch}"),
        ("batches, running", "/ratchet/batches?state=running"),
        ("batches, finished", "/ratchet/batches?state=finished"),
        ("batch of 10,000 children", f"/ratchet/batches/{big}"),
        ("batch, 200 children a page", f"/ratchet/batches/{big}?size=200"),
        ("batch, children after a cursor", f"/ratchet/batches/{big}?cursor=c.{child}"),
        ("batch, FAILED children", f"/ratchet/batches/{big}?status=FAILED"),
        ("batch, RUNNING children", f"/ratchet/batches/{big}?status=RUNNING"),
        ("batch, CANCELED children (none)", f"/ratchet/batches/{big}?status=CANCELED"),
        ("job detail, batch parent", f"/ratchet/jobs/{big}"),
        ("job detail, batch child", f"/ratchet/jobs/{child}"),
        ("job detail, chain step 15 of 20", f"/ratchet/jobs/{step}"),
        ("job detail, branch with routing error", f"/ratchet/jobs/{error}"),
    ]


def measure(url: str, runs: int) -> None:
    app = Flask(__name__)
    app.config["SQLALCHEMY_DATABASE_URI"] = url
    app.config["RATCHET_CONSOLE_AUTH"] = lambda request: "admin"
    # The seeded nodes beat once, when the data was built: with this interval they stay live
    # (three intervals) while the breakers page is timed, however long the build took.
    app.config["RATCHET_HEARTBEAT_INTERVAL"] = 3600
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
    parser.add_argument("--pg", default=DEFAULT_PG)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--queues", type=int, default=3, help="queues the jobs are spread over")
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    parser.add_argument("--reuse", action="store_true", help="time a database kept earlier")
    args = parser.parse_args()
    server = sa.make_url(args.pg)
    url = server.set(database=DATABASE).render_as_string(hide_password=False)
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    if not args.reuse:
        build(fresh_database(args.pg, DATABASE), args.jobs, args.queues)
    try:
        measure(url, args.runs)
    finally:
        if not args.keep:
            with admin.connect() as conn:
                conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        admin.dispose()


if __name__ == "__main__":
    main()
