"""The console's queues: the queues page, pausing and resuming from it (audited), and the job
list's queue filter and column, on SQLite and PostgreSQL."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from flask import Flask

from flask_ratchet import JobStatus
from flask_ratchet.console.reads import queues as reads_queues
from flask_ratchet.console.reads.queue_runs import HourRuns, hour_runs
from flask_ratchet.schema import job, job_queue
from tests.apps import add, db, ratchet, send_mail
from tests.integration.helpers import add_execution, count, job_in
from tests.integration.test_console import ADMIN, ORIGIN, Console, audit_rows
from tests.integration.test_console_alarms import statements


@pytest.fixture
def console(app: Flask) -> Console:
    return Console(app.test_client())


def row_of(page: str, queue: str) -> str:
    found = re.search(rf'<tr data-queue="{re.escape(queue)}">(.*?)</tr>', page, re.S)
    assert found is not None, f"no row for queue {queue!r}"
    return found.group(1)


def cells(row: str) -> list[str]:
    return [
        " ".join(re.sub(r"<[^>]+>", " ", c).split())
        for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
    ]


def test_the_queues_page_shows_each_queues_jobs_last_hour_and_state(console: Console) -> None:
    job_in(JobStatus.FAILED)  # a dead letter in the default queue (made first: see job_in)
    old = datetime.now(UTC) - timedelta(minutes=3)
    for _ in range(2):
        ratchet.schedule_at(old, send_mail, "a@example.com").submit()
    ratchet.enqueue(add, 1, 1).with_queue("reports").submit()
    (claimed,) = ratchet.claim_due(1, "node-a", queues=["reports"])
    ratchet.pause_queue("idle")
    page = console.get("/ratchet/queues")
    assert page.status_code == 200
    assert re.findall(r'<tr data-queue="([^"]+)">', page.text) == [
        "default",
        "idle",
        "mail",
        "reports",
    ]
    mail = cells(row_of(page.text, "mail"))
    assert mail[:4] == ["mail", "active", "2", "0"]
    assert mail[4].startswith("3 m"), mail[4]  # the oldest due job waited 3 minutes
    assert cells(row_of(page.text, "reports"))[:4] == ["reports", "active", "0", "1"]
    assert cells(row_of(page.text, "default"))[6] == "1"  # the dead letter
    idle = cells(row_of(page.text, "idle"))
    # Paused through the API: by nobody named; its age by the database's clock.
    assert re.fullmatch(r"paused paused (just now|\d+ s ago)", idle[1]), idle[1]
    assert 'href="/ratchet/jobs?queue=mail&amp;status=PENDING"' in page.text
    assert claimed.queue == "reports"


def test_pausing_and_resuming_from_the_console_is_audited(console: Console) -> None:
    ratchet.enqueue(send_mail, "a@example.com").submit()
    paused = console.post("/ratchet/queues/pause", {"name": "mail"})
    assert paused.status_code == 200 and "<html" in paused.text  # without JS: a page
    assert "Queue <code><bdi>mail</bdi></code> paused" in paused.text
    assert ratchet.claim_due(10, "n") == []
    page = console.get("/ratchet/queues")
    assert 'data-action="resume"' in row_of(page.text, "mail")
    again = console.post("/ratchet/queues/pause", {"name": "mail"}, htmx=True)
    assert "<html" not in again.text and "was paused already" in again.text
    resumed = console.post("/ratchet/queues/resume", {"name": "mail"}, htmx=True)
    assert resumed.headers["HX-Trigger"] == "ratchet-changed" and "resumed" in resumed.text
    assert [c.queue for c in ratchet.claim_due(10, "n")] == ["mail"]
    rows = audit_rows()
    assert [(r.action, r.scope, r.target, r.requested, r.changed) for r in rows] == [
        ("pause-queue", "queue", "mail", 1, 1),
        ("pause-queue", "queue", "mail", 1, 0),
        ("resume-queue", "queue", "mail", 1, 1),
    ]
    assert rows[0].actor == "127.0.0.1" and rows[0].role == "admin"


@pytest.mark.parametrize("name", ["", "a b", "<script>", "x" * 65, "mail,reports"])
def test_a_bad_queue_name_is_400_and_changes_nothing(console: Console, name: str) -> None:
    refused = console.post("/ratchet/queues/pause", {"name": name})
    assert refused.status_code == 400 and "queue must be 1 to 64 letters" in refused.text
    assert "<script>" not in refused.text
    assert count("ratchet_queue") == 0 and count("ratchet_audit") == 0


def test_the_queue_actions_need_admin_the_token_and_this_origin(
    app: Flask, console: Console
) -> None:
    reader = Console(app.test_client(), role="read")
    page = reader.get("/ratchet/queues")
    assert page.status_code == 200 and "data-action" not in page.text
    assert reader.post("/ratchet/queues/pause", {"name": "mail"}).status_code == 403
    client = console.client
    with client.application.app_context():
        no_token = client.post("/ratchet/queues/pause", headers=ADMIN | ORIGIN, data={"name": "m"})
    assert no_token.status_code == 403
    assert console.post("/ratchet/queues/explode", {"name": "mail"}).status_code == 400
    assert count("ratchet_queue") == 0 and count("ratchet_audit") == 0


def test_the_job_list_filters_by_queue_and_shows_it(console: Console) -> None:
    mail = ratchet.enqueue(send_mail, "a@example.com").submit().id
    plain = ratchet.enqueue(add, 1, 1).submit().id
    page = console.get("/ratchet/jobs?queue=mail")
    assert page.status_code == 200
    assert f'href="/ratchet/jobs/{mail}"' in page.text
    assert f'href="/ratchet/jobs/{plain}"' not in page.text
    assert (
        '<td class="queue wide-only" dir="auto" title="mail">'
        '<a href="/ratchet/jobs?queue=mail"><bdi>mail</bdi></a></td>' in page.text
    )
    everything = console.get("/ratchet/jobs").text
    assert (
        f'href="/ratchet/jobs/{plain}"' in everything
        and '<a href="/ratchet/jobs?queue=default"><bdi>default</bdi></a>' in (everything)
    )
    bad = console.get("/ratchet/jobs?queue=a%20b")
    assert bad.status_code == 400 and "queue must be" in bad.text


def test_hostile_queue_names_in_rows_are_escaped_and_never_crash_a_page(
    app: Flask, console: Console
) -> None:
    job_id = ratchet.enqueue(add, 1, 1).with_queue("odd").submit().id
    hostile = '<img src=x onerror="alert(1)">'
    with db.engine.begin() as conn:
        for table in (job, job_queue):
            conn.execute(sa.update(table).where(table.c.job_id == job_id).values(queue=hostile))
    for url in ("/ratchet/queues", "/ratchet/jobs", f"/ratchet/jobs/{job_id}"):
        page = console.get(url)
        assert page.status_code == 200, url
        assert hostile not in page.text and "<img" not in page.text, url
    # The worker side: the claim hands it out like any other job of every queue.
    assert [c.job_id for c in ratchet.claim_due(10, "n")] == [job_id]


def test_the_queues_page_and_metrics_read_the_same_few_statements_for_any_number_of_queues(
    app: Flask, console: Console
) -> None:
    def statements_for(path: str) -> int:
        with statements(app) as seen:
            assert console.get(path).status_code == 200
        return len(seen)

    paused = job_in(JobStatus.FAILED)
    assert ratchet.pause_job(paused)  # a dead letter paused since: no longer counted
    ratchet.enqueue(add, 1, 1).with_queue("q-0").submit()
    few = {path: statements_for(path) for path in ("/ratchet/queues", "/ratchet/metrics")}
    ratchet.enqueue_many(ratchet.enqueue(add, i, i).with_queue(f"q-{i}") for i in range(1, 40))
    many = {path: statements_for(path) for path in few}
    assert many == few, (few, many)
    assert cells(row_of(console.get("/ratchet/queues").text, "default"))[6] == "0"


def test_the_queues_page_shows_each_queues_waits_and_run_times_of_the_last_hour(
    console: Console,
) -> None:
    reports = ratchet.enqueue(add, 1, 1).with_queue("reports").submit().id
    mail = ratchet.enqueue(send_mail, "a@example.com").submit().id
    now = datetime.now(UTC)
    started = now - timedelta(minutes=10)
    with ratchet.transaction() as conn:
        # Twenty runs, waits 10..200 ms and run times 1..20 s, written out of order.
        for i in (7, 3, 20, 1, 12, 18, 5, 9, 14, 16, 2, 11, 19, 4, 8, 13, 6, 17, 10, 15):
            add_execution(
                conn,
                reports,
                started,
                "SUCCEEDED" if i % 5 else "FAILED",
                queue="reports",
                queue_wait_ms=10.0 * i,
                duration_ms=1000.0 * i,
            )
        # A run that recorded no wait: counted for the run times only.
        add_execution(conn, reports, started, "SUCCEEDED", queue="reports", duration_ms=500_000.0)
        add_execution(
            conn, mail, started, "SUCCEEDED", queue="mail", queue_wait_ms=7.0, duration_ms=30.0
        )
        # A run written before runs held their queue: counted through its job, with no times.
        add_execution(conn, mail, started, "FAILED", queue_wait_ms=5.0, duration_ms=5.0)
        # Over an hour ago: left out.
        add_execution(
            conn,
            mail,
            now - timedelta(hours=2),
            "SUCCEEDED",
            queue="mail",
            queue_wait_ms=9_000_000.0,
            duration_ms=9_000_000.0,
        )
    with ratchet.transaction() as conn:
        times = hour_runs(conn, ["reports", "mail", "default"], now)
    # Nearest rank: of 20 waits the 10th and the 19th; of 21 run times the 11th and the 20th.
    assert times == {
        "reports": HourRuns(
            17, 4, wait_p50=100.0, wait_p95=190.0, run_p50=11_000.0, run_p95=20_000.0
        ),
        "mail": HourRuns(1, 0, wait_p50=7.0, wait_p95=7.0, run_p50=30.0, run_p95=30.0),
    }
    page = console.get("/ratchet/queues").text
    assert cells(row_of(page, "reports"))[7:9] == ["100 ms · 190 ms", "11 s · 20 s"]
    assert cells(row_of(page, "mail"))[5].startswith("1 succeeded · 1 failed")
    assert cells(row_of(page, "mail"))[7:9] == ["7.0 ms · 7.0 ms", "30 ms · 30 ms"]
    assert cells(row_of(page, "default"))[7:9] == ["no runs", "no runs"]
    # The chart: a bar per queue that ran jobs, the busiest first, failed runs on top.
    bars = re.findall(r'<g class="bar" data-queue="([^"]+)"><title>([^<]*)</title>', page)
    assert bars == [
        ("reports", "reports: 17 succeeded, 4 failed in the last hour"),
        ("mail", "mail: 1 succeeded, 1 failed in the last hour"),
    ]


def test_the_queues_page_filters_by_name_and_pages_with_the_filter_kept(
    console: Console, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("bulk_mail", "mail", "Mailroom", "reports", "bulkxmail"):
        ratchet.enqueue(add, 1, 1).with_queue(name).submit()
    ratchet.pause_queue("mail-paused")

    def listed(url: str) -> list[str]:
        page = console.get(url)
        assert page.status_code == 200, url
        return re.findall(r'<tr data-queue="([^"]+)">', page.text)

    # Whatever the case; the paused queue, known by its state alone, is filtered alike.
    assert listed("/ratchet/queues?q=MAIL") == [
        "Mailroom",
        "bulk_mail",
        "bulkxmail",
        "mail",
        "mail-paused",
    ]
    # LIKE's wildcards are plain characters here.
    assert listed("/ratchet/queues?q=k_m") == ["bulk_mail"]
    assert listed("/ratchet/queues?q=%25") == []
    none = console.get("/ratchet/queues?q=%25").text
    assert "No queue has a name holding <code><bdi>%</bdi></code>" in none
    assert listed("/ratchet/queues?q=default") == ["default"]
    monkeypatch.setattr(reads_queues, "MAX_QUEUES", 2)
    first = console.get("/ratchet/queues?q=mail").text
    assert re.findall(r'<tr data-queue="([^"]+)">', first) == ["Mailroom", "bulk_mail"]
    # The filter rides the refresh and the next page's link.
    assert 'hx-get="/ratchet/queues?q=mail"' in first
    assert 'href="/ratchet/queues?q=mail&amp;after=bulk_mail"' in first
    second = console.get("/ratchet/queues?q=mail&after=bulk_mail").text
    assert re.findall(r'<tr data-queue="([^"]+)">', second) == ["bulkxmail", "mail"]
    assert 'href="/ratchet/queues?q=mail&amp;after=mail"' in second
    assert 'href="/ratchet/queues?q=mail">« First page' in second
    assert listed("/ratchet/queues?q=mail&after=mail") == ["mail-paused"]
    too_long = console.get("/ratchet/queues?q=" + "x" * 65)
    assert too_long.status_code == 400 and "q is longer than 64 characters" in too_long.text
    bad = console.get("/ratchet/queues?after=a%20b")
    assert bad.status_code == 400 and "queue must be" in bad.text
