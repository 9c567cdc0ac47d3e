"""The console through ``app.test_client()``, on SQLite and PostgreSQL: access, CSRF, pages,
filters, pagination, actions on one, selected and filtered jobs, the audit trail, escaping."""

from __future__ import annotations

import base64
import html
import json
import re
import uuid
from datetime import UTC, datetime, timedelta
from urllib.parse import quote
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from flask_ratchet import Priority, events
from flask_ratchet.config import ConfigError
from flask_ratchet.console import actions as actions_module
from flask_ratchet.console.reads import overview as reports
from flask_ratchet.cron import next_fire_times
from flask_ratchet.recurring import RecurringStatus
from flask_ratchet.schema import audit, job, job_queue, recurring
from flask_ratchet.states import JobStatus
from tests.apps import add, charge, create_app, db, ratchet
from tests.integration.helpers import (
    add_refusing_trigger,
    count,
    drop_refusing_trigger,
    job_in,
    refusing,
    stored_id,
)

ADMIN = {"X-Role": "admin"}
READ = {"X-Role": "read"}
ORIGIN = {"Origin": "http://localhost"}


class Console:
    """A test client that behaves like the console's own pages: it sends the CSRF token it was
    given and this site's ``Origin``."""

    def __init__(self, client: FlaskClient, role: str = "admin") -> None:
        self.client = client
        self.headers = {"X-Role": role}
        # The job list: one of the cheapest pages, with a form and the layout's htmx headers.
        page = self.get("/ratchet/jobs")
        assert page.status_code == 200
        found = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
        self.token = found.group(1) if found else ""
        hx = re.search(r'hx-headers="([^"]+)"', page.text)
        assert hx is not None
        assert self.token and self.token in hx.group(1)

    def get(self, url: str, headers: dict[str, str] | None = None) -> TestResponse:
        # Each request in an app context of its own, as in a server: the request's session
        # (and its transaction) ends with it instead of leaking into the test's context.
        with self.client.application.app_context():
            return self.client.get(url, headers=self.headers | (headers or {}))

    def post(
        self, url: str, data: dict[str, object] | None = None, *, htmx: bool = False
    ) -> TestResponse:
        headers = self.headers | ORIGIN
        with self.client.application.app_context():
            if htmx:
                headers |= {"HX-Request": "true", "X-Ratchet-CSRF": self.token}
                return self.client.post(url, headers=headers, data=data or {})
            return self.client.post(
                url, headers=headers, data={"csrf_token": self.token, **(data or {})}
            )


@pytest.fixture
def console(app: Flask) -> Console:
    return Console(app.test_client())


#: Every day at 02:00 in the master's zone: far enough ahead that nothing fires during a test.
NIGHTLY = "0 0 2 * * ?"


def master(
    recurring_id: str, *, name: str | None = None, cron: str = NIGHTLY, zone: str = "UTC"
) -> str:
    """Create an ACTIVE recurring master of ``tests.apps:add`` through the public API."""
    builder = ratchet.schedule_recurring(cron, zone, add, 1, 2).with_business_key(recurring_id)
    if name is not None:
        builder.with_name(name)
    return builder.submit().id


def audit_rows() -> list[sa.Row[tuple[object, ...]]]:
    engine = sa.create_engine(db.engine.url)
    try:
        with engine.connect() as conn:
            return list(conn.execute(sa.select(audit).order_by(audit.c.at)).all())
    finally:
        engine.dispose()


# -- access ------------------------------------------------------------------------------------


URLS = (
    "/ratchet/",
    "/ratchet/jobs",
    "/ratchet/jobs/00000000-0000-0000-0000-000000000000",
    "/ratchet/jobs/new-count?newest=00000000-0000-0000-0000-000000000000",
    "/ratchet/jobs/bulk?action=retry&status=FAILED",
    "/ratchet/dead-letters",
    "/ratchet/nodes",
    "/ratchet/audit",
    "/ratchet/metrics",
    "/ratchet/queues",
    "/ratchet/recurring",
)
POSTS = (
    "/ratchet/jobs/00000000-0000-0000-0000-000000000000/retry",
    "/ratchet/jobs/selected",
    "/ratchet/jobs/bulk",
    "/ratchet/recurring/pause",
    "/ratchet/queues/pause",
)


def test_every_url_is_403_without_auth(database_url: str) -> None:
    app = create_app(database_url, RATCHET_CONSOLE_AUTH=None)
    client = app.test_client()
    for url in URLS:
        assert client.get(url, headers=ADMIN).status_code == 403, url
    for url in POSTS:
        assert client.post(url, headers=ADMIN | ORIGIN).status_code == 403, url
    with app.app_context():
        db.engine.dispose()


def test_a_role_the_callable_does_not_grant_is_403(app: Flask) -> None:
    client = app.test_client()
    for role in ("", "root", "ADMIN"):
        assert client.get("/ratchet/", headers={"X-Role": role}).status_code == 403


def test_read_role_sees_every_page_and_can_act_on_nothing(app: Flask) -> None:
    failed = job_in(JobStatus.FAILED)
    reader = Console(app.test_client(), role="read")
    for url in (*URLS[:2], f"/ratchet/jobs/{failed}", *URLS[4:]):
        page = reader.get(url)
        assert page.status_code == 200, url
        assert 'name="action"' not in page.text and "data-action" not in page.text
    assert reader.post(f"/ratchet/jobs/{failed}/retry").status_code == 403
    assert (
        reader.post(
            "/ratchet/jobs/selected", {"action": "retry", "job_id": str(failed)}
        ).status_code
        == 403
    )
    assert (
        reader.post("/ratchet/jobs/bulk", {"action": "retry", "status": "FAILED"}).status_code
        == 403
    )
    assert ratchet.get_job(failed).status == JobStatus.FAILED  # type: ignore[union-attr]
    assert count("ratchet_audit") == 0


def test_state_changes_need_the_csrf_token_and_this_origin(app: Flask) -> None:
    failed = job_in(JobStatus.FAILED)
    console = Console(app.test_client())
    url = f"/ratchet/jobs/{failed}/retry"
    client = console.client
    refused = [
        client.post(url, headers=ADMIN | ORIGIN),  # no token
        client.post(url, headers=ADMIN | ORIGIN, data={"csrf_token": "x" * 43}),  # wrong
        client.post(url, headers=ADMIN | ORIGIN | {"X-Ratchet-CSRF": "y" * 43}),
        client.post(url, headers=ADMIN, data={"csrf_token": console.token}),  # no origin
        client.post(
            url,
            headers=ADMIN | {"Origin": "https://evil.example"},
            data={"csrf_token": console.token},
        ),
        client.post(url, headers=ADMIN | {"Origin": "null"}, data={"csrf_token": console.token}),
        client.post(
            url,
            headers=ADMIN | {"Referer": "http://evil.example/ratchet/"},
            data={"csrf_token": console.token},
        ),
    ]
    assert [r.status_code for r in refused] == [403] * len(refused)
    assert ratchet.get_job(failed).status == JobStatus.FAILED  # type: ignore[union-attr]
    # A fresh client has no cookie: the token of another session is worthless to it.
    stranger = app.test_client()
    stolen = stranger.post(url, headers=ADMIN | ORIGIN, data={"csrf_token": console.token})
    assert stolen.status_code == 403
    # The same request from the console's page goes through (Referer stands in for Origin).
    ok = client.post(
        url,
        headers=ADMIN | {"Referer": "http://localhost/ratchet/"},
        data={"csrf_token": console.token},
    )
    assert ok.status_code == 200
    assert ratchet.get_job(failed).status == JobStatus.PENDING  # type: ignore[union-attr]


