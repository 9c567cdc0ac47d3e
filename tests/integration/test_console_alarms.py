"""The console's alarms and its overview chart, on SQLite and PostgreSQL: each alarm's read,
the strip on every page's header and its own refresh URL, what a refused request reads, and
the chart's windows."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask

from flask_ratchet import Priority
from flask_ratchet.console.reads import alarms as alarm_reads
from flask_ratchet.console.reads import overview as reports
from flask_ratchet.console.reads.jobs import Count
from flask_ratchet.schema import job, node, queue_state
from flask_ratchet.states import JobStatus
from flask_ratchet.store.types import NodeInfo
from tests.apps import add, create_app, db, ratchet
from tests.integration.helpers import add_execution, job_in
from tests.integration.test_console import ADMIN, Console

#: What the console's live_after makes of the default heartbeat interval (10 s).
LIVE_AFTER = 30.0
DUE_AFTER = 300.0
DEAD_LETTER_WINDOW = 900.0


def read_alarms(due_after: float = DUE_AFTER) -> alarm_reads.Alarms:
    with ratchet.transaction() as conn:
        now = ratchet.runtime.store.now(conn)
        return alarm_reads.alarms(conn, now, LIVE_AFTER, due_after, DEAD_LETTER_WINDOW)


def db_now() -> datetime:
    with ratchet.transaction() as conn:
        return ratchet.runtime.store.now(conn)


def heartbeat(node_id: str, age: float = 0.0) -> None:
    """Record ``node_id`` alive as a worker does, then make its heartbeat ``age`` seconds old."""
    with ratchet.transaction() as conn:
        beat = ratchet.runtime.store.cluster.heartbeat(conn, NodeInfo(node_id, "h", 1, "t", 4))
        if age:
            conn.execute(
                sa.update(node)
                .where(node.c.node_id == node_id)
                .values(last_heartbeat=beat - timedelta(seconds=age))
            )


def late_job(minutes: float, queue: str | None = None) -> uuid.UUID:
    """A PENDING job that has been due for ``minutes``."""
    builder = ratchet.schedule_at(db_now() - timedelta(minutes=minutes), add, 1, 2)
    if queue is not None:
        builder.with_queue(queue)
    return builder.submit().id


def alarm_items(page: str) -> dict[str, str]:
    """The alarms in a page's strip, by ``data-alarm``, as text."""
    strip = re.search(r'<section id="alarms".*?</section>', page, re.S)
    assert strip is not None, "no alarm strip"
    return {
        kind: " ".join(re.sub(r"<[^>]+>", " ", body).split())
        for kind, body in re.findall(r'<li class="alarm" data-alarm="([^"]+)">(.*?)</li>', strip[0])
    }


# -- the reads ---------------------------------------------------------------------------------


def test_nothing_wrong_raises_nothing(app: Flask) -> None:
    ratchet.schedule_at(db_now() + timedelta(hours=1), add, 1, 2).submit()  # not due yet
    found = read_alarms()
    assert not found.raised
    assert (found.no_live_worker, found.overdue, found.paused) == (False, None, [])
    assert found.dead_letters == Count(0)


def test_a_due_job_with_no_live_node_raises_the_worker_alarm(app: Flask) -> None:
    late_job(0.5)
    assert read_alarms().no_live_worker
    heartbeat("silent", age=LIVE_AFTER + 60)  # a node that stopped beating is no worker
    assert read_alarms().no_live_worker
    heartbeat("alive")
    found = read_alarms()
    assert not found.no_live_worker and not found.raised  # due for 30 s: not overdue either


def test_no_worker_with_nothing_due_raises_nothing(app: Flask) -> None:
    job_in(JobStatus.SUCCEEDED)
    ratchet.schedule_at(db_now() + timedelta(minutes=5), add, 1, 2).submit()
    assert not read_alarms().no_live_worker


def test_the_oldest_due_job_past_the_threshold_is_named_with_its_queue(app: Flask) -> None:
    heartbeat("alive")
    late_job(2)
    oldest = late_job(10, queue="mail")
    ratchet.enqueue(add, 3, 4).with_priority(Priority.HIGH).submit()  # due now, on another level
    found = read_alarms()
    assert found.overdue is not None and found.overdue.job_id == oldest
    assert found.overdue.queue == "mail"
    assert 590 <= found.overdue.waited <= 660
    assert found.due_after == DUE_AFTER
    assert read_alarms(due_after=3600).overdue is None
    assert not found.no_live_worker


