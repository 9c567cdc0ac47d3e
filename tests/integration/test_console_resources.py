"""The console's resource limits and circuit breakers pages through ``app.test_client()``, on
SQLite and PostgreSQL: access, CSRF and origin, the resources page (limits, permits and their
holders, waiting jobs, bounds), setting a limit (validated by ``configure_resource``, audited),
the breakers page from real heartbeats, a reset that reaches the worker, escaping, and GETs that
never write."""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections.abc import Iterator
from urllib.parse import quote

import pytest
import sqlalchemy as sa
from flask import Flask
from werkzeug.test import TestResponse

from flask_ratchet.breaker import Breakers, BreakerSettings, BreakerState
from flask_ratchet.console import present
from flask_ratchet.console.reads import resources as held
from flask_ratchet.maintenance.heartbeat import Heartbeat
from flask_ratchet.resources import Rate, ResourceLimit
from flask_ratchet.schema import node
from flask_ratchet.store.cluster import BREAKER_RESET
from flask_ratchet.store.types import NodeInfo
from tests.apps import add, create_app, db, ratchet
from tests.integration.helpers import count
from tests.integration.test_console import ADMIN, ORIGIN, WRITES, Console, audit_rows

HOSTILE = '<script>alert(1)</script><i hx-get="/ratchet/jobs" hx-trigger="load">x</i>'
SETTINGS = BreakerSettings(window=4, failure_rate=0.5, open_for=60, half_open_calls=1, min_calls=4)
#: Between a node and the permits it holds.
TIMES = "\N{MULTIPLICATION SIGN}"
GETS = ("/ratchet/resources", "/ratchet/breakers")


@pytest.fixture
def app(database_url: str) -> Iterator[Flask]:
    """The test app, with a heartbeat interval long enough that a node written by a test stays
    live (three intervals) however slowly the test runs."""
    app = create_app(database_url, RATCHET_HEARTBEAT_INTERVAL=600)
    with app.app_context():
        app.extensions["ratchet"].ensure_schema()
        yield app
        db.session.remove()
        db.engine.dispose()


@pytest.fixture
def console(app: Flask) -> Console:
    return Console(app.test_client())


def running(n: int, resource: str, node_id: str = "node-a") -> list[uuid.UUID]:
    """``n`` jobs of ``resource`` claimed by ``node_id`` (make them before any PENDING job)."""
    ids = [ratchet.enqueue(add, i, i).with_resource(resource).submit().id for i in range(n)]
    assert sorted(c.job_id for c in ratchet.claim_due(n, node_id)) == sorted(ids)
    return ids


def permit(job_id: uuid.UUID, resource: str, node_id: str = "node-a") -> None:
    """Take a permit for a RUNNING job as its worker would."""
    runtime = ratchet.runtime
    with runtime.store.begin(runtime.engine) as conn:
        runtime.store.resources.acquire_permit(conn, job_id, resource, node_id)


def pending(n: int, resource: str | None) -> list[uuid.UUID]:
    builders = []
    for i in range(n):
        builder = ratchet.enqueue(add, i, i)
        builders.append(builder.with_resource(resource) if resource else builder)
    return [h.id for h in ratchet.enqueue_many(builders)]


def row_of(page: TestResponse, attribute: str, value: str) -> str:
    """The ``<tr>`` (or ``<tbody>``) whose ``attribute`` is ``value``, as text."""
    start = page.text.index(f'{attribute}="{value}"')
    end = page.text.index("</tbody>" if attribute == "data-service" else "</tr>", start)
    return page.text[start:end]


def failing(service: str, breakers: Breakers) -> None:
    """Open ``service``'s breaker in ``breakers`` with real failed calls."""
    breaker = breakers.get(service, SETTINGS)
    assert breaker is not None
    for _ in range(SETTINGS.min_calls):
        assert breaker.allow() is None
        breaker.record(success=False)
    assert breaker.state == BreakerState.OPEN