WRITES = re.compile(r"^\s*(INSERT|UPDATE|DELETE|REPLACE|CREATE|DROP|ALTER|TRUNCATE)\b", re.I)


def test_gets_never_write_and_posts_only_are_actions(console: Console) -> None:
    failed = job_in(JobStatus.FAILED)
    pending = job_in(JobStatus.PENDING)
    nightly = master("nightly")
    ratchet.run_recurring_now(nightly)
    batch = ratchet.enqueue_batch("nightly-import").add(add, 1, 2).submit().id
    chain = ratchet.enqueue(add, 1, 1).then(add, 2, 2).submit()  # its root's page: a timeline
    gets = [
        "/ratchet/",
        "/ratchet/?window=24h",
        "/ratchet/alarms",
        "/ratchet/jobs",
        "/ratchet/jobs?status=FAILED&sort=oldest&size=25",
        "/ratchet/jobs?sort=priority&task=tests.apps:add&priority=NORMAL&tag=t&node=n",
        "/ratchet/jobs?q=needle&created_after=2020-01-01T00:00&created_before=2099-01-01T00:00",
        f"/ratchet/jobs?q={pending}",
        f"/ratchet/jobs/new-count?newest={failed}",
        f"/ratchet/jobs/{failed}",
        f"/ratchet/jobs/{pending}",
        *(f"/ratchet/jobs/bulk?action={a}&status=FAILED" for a in actions_module.ALLOWED_FROM),
        "/ratchet/dead-letters",
        "/ratchet/dead-letters?page=2",
        "/ratchet/jobs?status=FAILED&task=tests.apps:add&fingerprint=boom",
        "/ratchet/jobs/bulk?action=retry&status=FAILED&task=tests.apps:add&fingerprint=boom",
        "/ratchet/nodes",
        "/ratchet/audit",
        "/ratchet/audit?actor=admin&what=retry&size=25",
        "/ratchet/metrics",
        "/ratchet/queues",
        "/ratchet/jobs?queue=mail",
        "/ratchet/recurring",
        "/ratchet/recurring?canceled=1",
        f"/ratchet/recurring/cancel?id={nightly}",
        f"/ratchet/jobs?recurring={nightly}",
        "/ratchet/batches",
        "/ratchet/batches?state=running",
        f"/ratchet/batches/{batch}",
        f"/ratchet/jobs/{batch}",
        f"/ratchet/batches/{batch}/cancel",
        f"/ratchet/batches/{batch}/retry",
        "/ratchet/workflows",
        f"/ratchet/jobs/{chain.ids[0]}",
        "/ratchet/resources",
        "/ratchet/resources/limit?name=payment-api",
        "/ratchet/breakers",
        "/ratchet/breakers/reset?service=stripe",
    ]
    # Every GET route of the blueprint (but its static files) is in the list above.
    routes = {
        r.endpoint
        for r in console.client.application.url_map.iter_rules()
        if r.endpoint.startswith("ratchet_console.")
        and r.endpoint != "ratchet_console.static"
        and "GET" in (r.methods or ())
    }
    with console.client.application.test_request_context():
        covered = {
            console.client.application.url_map.bind("localhost").match(url.split("?")[0])[0]
            for url in gets
        }
    assert routes <= covered, routes - covered
    statements: list[str] = []

    def record(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        statements.append(statement)

    sa.event.listen(sa.Engine, "before_cursor_execute", record)
    try:
        for url in gets:
            assert console.get(url).status_code == 200, url
    finally:
        sa.event.remove(sa.Engine, "before_cursor_execute", record)
    assert statements, "the listener saw no SQL at all"
    writes = [s for s in statements if WRITES.match(s) or "FOR UPDATE" in s.upper()]
    assert writes == []
    assert console.get(f"/ratchet/jobs/{failed}/retry").status_code == 405
    assert console.get("/ratchet/recurring/pause").status_code == 405
    assert ratchet.get_job(failed).status == JobStatus.FAILED  # type: ignore[union-attr]
    assert ratchet.get_recurring(nightly).status == RecurringStatus.ACTIVE  # type: ignore[union-attr]
    assert ratchet.get_job(batch).status == JobStatus.PENDING  # type: ignore[union-attr]
    assert count("ratchet_audit") == 0


def test_headers_and_csrf_cookie(console: Console) -> None:
    page = console.get("/ratchet/")
    csp = page.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "style-src 'self'" in csp and "unsafe" not in csp
    assert page.headers["X-Frame-Options"] == "DENY"
    assert page.headers["Cache-Control"] == "no-store"
    fresh = console.client.application.test_client().get("/ratchet/", headers=ADMIN)
    cookie = fresh.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/ratchet" in cookie
    assert "includeIndicatorStyles" in page.text and "<style" not in page.text


# -- pages -------------------------------------------------------------------------------------


def test_overview_shows_counts_chart_and_audit(console: Console) -> None:
    failed = job_in(JobStatus.FAILED)
    job_in(JobStatus.PENDING)
    console.post(f"/ratchet/jobs/{failed}/pause")
    page = console.get("/ratchet/")
    assert page.status_code == 200
    assert "<svg" in page.text and "Executions started per minute over the last hour" in page.text
    assert re.search(r"PAUSED</span>\s*<span class=\"count\">1<", page.text)
    assert re.search(r"PENDING</span>\s*<span class=\"count\">1<", page.text)
    assert "Recent actions" in page.text and "<td>pause</td>" in page.text
    assert 'hx-trigger="every 5s' in page.text  # refreshes itself


def test_job_page_shows_executions_logs_progress_and_neighbours(console: Console) -> None:
    first = ratchet.enqueue(add, 1, 2).with_business_key("bk-1").submit().id
    second = ratchet.replace(first, 0, add, 3, 4).id
    page = console.get(f"/ratchet/jobs/{first}")
    assert page.status_code == 200
    assert f'href="/ratchet/jobs/{second}"' in page.text and "Superseded by" in page.text
    back = console.get(f"/ratchet/jobs/{second}")
    assert f'href="/ratchet/jobs/{first}"' in back.text and "Replaces" in back.text
    assert "Cancel</button>" in back.text and "Retry</button>" not in back.text
    assert console.get("/ratchet/jobs/not-a-uuid").status_code == 404
    assert console.get(f"/ratchet/jobs/{uuid.uuid4()}").status_code == 404


def test_secret_looking_arguments_are_masked(console: Console) -> None:
    job_id = (
        ratchet.enqueue(add, {"password": "hunter2", "nested": {"api_key": "k-123"}}, 1)
        .with_param("auth_token", "t-456")
        .submit()
        .id
    )
    page = console.get(f"/ratchet/jobs/{job_id}")
    for secret in ("hunter2", "k-123", "t-456"):
        assert secret not in page.text
    assert "••••••" in page.text


def test_hostile_task_args_tags_and_errors_are_inert(console: Console) -> None:
    hostile = '<script>alert(1)</script><div hx-get="/ratchet/jobs" hx-trigger="load">x</div>'
    failed = job_in(JobStatus.FAILED)
    job_id = (
        ratchet.enqueue(add, hostile, {"k": hostile})
        .with_tags('"><img src=x onerror=alert(1)>')
        .submit()
        .id
    )
    with ratchet.transaction() as conn:
        conn.execute(
            sa.update(job)
            .where(job.c.job_id == failed)
            .values(terminal_error=hostile, task=hostile, fingerprint=hostile)
        )
    for url in (
        "/ratchet/",
        "/ratchet/jobs",
        f"/ratchet/jobs?q={hostile[:50]}",
        f"/ratchet/jobs/{job_id}",
        f"/ratchet/jobs/{failed}",
        "/ratchet/dead-letters",
    ):
        page = console.get(url)
        assert page.status_code == 200, url
        text = page.text
        assert "<script>alert" not in text and "<img src=x" not in text, url
        # No element of the page got an attribute out of job data: htmx cannot be steered.
        assert 'hx-trigger="load"' not in text and "<div hx-get" not in text, url
    assert "&lt;script&gt;" in console.get(f"/ratchet/jobs/{failed}").text


# -- filters and pagination --------------------------------------------------------------------


def _ids(page: TestResponse) -> list[str]:
    return re.findall(r'name="job_id" value="([0-9a-f-]{36})"', page.text)


def test_filters_each_narrow_the_list(console: Console) -> None:
    plain = ratchet.enqueue(add, 1, 2).submit().id
    billing = ratchet.enqueue(charge, 42).with_business_key("pay-42").submit().id
    low = ratchet.enqueue(add, 5, 6).with_priority(Priority.LOW).with_tags("nightly").submit().id
    needle = ratchet.enqueue(add, "find-me-please", 0).submit().id
    paused = ratchet.enqueue(add, 7, 8).submit().id
    ratchet.pause_job(paused)
    cases = {
        "status=PAUSED": {paused},
        "task=billing.charge": {billing},
        "tag=nightly": {low},
        "business_key=pay-42": {billing},
        "priority=LOW": {low},
        "priority=3": {billing},
        "q=find-me": {needle},
        f"q={plain}": {plain},
        "status=PENDING&task=tests.apps:add&priority=NORMAL": {plain, needle},
    }
    for query, expected in cases.items():
        page = console.get(f"/ratchet/jobs?{query}")
        assert page.status_code == 200, query
        assert set(_ids(page)) == {str(i) for i in expected}, query
    soon = (datetime.now(UTC) + timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M")
    assert _ids(console.get(f"/ratchet/jobs?created_after={soon}")) == []
    assert len(_ids(console.get(f"/ratchet/jobs?created_before={soon}"))) == 5


def test_node_filter_finds_running_jobs(console: Console) -> None:
    running = job_in(JobStatus.RUNNING)
    assert _ids(console.get("/ratchet/jobs?node=node-a")) == [str(running)]
    assert _ids(console.get("/ratchet/jobs?node=node-b")) == []


@pytest.mark.parametrize(
    "query",
    [
        "status=DONE",
        "sort=random",
        "priority=9",
        "size=5000",
        "created_after=yesterday",
        "task=" + "x" * 300,
        "q=" + "y" * 300,
        "cursor=garbage",
    ],
)
def test_bad_filter_values_are_refused(console: Console, query: str) -> None:
    assert console.get(f"/ratchet/jobs?{query}").status_code == 400


def test_pages_are_stable_while_jobs_arrive(console: Console) -> None:
    ids = [h.id for h in ratchet.enqueue_many(ratchet.enqueue(add, i, i) for i in range(60))]
    first = console.get("/ratchet/jobs?size=25")
    assert _ids(first) == [str(i) for i in reversed(ids[-25:])]
    next_url = re.search(r'rel="next" href="([^"]+)"', first.text)
    assert next_url is not None
    ratchet.enqueue_many(ratchet.enqueue(add, i, i) for i in range(10))  # arrive meanwhile
    second = console.get(next_url.group(1).replace("&amp;", "&"))
    assert _ids(second) == [str(i) for i in reversed(ids[-50:-25])]
    banner = console.get(f"/ratchet/jobs/new-count?newest={ids[-1]}")
    assert "10 new jobs" in banner.text
    oldest = console.get("/ratchet/jobs?sort=oldest&size=25")
    assert _ids(oldest) == [str(i) for i in ids[:25]]


def test_priority_sort_pages_by_priority_then_newest(console: Console) -> None:
    ids = {}
    for prio in (Priority.LOW, Priority.CRITICAL, Priority.NORMAL):
        ids[prio] = [ratchet.enqueue(add, 1, 1).with_priority(prio).submit().id for _ in range(20)]
    expected = [
        str(i) for p in (Priority.CRITICAL, Priority.NORMAL, Priority.LOW) for i in reversed(ids[p])
    ]
    seen: list[str] = []
    url: str | None = "/ratchet/jobs?sort=priority&size=25"
    while url:
        page = console.get(url)
        seen += _ids(page)
        found = re.search(r'rel="next" href="([^"]+)"', page.text)
        url = found.group(1).replace("&amp;", "&") if found else None
    assert seen == expected


# -- actions -----------------------------------------------------------------------------------


def test_one_job_actions_and_refusals_are_reported_and_audited(console: Console) -> None:
    failed = job_in(JobStatus.FAILED)
    done = console.post(f"/ratchet/jobs/{failed}/retry", {"next": f"/ratchet/jobs/{failed}"})
    assert done.status_code == 200 and "retried" in done.text
    assert ratchet.get_job(failed).status == JobStatus.PENDING  # type: ignore[union-attr]
    again = console.post(f"/ratchet/jobs/{failed}/retry", htmx=True)
    assert again.status_code == 200 and "was not retried" in again.text
    assert again.headers["HX-Trigger"] == "ratchet-changed" and "<html" not in again.text
    assert ratchet.get_job(failed).status == JobStatus.PENDING  # type: ignore[union-attr]
    for action, status in (("pause", "PAUSED"), ("resume", "PENDING"), ("cancel", "CANCELED")):
        assert console.post(f"/ratchet/jobs/{failed}/{action}", htmx=True).status_code == 200
        assert ratchet.get_job(failed).status == status  # type: ignore[union-attr]
    assert console.post(f"/ratchet/jobs/{failed}/explode").status_code == 400
    rows = audit_rows()
    assert [(r.action, r.scope, r.requested, r.changed) for r in rows] == [
        ("retry", "job", 1, 1),
        ("retry", "job", 1, 0),
        ("pause", "job", 1, 1),
        ("resume", "job", 1, 1),
        ("cancel", "job", 1, 1),
    ]
    assert rows[0].actor == "127.0.0.1" and rows[0].role == "admin"
    assert rows[0].target == str(failed)


def test_delete_removes_only_ended_jobs(console: Console) -> None:
    live = job_in(JobStatus.PENDING)
    ended = ratchet.enqueue(add, 1, 1).submit().id
    ratchet.cancel_job(ended)
    refused = console.post(f"/ratchet/jobs/{live}/delete")
    assert "was not deleted" in refused.text and ratchet.get_job(live) is not None
    gone = console.post(f"/ratchet/jobs/{ended}/delete")
    assert "deleted" in gone.text and ratchet.get_job(ended) is None
    assert console.get(f"/ratchet/jobs/{ended}").status_code == 404


def test_selected_jobs(console: Console) -> None:
    failed = [job_in(JobStatus.FAILED) for _ in range(1)]
    pending = [job_in(JobStatus.PENDING) for _ in range(3)]
    chosen = [*failed, *pending]
    done = console.post(
        "/ratchet/jobs/selected",
        {
            "action": "cancel",
            "job_id": [str(i) for i in chosen],
            "next": "/ratchet/jobs?status=PENDING",
        },
    )
    assert "3 of 4 jobs canceled" in done.text and "1 refused" in done.text
    assert 'href="/ratchet/jobs?status=PENDING"' in done.text
    assert all(ratchet.get_job(i).status == JobStatus.CANCELED for i in pending)  # type: ignore[union-attr]
    assert console.post("/ratchet/jobs/selected", {"action": "cancel"}).status_code == 400
    assert (
        console.post("/ratchet/jobs/selected", {"action": "cancel", "job_id": "nope"}).status_code
        == 400
    )
    offsite = console.post(
        "/ratchet/jobs/selected",
        {"action": "cancel", "job_id": str(failed[0]), "next": "//evil.example/"},
    )
    assert "evil.example" not in offsite.text
    (row,) = audit_rows()[:1]
    assert (row.scope, row.requested, row.changed) == ("selected", 4, 3)
    assert set(json.loads(row.target)) == {str(i) for i in chosen}


def failed_in(task: str) -> uuid.UUID:
    """A FAILED job whose task name is ``task`` (renamed after the fact, as a filter sees it)."""
    job_id = job_in(JobStatus.FAILED)
    with ratchet.transaction() as conn:
        conn.execute(sa.update(job).where(job.c.job_id == job_id).values(task=task))
    return job_id


def confirmed_form(page: TestResponse) -> dict[str, str]:
    """The hidden fields of a confirmation page's form: what pressing its button posts."""
    form = re.search(r'<form method="post"[^>]*>(.*?)</form>', page.text, re.S)
    assert form is not None, page.text
    fields = re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', form.group(1))
    return {k: html.unescape(v) for k, v in fields if k != "csrf_token"}  # as a browser reads it


def test_bulk_action_on_a_filter_confirms_the_count_first(console: Console) -> None:
    failed = [job_in(JobStatus.FAILED) for _ in range(1)]
    billing = [ratchet.enqueue(charge, i).submit().id for i in range(4)]
    other = ratchet.enqueue(add, 1, 2).submit().id
    confirm = console.get("/ratchet/jobs/bulk?action=pause&task=billing.charge")
    assert confirm.status_code == 200 and "<strong>4</strong> jobs match" in confirm.text
    assert 'name="task" value="billing.charge"' in confirm.text
    form = confirmed_form(confirm)
    assert form["bound"] == str(billing[-1]) and form["count"] == "4"
    assert all(ratchet.get_job(i).status == JobStatus.PENDING for i in billing)  # type: ignore[union-attr]
    done = console.post("/ratchet/jobs/bulk", form)
    assert "4 of 4 jobs paused" in done.text
    assert all(ratchet.get_job(i).status == JobStatus.PAUSED for i in billing)  # type: ignore[union-attr]
    assert ratchet.get_job(other).status == JobStatus.PENDING  # type: ignore[union-attr]
    assert ratchet.get_job(failed[0]).status == JobStatus.FAILED  # type: ignore[union-attr]
    # Without any filter the whole table would match: refused. Without the snapshot too.
    assert console.post("/ratchet/jobs/bulk", {"action": "cancel"}).status_code == 400
    unconfirmed = {"action": "cancel", "task": "billing.charge"}
    assert console.post("/ratchet/jobs/bulk", unconfirmed).status_code == 400
    (row,) = audit_rows()
    assert (row.action, row.scope, row.requested, row.changed) == ("pause", "filter", 4, 4)
    assert json.loads(row.target) == {
        "filter": {"task": "billing.charge"},
        "changed": [str(i) for i in reversed(billing)],
    }


def test_a_filter_cancel_is_one_bulk_change_with_one_event(console: Console) -> None:
    billing = [ratchet.enqueue(charge, i).submit().id for i in range(4)]
    bulk_events: list[dict[str, object]] = []
    each: list[object] = []

    def got_bulk(_app: object, **data: object) -> None:
        bulk_events.append(data)

    def got_one(_app: object, **data: object) -> None:
        each.append(data)

    events.jobs_bulk_canceled.connect(got_bulk)
    events.job_canceled.connect(got_one)
    try:
        confirm = console.get("/ratchet/jobs/bulk?action=cancel&task=billing.charge")
        done = console.post("/ratchet/jobs/bulk", confirmed_form(confirm))
    finally:
        events.jobs_bulk_canceled.disconnect(got_bulk)
        events.job_canceled.disconnect(got_one)
    assert "4 of 4 jobs canceled" in done.text
    assert all(ratchet.get_job(i).status == JobStatus.CANCELED for i in billing)  # type: ignore[union-attr]
    assert bulk_events == [{"count": 4, "filter": {"console": "filter"}}] and each == []
    (row,) = audit_rows()
    assert (row.action, row.scope, row.requested, row.changed) == ("cancel", "filter", 4, 4)


def test_bulk_action_counts_and_takes_only_jobs_it_can_change(
    console: Console, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flask_ratchet.console import actions

    monkeypatch.setattr(actions, "BULK_CAP", 3)
    failed = [failed_in("billing.charge") for _ in range(3)]
    pending = [ratchet.enqueue(charge, i).submit().id for i in range(4)]  # newer than the failed
    confirm = console.get("/ratchet/jobs/bulk?action=retry&task=billing.charge")
    assert "<strong>3</strong> jobs match" in confirm.text  # not 3+: PENDING ones don't count
    done = console.post("/ratchet/jobs/bulk", confirmed_form(confirm))
    assert "3 of 3 jobs retried" in done.text and "refused" not in done.text
    assert all(ratchet.get_job(i).status == JobStatus.PENDING for i in failed)  # type: ignore[union-attr]
    assert len(pending) == 4
    nothing = console.get("/ratchet/jobs/bulk?action=delete&task=billing.charge")
    assert "<strong>0</strong> jobs match" in nothing.text and 'name="bound"' not in nothing.text


def test_bulk_action_leaves_jobs_that_arrive_after_the_confirmation(console: Console) -> None:
    before = [ratchet.enqueue(charge, i).submit().id for i in range(2)]
    confirm = console.get("/ratchet/jobs/bulk?action=cancel&task=billing.charge")
    form = confirmed_form(confirm)
    after = [ratchet.enqueue(charge, i).submit().id for i in range(3)]  # arrive meanwhile
    done = console.post("/ratchet/jobs/bulk", form)
    assert "2 of 2 jobs canceled" in done.text
    assert all(ratchet.get_job(i).status == JobStatus.CANCELED for i in before)  # type: ignore[union-attr]
    assert all(ratchet.get_job(i).status == JobStatus.PENDING for i in after)  # type: ignore[union-attr]


def test_bulk_action_asks_again_when_more_jobs_match_than_confirmed(console: Console) -> None:
    failed = [failed_in("billing.charge") for _ in range(3)]
    ratchet.retry_job(failed[0])  # PENDING at confirmation time: not counted by "retry"
    confirm = console.get("/ratchet/jobs/bulk?action=retry&task=billing.charge")
    form = confirmed_form(confirm)
    assert form["count"] == "2"
    with ratchet.transaction() as conn:  # it fails again before the operator presses the button
        conn.execute(sa.delete(job_queue).where(job_queue.c.job_id == failed[0]))
        conn.execute(
            sa.update(job).where(job.c.job_id == failed[0]).values(terminal_status="FAILED")
        )
    again = console.post("/ratchet/jobs/bulk", form)
    assert again.status_code == 409 and "confirm again" in again.text
    assert "<strong>3</strong> jobs match" in again.text
    assert all(ratchet.get_job(i).status == JobStatus.FAILED for i in failed)  # type: ignore[union-attr]
    assert count("ratchet_audit") == 0
    done = console.post("/ratchet/jobs/bulk", confirmed_form(again))
    assert "3 of 3 jobs retried" in done.text


def test_a_job_failing_in_the_database_is_refused_alone(console: Console, dialect: str) -> None:
    failed = [failed_in("billing.charge") for _ in range(3)]
    bad = failed[1]
    # A trigger that breaks the retry of one job (as a concurrent change breaking a constraint
    # would): the others are still retried and the action is audited.
    with ratchet.transaction() as conn:
        raw = stored_id(bad, dialect)
        literal = f"X'{raw.hex()}'" if isinstance(raw, bytes) else f"'{raw}'"
        add_refusing_trigger(
            conn, "ratchet_test_boom", "ratchet_job_queue", f"NEW.job_id = {literal}"
        )
    try:
        confirm = console.get("/ratchet/jobs/bulk?action=retry&task=billing.charge")
        done = console.post("/ratchet/jobs/bulk", confirmed_form(confirm))
    finally:
        with ratchet.transaction() as conn:
            drop_refusing_trigger(conn, "ratchet_test_boom", "ratchet_job_queue")
    assert "2 of 3 jobs retried" in done.text and "1 refused" in done.text
    assert ratchet.get_job(bad).status == JobStatus.FAILED  # type: ignore[union-attr]
    assert {ratchet.get_job(i).status for i in failed if i != bad} == {JobStatus.PENDING}  # type: ignore[union-attr]
    (row,) = audit_rows()
    assert (row.requested, row.changed) == (3, 2)
    assert bad not in json.loads(row.target)["changed"]


def test_bulk_action_is_capped(console: Console, monkeypatch: pytest.MonkeyPatch) -> None:
    from flask_ratchet.console import actions

    monkeypatch.setattr(actions, "BULK_CAP", 3)
    ids = [h.id for h in ratchet.enqueue_many(ratchet.enqueue(add, i, i) for i in range(5))]
    confirm = console.get("/ratchet/jobs/bulk?action=cancel&status=PENDING")
    assert "<strong>3+</strong>" in confirm.text and "newest 3" in confirm.text
    done = console.post("/ratchet/jobs/bulk", confirmed_form(confirm))
    assert "3 of 3 jobs canceled" in done.text
    statuses = [ratchet.get_job(i).status for i in ids]  # type: ignore[union-attr]
    assert statuses == [JobStatus.PENDING] * 2 + [JobStatus.CANCELED] * 3


def test_dead_letters_and_nodes_pages(console: Console) -> None:
    failed = job_in(JobStatus.FAILED)
    page = console.get("/ratchet/dead-letters")
    assert page.status_code == 200 and "tests.apps:add" in page.text and "boom" in page.text
    assert f"/ratchet/jobs/{failed}" in page.text
    nodes = console.get("/ratchet/nodes")
    assert nodes.status_code == 200 and "No worker has reported in" in nodes.text


# -- review findings: search, origin, cookie, actor, banner, prefix, htmx errors ----------------


def test_argument_search_is_for_admins_only(app: Flask) -> None:
    job_id = ratchet.enqueue(add, {"password": "hunter2", "note": "find-me"}, 1).submit().id
    reader = Console(app.test_client(), role="read")
    refused = reader.get("/ratchet/jobs?q=find-me")
    assert refused.status_code == 403 and "admin" in refused.text
    assert (
        reader.get("/ratchet/jobs/new-count?newest=" + str(job_id) + "&q=hunt").status_code == 403
    )
    # The box says what it takes.
    assert "Job id or short id <input" in reader.get("/ratchet/jobs").text
    by_id = reader.get(f"/ratchet/jobs?q={job_id}")
    assert by_id.status_code == 200 and _ids(by_id) == []  # read: no checkboxes, but listed
    assert f"/ratchet/jobs/{job_id}" in by_id.text
    admin = Console(app.test_client())
    assert _ids(admin.get("/ratchet/jobs?q=find-me")) == [str(job_id)]


@pytest.mark.parametrize(
    "term", ['"password":"hunt', "password", 'word":"hunter', "api_key", "accessToken"]
)
def test_search_cannot_probe_masked_values(console: Console, term: str) -> None:
    ratchet.enqueue(add, {"password": "hunter2", "api_key": "k", "accessToken": "t"}, 1).submit()
    page = console.get(f"/ratchet/jobs?q={term}")
    assert page.status_code == 400 and "secret" in page.text


def test_a_plain_http_origin_is_refused_on_https(console: Console) -> None:
    failed = job_in(JobStatus.FAILED)
    url = f"/ratchet/jobs/{failed}/retry"
    data = {"csrf_token": console.token}
    with console.client.application.app_context():
        downgraded = console.client.post(
            url, base_url="https://localhost", headers=ADMIN | ORIGIN, data=data
        )
    assert downgraded.status_code == 403
    assert ratchet.get_job(failed).status == JobStatus.FAILED  # type: ignore[union-attr]
    with console.client.application.app_context():
        same = console.client.post(
            url,
            base_url="https://localhost",
            headers=ADMIN | {"Origin": "https://localhost"},
            data=data,
        )
    assert same.status_code == 200


def _token_at(client: FlaskClient, base_url: str) -> str:
    page = client.get("/ratchet/jobs", base_url=base_url, headers=ADMIN)
    found = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert found is not None
    return found.group(1)


def test_with_an_origin_allow_list_a_rebound_host_is_refused(database_url: str) -> None:
    app = create_app(database_url, RATCHET_CONSOLE_ORIGINS=["https://ops.example.com"])
    try:
        with app.app_context():
            app.extensions["ratchet"].ensure_schema()
            failed = job_in(JobStatus.FAILED)
        client = app.test_client()
        url = f"/ratchet/jobs/{failed}/retry"
        # DNS rebinding: the attacker's name points here; Host and Origin are both theirs.
        evil = "http://evil.example"
        with app.app_context():
            token = _token_at(client, evil)
            rebound = client.post(
                url, base_url=evil, headers=ADMIN | {"Origin": evil}, data={"csrf_token": token}
            )
        assert rebound.status_code == 403
        ops = "https://ops.example.com"
        with app.app_context():
            token = _token_at(client, ops)
            ok = client.post(
                url, base_url=ops, headers=ADMIN | {"Origin": ops}, data={"csrf_token": token}
            )
            assert ok.status_code == 200
            assert ratchet.get_job(failed).status == JobStatus.PENDING  # type: ignore[union-attr]
    finally:
        with app.app_context():
            db.engine.dispose()


@pytest.mark.parametrize(
    "value", ["https://ops.example.com", ["ops.example.com"], ["https://ops.example.com/x"], [1]]
)
def test_origin_allow_list_is_validated(database_url: str, value: object) -> None:
    with pytest.raises(ConfigError, match="RATCHET_CONSOLE_ORIGINS"):
        create_app(database_url, RATCHET_CONSOLE_ORIGINS=value)


def test_csrf_cookie_is_secure_under_https_and_only_well_formed_tokens_are_kept(
    app: Flask,
) -> None:
    client = app.test_client()
    secure = client.get("/ratchet/", base_url="https://localhost", headers=ADMIN)
    assert "Secure" in secure.headers["Set-Cookie"]
    plain = app.test_client().get("/ratchet/", headers=ADMIN)
    assert "Secure" not in plain.headers["Set-Cookie"]
    app.config["SESSION_COOKIE_SECURE"] = True  # TLS ends at a proxy werkzeug is not told of
    assert "Secure" in app.test_client().get("/ratchet/", headers=ADMIN).headers["Set-Cookie"]
    for bad in ("x" * 42, "x" * 44, "x" * 42 + "!", "x" * 128):
        other = app.test_client()
        other.set_cookie("ratchet_csrf", bad, path="/ratchet")
        page = other.get("/ratchet/", headers=ADMIN)
        assert "Set-Cookie" in page.headers, bad  # replaced by a fresh token
        assert bad not in page.text
    good = app.test_client()
    good.set_cookie("ratchet_csrf", "A" * 40 + "_-9", path="/ratchet")
    assert "Set-Cookie" not in good.get("/ratchet/", headers=ADMIN).headers


def test_a_basic_auth_header_does_not_name_the_actor(console: Console) -> None:
    failed = job_in(JobStatus.FAILED)
    basic = {"Authorization": "Basic " + base64.b64encode(b"the-ceo:whatever").decode()}
    with console.client.application.app_context():
        done = console.client.post(
            f"/ratchet/jobs/{failed}/retry",
            headers=ADMIN | ORIGIN | basic,
            data={"csrf_token": console.token},
        )
    assert done.status_code == 200
    (row,) = audit_rows()
    assert row.actor == "127.0.0.1"


def test_new_jobs_banner_counts_from_the_newest_job_whatever_the_sort(console: Console) -> None:
    ids = [h.id for h in ratchet.enqueue_many(ratchet.enqueue(add, i, i) for i in range(30))]
    for sort in ("oldest", "priority", "newest"):
        page = console.get(f"/ratchet/jobs?sort={sort}&size=25")
        found = re.search(r'hx-get="[^"]*new-count\?newest=([0-9a-f-]{36})', page.text)
        assert found is not None and found.group(1) == str(ids[-1]), sort
        # The banner is part of the list that refreshes after an action.
        job_list = page.text[page.text.index('id="job-list"') :]
        assert "new-count" in job_list
    assert "new job" not in console.get(f"/ratchet/jobs/new-count?newest={ids[-1]}").text
    ratchet.enqueue_many(ratchet.enqueue(add, i, i) for i in range(2))
    assert "2 new jobs" in console.get(f"/ratchet/jobs/new-count?newest={ids[-1]}&sort=oldest").text


def test_the_list_refreshes_and_returns_under_the_apps_script_root(console: Console) -> None:
    failed = job_in(JobStatus.FAILED)
    with console.client.application.app_context():
        page = console.client.get(
            "/ratchet/jobs?status=FAILED", base_url="http://localhost/app", headers=ADMIN
        )
    assert page.status_code == 200
    assert 'hx-get="/app/ratchet/jobs?status=FAILED"' in page.text
    assert 'name="next" value="/app/ratchet/jobs?status=FAILED"' in page.text
    # The cookie is scoped to /app/ratchet: this page carries a token of its own.
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert token is not None
    with console.client.application.app_context():
        done = console.client.post(
            "/ratchet/jobs/selected",
            base_url="http://localhost/app",
            headers=ADMIN | ORIGIN,
            data={
                "csrf_token": token.group(1),
                "action": "retry",
                "job_id": str(failed),
                "next": "/app/ratchet/jobs?status=FAILED",
            },
        )
    assert 'href="/app/ratchet/jobs?status=FAILED"' in done.text


def test_htmx_errors_come_back_as_a_notice(console: Console) -> None:
    failed = job_in(JobStatus.FAILED)
    page = console.get("/ratchet/")
    assert "responseHandling" in page.text
    bad = console.post(f"/ratchet/jobs/{failed}/explode", htmx=True)
    assert bad.status_code == 400 and "<html" not in bad.text
    assert 'class="notice warn"' in bad.text and "action must be one of" in bad.text
    assert bad.headers["HX-Retarget"] == "#notice" and bad.headers["HX-Reselect"] == ".notice"
    # Without htmx, the usual error page.
    assert "<html" in console.post(f"/ratchet/jobs/{failed}/explode").text
    ratchet.cancel_job(job_in(JobStatus.PENDING))


def test_deleting_the_job_on_screen_sends_htmx_to_the_list(console: Console) -> None:
    ended = ratchet.enqueue(add, 1, 1).submit().id
    ratchet.cancel_job(ended)
    gone = console.post(f"/ratchet/jobs/{ended}/delete", htmx=True)
    assert gone.status_code == 200 and "deleted" in gone.text
    assert gone.headers["HX-Location"] == "/ratchet/jobs"
    refused = console.post(f"/ratchet/jobs/{job_in(JobStatus.PENDING)}/delete", htmx=True)
    assert "HX-Location" not in refused.headers


def test_recent_audit_keeps_the_order_of_actions_in_the_same_instant(app: Flask) -> None:
    at = datetime.now(UTC)
    with ratchet.transaction() as conn:
        written = [
            ratchet.runtime.store.cluster.record_audit(
                conn,
                at=at,
                actor="a",
                role="admin",
                action="retry",
                scope="job",
                target=str(i),
                requested=1,
                changed=1,
            )
            for i in range(5)
        ]
        rows = reports.recent_audit(conn)
    assert [r.audit_id for r in rows] == list(reversed(written))


# -- recurring masters -------------------------------------------------------------------------


def _masters(page: TestResponse) -> list[str]:
    """The ids of the masters a recurring page lists, in order (as the page escaped them)."""
    return re.findall(r'<tr data-recurring="([^"]*)">', page.text)


def _refresh(recurring_id: str) -> RecurringStatus:
    found = ratchet.get_recurring(recurring_id)
    assert found is not None
    return found.status


def test_recurring_page_lists_masters_with_their_next_fire_times(console: Console) -> None:
    berlin = master("nightly", name="Nightly cleanup", zone="Europe/Berlin")
    paused = master("paused-one")
    ended = master("ended-one")
    ratchet.pause_recurring(paused)
    ratchet.cancel_recurring(ended)
    page = console.get("/ratchet/recurring")
    assert page.status_code == 200
    assert _masters(page) == [berlin, paused]  # by id; CANCELED left out
    row = page.text[page.text.index('data-recurring="nightly"') :]
    row = row[: row.index("</tr>")]
    for text in ("Nightly cleanup", "tests.apps:add", NIGHTLY, "Europe/Berlin", "ACTIVE"):
        assert text in row, text
    assert "FIRE_ONCE" in row and 'href="/ratchet/jobs?recurring=nightly"' in row
    snapshot = ratchet.get_recurring(berlin)
    assert snapshot is not None and snapshot.next_fire is not None
    upcoming = next_fire_times(NIGHTLY, "Europe/Berlin", datetime.now(UTC), 3)
    assert upcoming[0] == snapshot.next_fire
    for when in upcoming:
        # 02:00 in Berlin is 01:00 UTC (CET) or 00:00 UTC (CEST): both are on the page.
        local = when.astimezone(ZoneInfo("Europe/Berlin")).strftime("%Y-%m-%d %H:%M:%S %Z")
        assert local in row and f"{when:%Y-%m-%d %H:%M:%S} UTC" in row
    paused_row = page.text[page.text.index('data-recurring="paused-one"') :]
    paused_row = paused_row[: paused_row.index("</tr>")]
    assert ">paused<" in paused_row
    assert 'data-action="resume"' in paused_row and 'data-action="pause"' not in paused_row
    everything = console.get("/ratchet/recurring?canceled=1")
    assert _masters(everything) == [ended, berlin, paused]
    assert "CANCELED" in everything.text
    assert 'aria-current="page">Recurring' in page.text  # the nav marks the page


def test_the_job_list_filters_a_masters_children(console: Console) -> None:
    nightly = master("nightly")
    other = master("other")
    mine = [ratchet.run_recurring_now(nightly).id for _ in range(4)]  # type: ignore[union-attr]
    theirs = ratchet.run_recurring_now(other).id  # type: ignore[union-attr]
    plain = ratchet.enqueue(add, 1, 1).submit().id
    page = console.get(f"/ratchet/jobs?recurring={nightly}")
    assert set(_ids(page)) == {str(i) for i in mine}
    assert str(theirs) not in page.text and str(plain) not in page.text
    assert 'name="recurring" value="nightly"' in page.text
    # Children that fired on schedule (with a fire time) are listed too, newest first.
    base = datetime(2030, 1, 1, tzinfo=UTC)
    with ratchet.transaction() as conn:
        for i, job_id in enumerate(mine[:3]):
            conn.execute(
                sa.update(job).where(job.c.job_id == job_id).values(fire_time=base + timedelta(i))
            )
    assert _ids(console.get(f"/ratchet/jobs?recurring={nightly}")) == [str(i) for i in mine[::-1]]
    assert console.get("/ratchet/jobs?recurring=" + "x" * 300).status_code == 400


def test_recurring_actions_and_refusals_are_reported_and_audited(console: Console) -> None:
    nightly = master("nightly")
    back = {"id": nightly, "next": "/ratchet/recurring"}
    paused = console.post("/ratchet/recurring/pause", back)
    assert paused.status_code == 200 and "<html" in paused.text  # without JS: a page
    assert "Recurring job <code>nightly</code> paused." in paused.text
    assert 'href="/ratchet/recurring"' in paused.text
    assert _refresh(nightly) == RecurringStatus.PAUSED
    resumed = console.post("/ratchet/recurring/resume", {"id": nightly}, htmx=True)
    assert resumed.status_code == 200 and "<html" not in resumed.text
    assert resumed.headers["HX-Trigger"] == "ratchet-changed" and "resumed." in resumed.text
    assert _refresh(nightly) == RecurringStatus.ACTIVE
    again = console.post("/ratchet/recurring/resume", {"id": nightly}, htmx=True)
    assert "was not resumed: only PAUSED recurring jobs can be, and it is ACTIVE" in again.text
    assert 'class="notice warn"' in again.text
    assert _refresh(nightly) == RecurringStatus.ACTIVE
    run = console.post("/ratchet/recurring/run", {"id": nightly}, htmx=True)
    child = re.search(r'href="/ratchet/jobs/([0-9a-f-]{36})"', run.text)
    assert child is not None and "run now." in run.text
    made = ratchet.get_job(uuid.UUID(child.group(1)))
    assert made is not None and made.recurring_id == nightly and made.status == JobStatus.PENDING
    # Cancel asks first (a GET that changes nothing), then the confirmed form posts.
    confirm = console.get(f"/ratchet/recurring/cancel?id={nightly}")
    assert confirm.status_code == 200 and "Cancel this recurring job?" in confirm.text
    assert 'action="/ratchet/recurring/cancel"' in confirm.text
    assert _refresh(nightly) == RecurringStatus.ACTIVE
    canceled = console.post("/ratchet/recurring/cancel", back)
    assert "canceled." in canceled.text and _refresh(nightly) == RecurringStatus.CANCELED
    assert "already canceled" in console.get(f"/ratchet/recurring/cancel?id={nightly}").text
    late = console.post("/ratchet/recurring/run", {"id": nightly}, htmx=True)
    assert "was not run now: only ACTIVE or PAUSED recurring jobs can be, and it is CANCELED" in (
        late.text
    )
    ghost = console.post("/ratchet/recurring/pause", {"id": "no-such-master"})
    assert "there is none with this id" in ghost.text
    assert console.post("/ratchet/recurring/explode", {"id": nightly}).status_code == 400
    assert console.post("/ratchet/recurring/pause", {}).status_code == 400
    assert console.post("/ratchet/recurring/pause", {"id": "x" * 256}).status_code == 400
    assert console.get("/ratchet/recurring/cancel?id=no-such-master").status_code == 404
    rows = audit_rows()
    assert [(r.action, r.scope, r.target, r.requested, r.changed) for r in rows] == [
        ("pause", "recurring", nightly, 1, 1),
        ("resume", "recurring", nightly, 1, 1),
        ("resume", "recurring", nightly, 1, 0),
        ("run", "recurring", nightly, 1, 1),
        ("cancel", "recurring", nightly, 1, 1),
        ("run", "recurring", nightly, 1, 0),
        ("pause", "recurring", "no-such-master", 1, 0),
    ]
    assert rows[0].actor == "127.0.0.1" and rows[0].role == "admin"
    overview = console.get("/ratchet/")
    nightly = '<a href="/ratchet/jobs?recurring=nightly"><code><bdi>nightly</bdi></code></a>'
    assert f"recurring {nightly}" in overview.text


def test_read_role_sees_recurring_masters_and_cannot_act(app: Flask) -> None:
    nightly = master("nightly")
    reader = Console(app.test_client(), role="read")
    page = reader.get("/ratchet/recurring")
    assert page.status_code == 200 and _masters(page) == [nightly]
    assert "data-action" not in page.text and "<th>Actions</th>" not in page.text
    confirm = reader.get(f"/ratchet/recurring/cancel?id={nightly}")
    assert confirm.status_code == 200 and '<form method="post"' not in confirm.text
    for action in ("pause", "resume", "run", "cancel"):
        refused = reader.post(f"/ratchet/recurring/{action}", {"id": nightly})
        assert refused.status_code == 403, action
    assert _refresh(nightly) == RecurringStatus.ACTIVE
    assert ratchet.list_recurring() and count("ratchet_job") == 0
    assert count("ratchet_audit") == 0


def test_recurring_actions_need_the_csrf_token_and_this_origin(console: Console) -> None:
    nightly = master("nightly")
    client = console.client
    url = "/ratchet/recurring/pause"
    form = {"id": nightly}
    with client.application.app_context():
        refused = [
            client.post(url, headers=ADMIN | ORIGIN, data=form),  # no token
            client.post(url, headers=ADMIN | ORIGIN, data=form | {"csrf_token": "x" * 43}),
            client.post(url, headers=ADMIN, data=form | {"csrf_token": console.token}),
            client.post(
                url,
                headers=ADMIN | {"Origin": "https://evil.example"},
                data=form | {"csrf_token": console.token},
            ),
        ]
    assert [r.status_code for r in refused] == [403] * len(refused)
    assert _refresh(nightly) == RecurringStatus.ACTIVE
    assert count("ratchet_audit") == 0
    assert console.post(url, form).status_code == 200
    assert _refresh(nightly) == RecurringStatus.PAUSED


def test_hostile_recurring_ids_names_tasks_and_crons_are_inert(console: Console) -> None:
    hostile = '<script>alert(1)</script><div hx-get="/ratchet/jobs" hx-trigger="load">x</div>'
    evil_id = '"><script>alert(2)</script> hx-get="/ratchet/jobs"'
    master(evil_id, name=hostile)
    sneaky = master("sneaky")
    with ratchet.transaction() as conn:
        # Written behind the API's back (a cron the library would refuse): the page must still
        # list the master, escaped, with no preview.
        conn.execute(
            sa.update(recurring)
            .where(recurring.c.recurring_id == sneaky)
            .values(task=hostile, cron=hostile)
        )
    ratchet.run_recurring_now(evil_id)
    console.post("/ratchet/recurring/pause", {"id": evil_id})
    refused = console.post("/ratchet/recurring/resume", {"id": hostile}, htmx=True)
    for page in (
        console.get("/ratchet/recurring"),
        console.get("/ratchet/"),
        console.get("/ratchet/jobs?recurring=" + quote(evil_id)),
        console.get("/ratchet/recurring/cancel?id=" + quote(evil_id)),
        console.post("/ratchet/recurring/resume", {"id": evil_id}),
        refused,
    ):
        assert page.status_code == 200, page.request.path
        text = page.text
        assert "<script>alert" not in text, page.request.path
        assert 'hx-trigger="load"' not in text and "<div hx-get" not in text, page.request.path
        assert ' hx-get="/ratchet/jobs"' not in text, page.request.path
    listed = console.get("/ratchet/recurring")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in listed.text
    assert _masters(listed) == [
        "&#34;&gt;&lt;script&gt;alert(2)&lt;/script&gt; hx-get=&#34;/ratchet/jobs&#34;",
        "sneaky",
    ]
    assert _refresh(evil_id) == RecurringStatus.ACTIVE  # resumed by its exact id
    children = console.get("/ratchet/jobs?recurring=" + quote(evil_id))
    assert len(_ids(children)) == 1
    sneaky_row = listed.text[listed.text.index('data-recurring="sneaky"') :]
    assert "not a valid cron expression · UTC" in sneaky_row[: sneaky_row.index("</tr>")]


def test_recurring_page_says_which_cron_dialect_a_master_is_in(console: Console) -> None:
    master("quartz-one", cron="0 0 2 * * ?", zone="Europe/Berlin")
    master("unix-one", cron="*/5 * * * *")
    master("macro-one", cron="@Daily")
    page = console.get("/ratchet/recurring")
    assert page.status_code == 200
    for recurring_id, label in (
        ("quartz-one", "Quartz cron · Europe/Berlin"),
        ("unix-one", "Unix cron · UTC"),
        ("macro-one", "Unix cron · UTC"),
    ):
        row = page.text[page.text.index(f'data-recurring="{recurring_id}"') :]
        row = row[: row.index("</tr>")]
        assert f'<span class="muted dialect">{label}</span>' in row, recurring_id
    macro = page.text[page.text.index('data-recurring="macro-one"') :]
    assert "<code>@daily</code>" in macro[: macro.index("</tr>")]  # stored normalised


def test_an_action_whose_audit_row_fails_changes_nothing(
    console: Console, database_url: str
) -> None:
    job_id = ratchet.enqueue_now(add, 1, 2).id
    with refusing(database_url, "ratchet_audit", "1 = 1"):
        done = console.post("/ratchet/jobs/selected", {"action": "cancel", "job_id": str(job_id)})
    assert done.status_code == 500
    found = ratchet.get_job(job_id)
    assert found is not None and found.status == JobStatus.PENDING