def test_paused_queues_are_named_and_bounded(app: Flask) -> None:
    ratchet.pause_queue("mail")
    ratchet.pause_queue("reports")
    ratchet.pause_queue("idle")
    assert ratchet.resume_queue("idle")  # resumed: its row stays, not paused
    found = read_alarms()
    assert (found.paused, found.more_paused) == (["mail", "reports"], False)
    for i in range(alarm_reads.MAX_PAUSED):
        ratchet.pause_queue(f"q{i:02d}")
    many = read_alarms()
    assert len(many.paused) == alarm_reads.MAX_PAUSED and many.more_paused
    assert many.paused == sorted(many.paused) and many.paused[0] == "mail"


def test_dead_letters_count_recent_failures_for_good_only(
    app: Flask, monkeypatch: pytest.MonkeyPatch
) -> None:
    recent = [job_in(JobStatus.FAILED) for _ in range(2)]
    old = job_in(JobStatus.FAILED)
    retried = job_in(JobStatus.FAILED)
    job_in(JobStatus.SUCCEEDED)
    with ratchet.transaction() as conn:
        conn.execute(
            sa.update(job)
            .where(job.c.job_id == old)
            .values(finished_at=ratchet.runtime.store.now(conn) - timedelta(minutes=20))
        )
    assert ratchet.retry_job(retried)  # live again: no longer a dead letter
    found = read_alarms()
    assert found.dead_letters == Count(len(recent)) and found.dead_letter_window == 900
    monkeypatch.setattr(alarm_reads, "DEAD_LETTER_CAP", 1)
    assert read_alarms().dead_letters == Count(1, exact=False)


@contextmanager
def statements(app: Flask) -> Iterator[list[tuple[str, Any]]]:
    """Every SQL statement the app's engine runs inside the block, with its parameters."""
    seen: list[tuple[str, Any]] = []

    def record(_c: Any, _cursor: Any, statement: str, params: Any, *_: Any) -> None:
        seen.append((statement, params))

    with app.app_context():
        engine = db.engine
    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_each_alarm_read_walks_an_index_on_postgres(app: Flask) -> None:
    job_in(JobStatus.FAILED)
    late_job(10)
    ratchet.pause_queue("mail")
    # 20,000 jobs that failed for good two days ago: the recent ones are a small range of
    # (terminal_status, finished_at), and an index on terminal_status alone would walk them all.
    with db.engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO ratchet_job (job_id, task, job_type, priority, payload, max_retries, "
            "backoff, backoff_base, created_at, first_due_at, terminal_status, attempts, "
            "finished_at) SELECT gen_random_uuid(), 'tests.apps:add', 'SINGLE', 2, "
            "'{\"args\": [], \"kwargs\": {}}', 0, 'EXPONENTIAL', 10, now() - interval '3 days', "
            "now() - interval '3 days', 'FAILED', 1, now() - interval '2 days' "
            "FROM generate_series(1, 20000)"
        )
    with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("ANALYZE ratchet_job")
        # The tables the other reads walk, rewritten and measured: the run's earlier tests
        # leave pages and statistics behind (the suite's server never vacuums), and a plan
        # costed on them is that history's, not this data's.
        conn.exec_driver_sql("VACUUM FULL ANALYZE ratchet_job_queue, ratchet_node, ratchet_queue")
    with statements(app) as seen:
        read_alarms()
    plans = {}
    with db.engine.connect() as conn:
        # The node and queue tables hold a row or two: with sequential scans off, the plan
        # shows whether an index serves the read at all.
        conn.exec_driver_sql("SET enable_seqscan = off")
        for sql, params in seen:
            if "ratchet_" in sql and sql.lstrip().upper().startswith("SELECT"):
                plan = "\n".join(r[0] for r in conn.exec_driver_sql("EXPLAIN " + sql, params))
                plans[sql] = plan
    joined = "\n".join(plans.values())
    assert len(plans) == 8  # five priority levels, a node, paused queues, dead letters
    assert "Seq Scan" not in joined, joined
    # Recent dead letters: a range of (terminal_status, finished_at), not every FAILED job.
    (dead,) = [p for p in plans.values() if "terminal_status" in p]
    assert re.search(r"Index Cond: \(.*terminal_status.*finished_at", dead), dead
    assert "ix_ratchet_job_queue_claim" in joined  # the oldest due job, per priority
    assert "ix_ratchet_node_last_heartbeat" in joined  # a live node
    assert "pk_ratchet_queue" in joined  # paused queues, by name
    assert "pk_ratchet_job_queue" in dead  # then the hot row's key, per recent dead letter