def worker_beat(node_id: str, breakers: Breakers) -> Heartbeat:
    """A worker's heartbeat publishing ``breakers``, beaten once."""
    runtime = ratchet.runtime
    info = NodeInfo(node_id, "host-" + node_id, 4242, "test", 2)
    beat = Heartbeat(runtime.store, runtime.engine, info, 60, threading.Event(), breakers=breakers)
    beat.beat()
    return beat


def limit_of(name: str) -> ResourceLimit | None:
    runtime = ratchet.runtime
    with runtime.engine.connect() as conn:
        return runtime.store.resources.get_resource_limit(conn, name)


def stranger_post(console: Console, url: str, form: dict[str, str]) -> TestResponse:
    """A client without the console's cookie, posting a token it read elsewhere."""
    stranger = console.client.application.test_client()
    return stranger.post(url, headers=ADMIN | ORIGIN, data=form | {"csrf_token": console.token})


# -- access ------------------------------------------------------------------------------------


def test_every_new_url_is_403_without_auth(database_url: str) -> None:
    app = create_app(database_url, RATCHET_CONSOLE_AUTH=None)
    with app.app_context():
        app.extensions["ratchet"].ensure_schema()
    client = app.test_client()
    for url in (*GETS, "/ratchet/resources/limit?name=api", "/ratchet/breakers/reset?service=s"):
        assert client.get(url, headers=ADMIN).status_code == 403, url
    form = {"name": "api", "max_concurrent": "2", "retry_delay": "1", "service": "s"}
    for url in ("/ratchet/resources/limit", "/ratchet/breakers/reset"):
        assert client.post(url, headers=ADMIN | ORIGIN, data=form).status_code == 403, url
    with app.app_context():
        assert count("ratchet_resource_limit") == 0 and count("ratchet_audit") == 0
        db.engine.dispose()


def test_read_role_sees_resources_and_breakers_and_can_act_on_nothing(app: Flask) -> None:
    ratchet.configure_resource("api", 2, 3)
    breakers = Breakers()
    failing("stripe", breakers)
    worker_beat("n-1", breakers)
    reader = Console(app.test_client(), role="read")
    for url in (
        *GETS,
        "/ratchet/resources/limit?name=api",
        "/ratchet/breakers/reset?service=stripe",
    ):
        page = reader.get(url)
        assert page.status_code == 200, url
        assert "data-action" not in page.text and '<form method="post"' not in page.text, url
    assert "api" in reader.get("/ratchet/resources").text
    assert "stripe" in reader.get("/ratchet/breakers").text
    assert "<th>Actions</th>" not in reader.get("/ratchet/resources").text
    limit = {"name": "api", "max_concurrent": "5", "retry_delay": "1"}
    assert reader.post("/ratchet/resources/limit", limit).status_code == 403
    assert reader.post("/ratchet/breakers/reset", {"service": "stripe"}).status_code == 403
    assert limit_of("api") == ResourceLimit("api", 2, 3.0)
    assert count("ratchet_audit") == 0


@pytest.mark.parametrize(
    ("url", "form"),
    [
        ("/ratchet/resources/limit", {"name": "api", "max_concurrent": "9", "retry_delay": "1"}),
        ("/ratchet/breakers/reset", {"service": "stripe"}),
    ],
)
def test_actions_need_the_csrf_token_and_this_origin(
    console: Console, url: str, form: dict[str, str]
) -> None:
    ratchet.configure_resource("api", 2, 3)
    breakers = Breakers()
    failing("stripe", breakers)
    worker_beat("n-1", breakers)
    client = console.client
    with client.application.app_context():
        refused = [
            client.post(url, headers=ADMIN | ORIGIN, data=form),  # no token
            client.post(url, headers=ADMIN | ORIGIN, data=form | {"csrf_token": "x" * 43}),
            client.post(url, headers=ADMIN | ORIGIN | {"X-Ratchet-CSRF": "y" * 43}, data=form),
            client.post(url, headers=ADMIN, data=form | {"csrf_token": console.token}),
            client.post(
                url,
                headers=ADMIN | {"Origin": "https://evil.example"},
                data=form | {"csrf_token": console.token},
            ),
            client.post(
                url,
                headers=ADMIN | {"Referer": "http://evil.example/ratchet/"},
                data=form | {"csrf_token": console.token},
            ),
        ]
        stolen = stranger_post(console, url, form)
    assert [r.status_code for r in refused] == [403] * len(refused)
    assert stolen.status_code == 403
    assert limit_of("api") == ResourceLimit("api", 2, 3.0)
    assert count("ratchet_audit") == 0
    assert console.post(url, form).status_code == 200  # the same form from the console's page
    assert len(audit_rows()) == 1