# -- the pages ---------------------------------------------------------------------------------

PAGES = (
    "/ratchet/",
    "/ratchet/jobs",
    "/ratchet/queues",
    "/ratchet/dead-letters",
    "/ratchet/nodes",
    "/ratchet/recurring",
    "/ratchet/batches",
    "/ratchet/resources",
    "/ratchet/breakers",
    "/ratchet/jobs/bulk?action=retry&status=FAILED",
)


def test_every_page_shows_the_alarms_in_its_header(app: Flask) -> None:
    failed = job_in(JobStatus.FAILED)
    late_job(10, queue="mail")
    ratchet.pause_queue("mail")
    console = Console(app.test_client(), role="read")
    for url in (*PAGES, f"/ratchet/jobs/{failed}"):
        page = console.get(url)
        assert page.status_code == 200, url
        found = alarm_items(page.text)
        assert set(found) == {"no-live-worker", "overdue", "paused", "dead-letters"}, url
        assert page.text.index('id="alarms"') < page.text.index("<main"), url
    assert "no node has sent a heartbeat in the last 30 s" in found["no-live-worker"]
    assert re.search(
        r"queue mail \) has waited 10 m \d\d s, longer than 5 m 00 s", found["overdue"]
    )
    assert found["paused"] == "Queue paused : mail ; no worker takes its jobs. Queues"
    assert found["dead-letters"] == (
        "Dead letters growing : 1 job failed for good in the last 15 m 00 s. Dead letters"
    )
    page = console.get("/ratchet/queues").text
    assert 'href="/ratchet/jobs?status=PENDING&amp;queue=mail&amp;sort=oldest"' in page
    assert 'href="/ratchet/dead-letters">Dead letters</a></li>' in page
    assert 'href="/ratchet/nodes">Nodes</a></li>' in page


def test_the_strip_is_empty_when_nothing_is_wrong(app: Flask) -> None:
    heartbeat("alive")
    ratchet.enqueue(add, 1, 2).submit()
    page = Console(app.test_client()).get("/ratchet/jobs").text
    assert alarm_items(page) == {}
    assert '<section id="alarms" class="alarms" aria-label="Alarms"' in page


def test_the_strip_refreshes_from_its_own_url(app: Flask) -> None:
    console = Console(app.test_client())
    page = console.get("/ratchet/nodes").text
    assert 'hx-get="/ratchet/alarms" hx-select="#alarms" hx-swap="outerHTML"' in page
    assert 'hx-trigger="every 5s, ratchet-changed from:body"' in page
    ratchet.pause_queue("reports")
    strip = console.get("/ratchet/alarms")
    assert strip.status_code == 200 and "<html" not in strip.text and "<main" not in strip.text
    assert set(alarm_items(strip.text)) == {"paused"}
    assert app.test_client().get("/ratchet/alarms").status_code == 403  # behind the wall too


def test_the_due_threshold_is_the_apps_setting(database_url: str) -> None:
    app = create_app(database_url, RATCHET_ALARM_DUE_AFTER=timedelta(hours=1))
    with app.app_context():
        app.extensions["ratchet"].ensure_schema()
        late_job(10)
        assert app.extensions["ratchet"].config.alarm_due_after == 3600.0
    page = Console(app.test_client()).get("/ratchet/jobs").text
    assert set(alarm_items(page)) == {"no-live-worker"}  # due 10 minutes: under an hour
    with app.app_context():
        late_job(61)
    page = Console(app.test_client()).get("/ratchet/jobs").text
    assert "longer than 1 h 00 m" in alarm_items(page)["overdue"]
    with app.app_context():
        db.engine.dispose()


def test_the_dead_letter_window_is_the_apps_setting(database_url: str) -> None:
    app = create_app(database_url, RATCHET_ALARM_DEAD_LETTER_WINDOW=timedelta(hours=1))
    with app.app_context():
        app.extensions["ratchet"].ensure_schema()
        heartbeat("alive")
        failed = job_in(JobStatus.FAILED)
        with ratchet.transaction() as conn:
            conn.execute(
                sa.update(job)
                .where(job.c.job_id == failed)
                .values(finished_at=ratchet.runtime.store.now(conn) - timedelta(minutes=20))
            )
    page = Console(app.test_client()).get("/ratchet/jobs").text
    found = alarm_items(page)
    assert set(found) == {"dead-letters"}  # 20 minutes ago: within the hour, past 15 minutes
    assert "1 job failed for good in the last 1 h 00 m" in found["dead-letters"]
    with app.app_context():
        db.engine.dispose()


def test_fragments_and_refused_requests_read_no_alarms(app: Flask) -> None:
    ratchet.pause_queue("mail")
    failed = job_in(JobStatus.FAILED)
    client = app.test_client()
    console = Console(client)
    with statements(app) as seen:
        assert console.get("/ratchet/jobs").status_code == 200
    assert any("ratchet_queue" in sql for sql, _ in seen)  # a page does read them
    refused = {
        "page": {"X-Role": "nobody"},
        "htmx": {"X-Role": "nobody", "HX-Request": "true"},  # answered with the notice template
    }
    for what, headers in refused.items():
        with statements(app) as seen:
            assert client.get("/ratchet/queues", headers=headers).status_code == 403, what
        assert [sql for sql, _ in seen if "ratchet_" in sql] == [], what
    with statements(app) as seen:
        banner = console.get(f"/ratchet/jobs/new-count?newest={failed}")  # the list's banner
        assert banner.status_code == 200 and "<html" not in banner.text
        with app.app_context():
            missing = client.get("/ratchet/jobs/not-a-job", headers=ADMIN | {"HX-Request": "true"})
        assert missing.status_code == 404 and 'class="notice warn"' in missing.text
        acted = console.post(f"/ratchet/jobs/{failed}/retry", htmx=True)
        assert acted.status_code == 200 and "retried" in acted.text and "<html" not in acted.text
    assert not any("ratchet_queue" in sql or "ratchet_node" in sql for sql, _ in seen)


def alarm_read(sql: str) -> bool:
    """Whether ``sql`` is one of the reads only the alarms make (paused queues, dead letters).
    The overview's sub-state counts name the paused queues too, inside a count of hot rows."""
    paused = "ratchet_queue.paused" in sql and "ratchet_job_queue" not in sql
    return paused or "ratchet_job.finished_at >=" in sql


def test_a_live_regions_refresh_reads_no_alarms(app: Flask) -> None:
    ratchet.pause_queue("mail")
    console = Console(app.test_client())
    refresh = {"HX-Request": "true", "HX-Target": "overview-live"}  # as htmx sends it
    with statements(app) as seen:
        live = console.get("/ratchet/", headers=refresh)
    assert live.status_code == 200 and 'id="overview-live"' in live.text
    assert alarm_items(live.text) == {}
    assert not any(alarm_read(sql) for sql, _ in seen)
    # A page drawn whole, by a click or htmx's boosted navigation (no target), has them.
    for headers in ({}, {"HX-Request": "true", "HX-Boosted": "true"}):
        with statements(app) as seen:
            page = console.get("/ratchet/", headers=headers)
        assert set(alarm_items(page.text)) == {"paused"}
        assert sum(alarm_read(sql) for sql, _ in seen) == 2
    strip = console.get("/ratchet/alarms", headers={"HX-Request": "true", "HX-Target": "alarms"})
    assert set(alarm_items(strip.text)) == {"paused"}


def test_hostile_paused_queue_names_are_escaped(app: Flask) -> None:
    hostile = '<img src=x onerror="alert(1)">'
    with db.engine.begin() as conn:
        conn.execute(sa.insert(queue_state).values(name=hostile, paused=True, changed_at=db_now()))
    page = Console(app.test_client()).get("/ratchet/jobs").text
    assert hostile not in page and "<img" not in page
    assert "&lt;img src=x onerror=&#34;alert(1)&#34;&gt;" in alarm_items(page)["paused"]