# -- resources ---------------------------------------------------------------------------------


def test_resources_page_shows_limits_permits_holders_and_waiting_jobs(console: Console) -> None:
    ratchet.configure_resource("payment-api", 2, 1.5)
    ratchet.configure_resource("idle-api", 4)
    first, second = running(2, "payment-api", "node-a")
    permit(first, "payment-api", "node-a")
    permit(second, "payment-api", "node-a")
    (third,) = running(1, "payment-api", "node-b")
    (free,) = running(1, "unlimited-api", "node-b")
    permit(free, "unlimited-api", "node-b")  # no limit: nothing is held
    pending(3, "payment-api")
    pending(2, None)
    worker_beat("node-a", Breakers())  # node-a is live, node-b has no node row: silent
    page = console.get("/ratchet/resources")
    assert page.status_code == 200
    names = re.findall(r'<tr data-resource="([^"]+)"', page.text)
    assert names == ["idle-api", "payment-api", "unlimited-api"]
    paid = row_of(page, "data-resource", "payment-api")
    assert "2 / 2" in paid and ">full<" in paid and "1.5 s" in paid
    assert f'href="/ratchet/jobs?node=node-a"><bdi>node-a</bdi></a> {TIMES} 2' in paid
    assert "silent" not in paid
    assert '<td class="waiting">3</td>' in paid  # 2 of the 3 running hold one; none started
    assert '>3 <span class="muted">(0 started · 3 waiting)</span></td>' in paid
    idle = row_of(page, "data-resource", "idle-api")
    assert "0 / 4" in idle and "full" not in idle and ">none<" in idle
    assert '<td class="waiting">0</td>' in idle and "5 s" in idle
    unlimited = row_of(page, "data-resource", "unlimited-api")
    assert "no limit" in unlimited and "Set a limit…" in unlimited
    assert "Every PENDING job (5) was looked at" in page.text
    assert 'hx-trigger="every 5s, ratchet-changed from:body"' in page.text  # live
    assert 'aria-current="page">Resources' in page.text
    # A permit held by a node that no longer beats is marked, for orphan recovery to release.
    ratchet.configure_resource("unlimited-api", 1)
    permit(third, "payment-api", "node-b")  # the limit is full: refused, nothing held
    permit(free, "unlimited-api", "node-b")
    later = row_of(console.get("/ratchet/resources"), "data-resource", "unlimited-api")
    assert f"node-b</bdi></a> {TIMES} 1" in later and ">silent<" in later and "1 / 1" in later
    one = console.get("/ratchet/resources/limit?name=payment-api")
    assert one.status_code == 200 and "2 at once, retry after 1.5 s" in one.text
    assert 'name="max_concurrent" type="number" min="1" step="1" value="2"' in one.text
    assert 'aria-current="page">Resources' in one.text
    fresh = console.get("/ratchet/resources/limit?name=new-api")
    assert fresh.status_code == 200 and "none: its jobs run without a permit" in fresh.text
    assert console.get("/ratchet/resources/limit").status_code == 404
    assert console.get("/ratchet/resources/limit?name=" + "x" * 101).status_code == 404


def test_waiting_counts_and_the_list_are_bounded(
    console: Console, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("a-api", "b-api", "c-api"):
        ratchet.configure_resource(name, 1)
    older = pending(3, "a-api")
    pending(2, None)
    pending(2, "b-api")
    monkeypatch.setattr(held, "WAITING_WINDOW", 4)
    page = console.get("/ratchet/resources")
    # Only the newest four PENDING jobs are looked at: two of b-api, none of a-api's.
    assert '<td class="waiting">2+</td>' in row_of(page, "data-resource", "b-api")
    assert '<td class="waiting">0+</td>' in row_of(page, "data-resource", "a-api")
    assert "Counted among the newest 4 PENDING jobs only" in page.text
    monkeypatch.setattr(held, "WAITING_WINDOW", 100)
    monkeypatch.setattr(held, "MAX_RESOURCES", 2)
    page = console.get("/ratchet/resources")
    assert re.findall(r'<tr data-resource="([^"]+)"', page.text) == ["a-api", "b-api"]
    assert "More than 2 resources: the first 2 by name are listed." in page.text
    assert '<td class="waiting">3</td>' in row_of(page, "data-resource", "a-api")
    assert ratchet.cancel_job(older[0])  # a canceled job waits for nothing
    assert '<td class="waiting">2</td>' in row_of(
        console.get("/ratchet/resources"), "data-resource", "a-api"
    )
    assert present.waiting(held.Waiting(1001, True)) == "1,000+"
    assert present.waiting(held.Waiting(1000, True)) == "1,000"
    assert present.waiting(held.Waiting(7, False)) == "7+"


def test_setting_a_limit_is_validated_audited_and_shown(console: Console) -> None:
    created = console.post(
        "/ratchet/resources/limit",
        {"name": "payment-api", "max_concurrent": "3", "retry_delay": "2.5"},
    )
    assert created.status_code == 200 and "<html" in created.text  # without JS: a page
    assert "at most 3 at once, retry after 2.5 s (it had no limit)" in created.text
    assert 'href="/ratchet/resources"' in created.text
    assert limit_of("payment-api") == ResourceLimit("payment-api", 3, 2.5)
    changed = console.post(
        "/ratchet/resources/limit",
        {"name": "payment-api", "max_concurrent": " 5 ", "retry_delay": "1"},
        htmx=True,
    )
    assert changed.status_code == 200 and "<html" not in changed.text
    assert changed.headers["HX-Trigger"] == "ratchet-changed"
    assert "at most 5 at once, retry after 1 s (was 3 at once, 2.5 s)" in changed.text
    same = console.post(
        "/ratchet/resources/limit",
        {"name": "payment-api", "max_concurrent": "5", "retry_delay": "1.0"},
        htmx=True,
    )
    assert "already had this limit" in same.text
    assert limit_of("payment-api") == ResourceLimit("payment-api", 5, 1.0)
    # configure_resource's own errors, as a notice; nothing is written, not even an audit row.
    for form, error in (
        ({"max_concurrent": "0", "retry_delay": "1"}, "must be a whole number &gt;= 1, got 0"),
        ({"max_concurrent": "2.5", "retry_delay": "1"}, "got 2.5"),
        ({"max_concurrent": "abc", "retry_delay": "1"}, "got &#39;abc&#39;"),
        ({"max_concurrent": "", "retry_delay": "1"}, "needs max_concurrent, rate or both"),
        ({"rate": "fast", "retry_delay": "1"}, "got &#39;fast&#39;"),
        ({"max_concurrent": "2", "retry_delay": "0"}, "must be a positive number"),
        ({"max_concurrent": "2", "retry_delay": "nan"}, "got nan"),
        ({"max_concurrent": "2", "retry_delay": "-1"}, "got -1"),
        ({"max_concurrent": "2"}, "got &#39;&#39;"),
    ):
        refused = console.post(
            "/ratchet/resources/limit", {"name": "payment-api", **form}, htmx=True
        )
        assert refused.status_code == 400, form
        assert 'class="notice warn"' in refused.text and error in refused.text, form
        assert refused.headers["HX-Retarget"] == "#notice"
    for name in ("", "x" * 101):
        refused = console.post(
            "/ratchet/resources/limit", {"name": name, "max_concurrent": "2", "retry_delay": "1"}
        )
        assert refused.status_code == 400 and "a resource name must be" in refused.text
    assert limit_of("payment-api") == ResourceLimit("payment-api", 5, 1.0)
    assert limit_of("x" * 101) is None and count("ratchet_resource_limit") == 1
    rows = audit_rows()
    assert [(r.action, r.scope, r.target, r.requested, r.changed) for r in rows] == [
        ("set-limit", "resource", "payment-api", 1, 1),
        ("set-limit", "resource", "payment-api", 1, 1),
        ("set-limit", "resource", "payment-api", 1, 0),
    ]
    assert {r.role for r in rows} == {"admin"} and rows[0].actor == "127.0.0.1"
    page = console.get("/ratchet/resources")
    paid = row_of(page, "data-resource", "payment-api")
    assert "0 / 5" in paid and '<td class="nowrap">1 s</td>' in paid
    assert 'data-action="set-limit"' in page.text  # the form for a new resource
    overview = console.get("/ratchet/").text  # recent actions name the resource
    assert "resource <a" in overview and "<code><bdi>payment-api</bdi></code>" in overview


# -- circuit breakers --------------------------------------------------------------------------


def test_breakers_page_shows_each_live_worker_and_the_worst_state(console: Console) -> None:
    one, two = Breakers(), Breakers()
    failing("stripe", one)
    ok = two.get("stripe", SETTINGS)
    assert ok is not None
    for success in (False, True):  # half of two calls failed: under min_calls, still CLOSED
        assert ok.allow() is None
        ok.record(success=success)
    assert two.get("mailer", SETTINGS) is not None
    worker_beat("n-1", one)
    worker_beat("n-2", two)
    worker_beat("n-quiet", Breakers())
    stale = Breakers()
    failing("ghost", stale)
    worker_beat("n-stale", stale)
    with ratchet.transaction() as conn:  # silent for a day: not live
        conn.execute(
            sa.update(node)
            .where(node.c.node_id == "n-stale")
            .values(last_heartbeat=ratchet.runtime.store.now(conn) - held.RESET_LOOKBACK)
        )
    page = console.get("/ratchet/breakers")
    assert page.status_code == 200
    assert re.findall(r'<tbody data-service="([^"]+)"', page.text) == ["mailer", "stripe"]
    assert "ghost" not in page.text
    stripe = row_of(page, "data-service", "stripe")
    assert 'data-state="OPEN"' in stripe and "worst of 2 workers" in stripe
    assert stripe.count('class="pill breaker-open"') == 2 and "breaker-closed" in stripe
    assert "n-1" in stripe and "n-2" in stripe and "n-quiet" not in stripe
    assert "50 %" in stripe and "1 of 2 failed" in stripe  # n-2's window
    half_open_in = re.search(r'<td class="nowrap">(\d+) s</td>', stripe)
    assert half_open_in is not None and 0 < int(half_open_in.group(1)) <= 60
    assert 'data-action="reset"' in stripe and "Reset…" in stripe
    mailer = row_of(page, "data-service", "mailer")
    assert 'data-state="CLOSED"' in mailer and "1 worker" in mailer
    assert "no calls in the window" in mailer
    assert "per worker process" in page.text and 'aria-current="page">Breakers' in page.text
    assert 'hx-trigger="every 5s, ratchet-changed from:body"' in page.text


def test_a_reset_is_confirmed_audited_and_reaches_every_worker(console: Console) -> None:
    one, two = Breakers(), Breakers()
    failing("stripe", one)
    failing("stripe", two)
    beats = [worker_beat("n-1", one), worker_beat("n-2", two)]
    confirm = console.get("/ratchet/breakers/reset?service=stripe")
    assert (
        confirm.status_code == 200 and "Reset the circuit breaker of this service?" in confirm.text
    )
    assert "each of these 2 workers" in confirm.text
    assert 'action="/ratchet/breakers/reset"' in confirm.text
    assert count("ratchet_audit") == 0  # asking changes nothing
    done = console.post("/ratchet/breakers/reset", {"service": "stripe"})
    assert done.status_code == 200 and "<html" in done.text
    assert "requested at" in done.text and "for 2 workers" in done.text
    (row,) = audit_rows()
    assert (row.action, row.scope, row.target, row.requested, row.changed) == (
        BREAKER_RESET,
        "breaker",
        "stripe",
        2,
        2,
    )
    page = console.get("/ratchet/breakers")
    stripe = row_of(page, "data-service", "stripe")
    assert "Reset requested at" in stripe and "applied at each worker's next heartbeat" in stripe
    assert stripe.count(">reset pending<") == 2
    beats[0].beat()  # n-1 reads the reset; it publishes the state from before it
    assert one.get("stripe", SETTINGS).state == BreakerState.CLOSED  # type: ignore[union-attr]
    assert two.get("stripe", SETTINGS).state == BreakerState.OPEN  # type: ignore[union-attr]
    stripe = row_of(console.get("/ratchet/breakers"), "data-service", "stripe")
    assert stripe.count(">reset pending<") == 1
    for beat in beats:
        beat.beat()
        beat.beat()
    stripe = row_of(console.get("/ratchet/breakers"), "data-service", "stripe")
    assert 'data-state="CLOSED"' in stripe and ">reset pending<" not in stripe
    assert stripe.count('class="pill breaker-closed"') == 3  # the service and both workers
    assert "Reset requested at" in stripe
    again = console.post("/ratchet/breakers/reset", {"service": "stripe"}, htmx=True)
    assert again.headers["HX-Trigger"] == "ratchet-changed" and "<html" not in again.text
    assert len(audit_rows()) == 2


def test_a_service_no_live_worker_reports_is_not_reset(console: Console) -> None:
    worker_beat("n-1", Breakers())
    confirm = console.get("/ratchet/breakers/reset?service=nobody")
    assert confirm.status_code == 200 and "there is nothing to reset" in confirm.text
    assert "data-action" not in confirm.text
    refused = console.post("/ratchet/breakers/reset", {"service": "nobody"}, htmx=True)
    assert refused.status_code == 200 and 'class="notice warn"' in refused.text
    assert "was not reset: no live worker reports one" in refused.text
    assert count("ratchet_audit") == 0  # the row would be a reset order all the same
    assert console.post("/ratchet/breakers/reset", {}).status_code == 400
    assert console.post("/ratchet/breakers/reset", {"service": "s" * 256}).status_code == 400
    assert console.get("/ratchet/breakers/reset").status_code == 404
    empty = console.get("/ratchet/breakers")
    assert "No live worker reports a circuit breaker (1 live worker)" in empty.text


def test_malformed_published_breakers_are_left_out(console: Console) -> None:
    breakers = Breakers()
    failing("stripe", breakers)
    worker_beat("n-1", breakers)
    junk = {
        "breakers": {
            "weird": {"state": "MELTED"},
            "listy": {"state": ["OPEN"]},
            "odd": {"state": "HALF_OPEN", "calls": "many", "failure_rate": float("inf")},
        }
    }
    for node_id, info in (("n-2", json.dumps(junk)), ("n-3", "not json"), ("n-4", "[1]")):
        worker_beat(node_id, Breakers())
        with ratchet.transaction() as conn:
            conn.execute(sa.update(node).where(node.c.node_id == node_id).values(info=info))
    page = console.get("/ratchet/breakers")
    assert page.status_code == 200
    assert re.findall(r'<tbody data-service="([^"]+)"', page.text) == ["odd", "stripe"]
    odd = row_of(page, "data-service", "odd")
    assert 'data-state="HALF_OPEN"' in odd and "0 trials running, 0 succeeded" in odd


# -- escaping and reads ------------------------------------------------------------------------


def test_hostile_resource_and_service_names_are_inert(console: Console) -> None:
    ratchet.configure_resource(HOSTILE, 1)
    (job_id,) = running(1, HOSTILE, HOSTILE[:60])
    permit(job_id, HOSTILE, HOSTILE[:60])
    pending(1, HOSTILE)
    breakers = Breakers()
    failing(HOSTILE, breakers)
    worker_beat(HOSTILE[:60], breakers)
    limit = {"name": HOSTILE, "max_concurrent": "2", "retry_delay": "1"}
    pages = [
        console.get("/ratchet/resources"),
        console.get("/ratchet/resources/limit?name=" + quote(HOSTILE)),
        console.get("/ratchet/breakers"),
        console.get("/ratchet/breakers/reset?service=" + quote(HOSTILE)),
        console.post("/ratchet/resources/limit", limit),
        console.post("/ratchet/resources/limit", limit, htmx=True),
        console.post("/ratchet/resources/limit", limit | {"max_concurrent": "x"}, htmx=True),
        console.post("/ratchet/resources/limit", limit | {"max_concurrent": "x"}),
        console.post("/ratchet/breakers/reset", {"service": HOSTILE}),
        console.post("/ratchet/breakers/reset", {"service": HOSTILE}, htmx=True),
        console.get("/ratchet/"),
    ]
    for page in pages:
        assert page.status_code in (200, 400), page.request.path
        text = page.text
        assert "<script>alert" not in text, page.request.path
        assert 'hx-trigger="load"' not in text and "<i hx-get" not in text, page.request.path
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt;&lt;i hx-get=&#34;/ratchet/jobs&#34;"
    for page in pages[:4]:
        assert escaped in page.text, page.request.path
    assert limit_of(HOSTILE) == ResourceLimit(HOSTILE, 2, 1.0)  # set by its exact name
    assert [r.target for r in audit_rows()] == [HOSTILE, HOSTILE, HOSTILE, HOSTILE]


def test_gets_never_write(console: Console) -> None:
    ratchet.configure_resource("api", 1)
    (job_id,) = running(1, "api")
    permit(job_id, "api")
    pending(2, "api")
    breakers = Breakers()
    failing("stripe", breakers)
    worker_beat("node-a", breakers)
    console.post("/ratchet/breakers/reset", {"service": "stripe"})
    before = len(audit_rows())
    statements: list[str] = []

    def record(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        statements.append(statement)

    sa.event.listen(sa.Engine, "before_cursor_execute", record)
    try:
        for url in (
            *GETS,
            "/ratchet/resources/limit?name=api",
            "/ratchet/resources/limit?name=new",
            "/ratchet/breakers/reset?service=stripe",
            "/ratchet/breakers/reset?service=nobody",
        ):
            assert console.get(url).status_code == 200, url
    finally:
        sa.event.remove(sa.Engine, "before_cursor_execute", record)
    assert statements, "the listener saw no SQL at all"
    assert [s for s in statements if WRITES.match(s) or "FOR UPDATE" in s.upper()] == []
    assert len(audit_rows()) == before
    assert limit_of("new") is None


def test_a_rate_is_set_and_shown(console: Console) -> None:
    rated = console.post(
        "/ratchet/resources/limit",
        {"name": "rated-api", "max_concurrent": "", "rate": "10/s", "retry_delay": "1"},
        htmx=True,
    )
    assert "at most 10/s, retry after 1 s (it had no limit)" in rated.text
    assert limit_of("rated-api") == ResourceLimit("rated-api", None, 1.0, Rate(10, 1.0))
    listed = row_of(console.get("/ratchet/resources"), "data-resource", "rated-api")
    assert '<td class="nowrap rate">0 / 10/s</td>' in listed and "no limit" in listed
    page = console.get("/ratchet/resources/limit?name=rated-api").text
    assert "10/s: 0 started in the window" in page and 'name="rate"' in page
    assert 'value="10/s"' in page