def test_the_schema_page_draws_no_alarms(empty_engine: sa.Engine) -> None:
    app = create_app(
        empty_engine.url.render_as_string(hide_password=False), RATCHET_AUTO_CREATE=False
    )
    client = app.test_client()
    page = client.get("/ratchet/queues", headers=ADMIN)
    assert page.status_code == 503 and "flask ratchet db upgrade" in page.text
    assert 'id="alarms"' not in page.text
    strip = client.get("/ratchet/alarms", headers=ADMIN | {"HX-Request": "true"})
    assert strip.status_code == 503 and "flask ratchet db upgrade" in strip.text


# -- the chart ---------------------------------------------------------------------------------


def test_throughput_fills_each_windows_bars(app: Flask) -> None:
    owner = job_in(JobStatus.FAILED)
    with ratchet.transaction() as conn:
        now = ratchet.runtime.store.now(conn)
        for ago, status in (
            (timedelta(0), "SUCCEEDED"),
            (timedelta(minutes=12), "FAILED"),
            (timedelta(minutes=40), "SUCCEEDED"),
            (timedelta(minutes=41), "SUCCEEDED"),
            (timedelta(hours=23), "FAILED"),
            (timedelta(hours=25), "SUCCEEDED"),  # outside every window
        ):
            add_execution(conn, owner, now - ago, status)
        bars = {
            key: reports.throughput(conn, now, window) for key, window in reports.WINDOWS.items()
        }
    assert [len(b) for b in bars.values()] == [15, 60, 48]
    assert {b.minutes for b in bars["24h"]} == {30}
    assert all(b.start.minute in (0, 30) and b.start.second == 0 for b in bars["24h"])
    for key, expected in (("15m", (1, 1)), ("1h", (3, 1)), ("24h", (3, 2))):
        got = bars[key]
        assert (sum(b.succeeded for b in got), sum(b.failed for b in got)) == expected, key
        assert got[-1].start <= now < got[-1].start + timedelta(minutes=got[-1].minutes), key
    forty = now - timedelta(minutes=40)
    (holding,) = [b for b in bars["24h"] if b.start <= forty < b.start + timedelta(minutes=30)]
    assert holding.succeeded >= 1


def test_the_overview_draws_the_chosen_window(app: Flask) -> None:
    console = Console(app.test_client())
    default = console.get("/ratchet/").text
    assert default.count('<g class="bar">') == 60
    assert 'hx-get="/ratchet/" hx-select="#overview-live"' in default
    assert 'hx-trigger="every 5s, ratchet-changed from:body"' in default
    assert 'data-window="1h" aria-current="true">1 hour</a>' in default
    assert "Executions, last hour" in default
    assert "Executions, not jobs" in default and "succeeded attempts" in default
    assert '<text x="32" y="149.0" text-anchor="end">0</text>' in default  # the y axis's 0
    assert default.count('<line class="grid"') == 1  # and its 1, with nothing to show
    day = console.get("/ratchet/?window=24h").text
    assert day.count('<g class="bar">') == 48
    assert 'hx-get="/ratchet/?window=24h"' in day and "every 30s" in day
    assert 'data-window="24h" aria-current="true">24 hours</a>' in day
    assert "Executions, last 24 hours" in day and "per 30 minutes" in day
    quarter = console.get("/ratchet/?window=15m").text
    assert quarter.count('<g class="bar">') == 15 and "every 5s" in quarter
    assert console.get("/ratchet/?window=1h").text.count('hx-get="/ratchet/"') == 1
    bad = console.get("/ratchet/?window=7d")
    assert bad.status_code == 400 and "window must be one of 15m, 1h, 24h" in bad.text


def test_the_overview_chart_scales_to_a_round_axis(app: Flask) -> None:
    owner = job_in(JobStatus.FAILED)
    with ratchet.transaction() as conn:
        now = ratchet.runtime.store.now(conn)
        for i in range(7):
            add_execution(conn, owner, now, "FAILED" if i == 0 else "SUCCEEDED")
    page = Console(app.test_client()).get("/ratchet/?window=15m").text
    labels = re.findall(r'<text x="32" y="[0-9.]+" text-anchor="end">([^<]+)</text>', page)
    assert labels == ["0", "2", "4", "6", "8"]
    assert "6 succeeded · 1 failed · peak 7 per minute" in page
    assert page.count('<line class="grid"') == 4
    assert ": 6 succeeded, 1 failed</title>" in page
