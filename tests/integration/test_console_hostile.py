"""Hostile request values through the console, on SQLite and PostgreSQL: every query and form
value a 400 naming the parameter (never a 500), the wall before routing (any URL under the prefix
is a 403 without a role), the console's headers on every response, errors included, and a
property test of arbitrary query strings and forms through every route."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from flask import Flask, g, request
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from werkzeug.test import TestResponse

from flask_ratchet.console import filters
from flask_ratchet.states import JobStatus
from tests.apps import add, create_app, db, ratchet
from tests.integration.helpers import count, job_in
from tests.integration.test_console import ADMIN, ORIGIN, Console, master

#: U+00B2 SUPERSCRIPT TWO: ``str.isdigit()`` says yes, ``int()`` refuses it.
SUPERSCRIPT_TWO = "\N{SUPERSCRIPT TWO}"
#: U+0663 ARABIC-INDIC DIGIT THREE: ``int()`` reads it as 3.
ARABIC_THREE = "\N{ARABIC-INDIC DIGIT THREE}"
#: More digits than ``int()`` converts (4,300).
HUGE = "9" * 5000
#: Each a real instant whose offset takes it past the ends of the calendar in UTC.
PAST_THE_END = "9999-12-31T23:59:59-01:00"
BEFORE_THE_START = "0001-01-01T00:00+01:00"
#: Upper-cased, "LOWEST": a priority name only outside ASCII.
LONG_S_LOWEST = "lowe\N{LATIN SMALL LETTER LONG S}t"
ZERO_ID = "00000000-0000-0000-0000-000000000000"
HEADERS = ("Content-Security-Policy", "X-Content-Type-Options", "X-Frame-Options")


def q(text: str) -> str:
    """``text`` percent-encoded for a URL, lone surrogates as the bytes they would be."""
    return quote(text.encode("utf-8", "surrogatepass"), safe="")


def assert_console_headers(response: TestResponse, what: str) -> None:
    for name in HEADERS:
        assert name in response.headers, (what, response.status_code, name)
    assert response.headers["X-Content-Type-Options"] == "nosniff", what


@pytest.fixture
def console(app: Flask) -> Console:
    return Console(app.test_client())


# -- every value parsed defensively --------------------------------------------------------------


def test_hostile_query_values_are_a_400_naming_the_parameter(console: Console) -> None:
    batch = ratchet.enqueue_batch("nightly").add(add, 1, 2).submit().id
    refused = {
        # Non-ASCII digits, numbers int() refuses, numbers no column holds.
        f"/ratchet/jobs?size={q(SUPERSCRIPT_TWO)}": "size must be one of",
        f"/ratchet/jobs?size={HUGE}": "size must be one of",
        f"/ratchet/batches?size={q(SUPERSCRIPT_TWO)}": "size must be one of",
        f"/ratchet/batches/{batch}?size={q(SUPERSCRIPT_TWO)}": "size must be one of",
        f"/ratchet/jobs/bulk?action=retry&status=FAILED&size={HUGE}": "size must be one of",
        f"/ratchet/jobs?priority={q(SUPERSCRIPT_TWO)}": "priority must be",
        f"/ratchet/jobs?priority={HUGE}": "priority must be",
        f"/ratchet/jobs?priority={q(ARABIC_THREE)}": "priority must be",
        f"/ratchet/jobs?priority={q(LONG_S_LOWEST)}": "priority must be",
        f"/ratchet/jobs?sort=priority&cursor=p.{q(ARABIC_THREE)}.{ZERO_ID}": "bad cursor",
        "/ratchet/jobs/new-count?newest=garbage": "newest must be a job id",
        # Dates at the ends of the calendar, with offsets.
        f"/ratchet/jobs?created_after={q(PAST_THE_END)}": "created_after must fall between",
        f"/ratchet/jobs?created_before={q(BEFORE_THE_START)}": "created_before must fall",
        f"/ratchet/jobs/bulk?action=retry&created_after={q(PAST_THE_END)}": "created_after",
        f"/ratchet/jobs/new-count?newest={ZERO_ID}&created_before={q(BEFORE_THE_START)}": (
            "created_before"
        ),
        # NUL characters, which PostgreSQL refuses in a query parameter, in any value or name.
        **{
            f"/ratchet/jobs?{name}=a%00b": f"{name} must not contain a NUL"
            for name in ("task", "tag", "business_key", "node", "recurring", "q")
        },
        "/ratchet/jobs?x%00=1": "x\\x00 must not contain a NUL",
        "/ratchet/jobs/bulk?action=retry&task=%00": "task must not contain a NUL",
        "/ratchet/recurring/cancel?id=a%00": "id must not contain a NUL",
        "/ratchet/resources/limit?name=a%00": "name must not contain a NUL",
        "/ratchet/breakers/reset?service=a%00": "service must not contain a NUL",
    }
    for url, notice in refused.items():
        page = console.get(url)
        assert page.status_code == 400, (url, page.status_code)
        assert notice in page.text, (url, page.text[-400:])
        assert_console_headers(page, url)
    # Under htmx, the page's notice area.
    with console.client.application.app_context():
        fragment = console.client.get(
            f"/ratchet/jobs?size={q(SUPERSCRIPT_TWO)}", headers=ADMIN | {"HX-Request": "true"}
        )
    assert fragment.status_code == 400 and fragment.headers["HX-Retarget"] == "#notice"
    assert 'class="notice warn"' in fragment.text and "size must be one of" in fragment.text


def test_hostile_form_values_are_a_400_and_write_nothing(console: Console) -> None:
    failed = job_in(JobStatus.FAILED)
    nightly = master("nightly")
    good_limit: dict[str, object] = {"name": "api", "max_concurrent": "2", "retry_delay": "1"}
    bulk: dict[str, object] = {
        "action": "retry",
        "status": "FAILED",
        "bound": str(failed),
        "count": "1",
    }
    refused: list[tuple[str, dict[str, object], str]] = [
        ("/ratchet/recurring/pause", {"id": f"{nightly}\x00"}, "id must not contain a NUL"),
        ("/ratchet/recurring/run", {"id": "\x00"}, "id must not contain a NUL"),
        ("/ratchet/resources/limit", good_limit | {"name": "a\x00"}, "name must not contain"),
        ("/ratchet/breakers/reset", {"service": "a\x00"}, "service must not contain a NUL"),
        ("/ratchet/jobs/bulk", bulk | {"task": "a\x00"}, "task must not contain a NUL"),
        ("/ratchet/jobs/bulk", bulk | {"created_after": PAST_THE_END}, "created_after must"),
        ("/ratchet/jobs/bulk", bulk | {"count": ARABIC_THREE}, "count must be a whole number"),
        ("/ratchet/jobs/bulk", bulk | {"count": HUGE}, "count must be a whole number"),
        (
            "/ratchet/jobs/selected",
            {"action": "retry", "job_id": "\N{ARABIC-INDIC DIGIT ZERO}" * 32},
            "job_id must be job ids",
        ),
        (
            "/ratchet/resources/limit",
            good_limit | {"max_concurrent": str(2**31)},
            "max_concurrent must be at most 2147483647",
        ),
        ("/ratchet/resources/limit", good_limit | {"max_concurrent": ARABIC_THREE}, "got"),
        ("/ratchet/resources/limit", good_limit | {"retry_delay": HUGE}, "at most 40 char"),
    ]
    for url, form, notice in refused:
        answer = console.post(url, form)
        assert answer.status_code == 400, (url, form, answer.status_code)
        assert notice in answer.text, (url, form, answer.text[-400:])
        assert_console_headers(answer, url)
    assert ratchet.get_job(failed).status == JobStatus.FAILED  # type: ignore[union-attr]
    assert count("ratchet_audit") == 0 and count("ratchet_resource_limit") == 0


def test_a_malformed_origin_is_refused(console: Console) -> None:
    failed = job_in(JobStatus.FAILED)
    with console.client.application.app_context():
        answer = console.client.post(
            f"/ratchet/jobs/{failed}/retry",
            headers=ADMIN | {"Origin": "http://[x"},
            data={"csrf_token": console.token},
        )
    assert answer.status_code == 403
    assert ratchet.get_job(failed).status == JobStatus.FAILED  # type: ignore[union-attr]


# -- the wall before routing ---------------------------------------------------------------------

#: Under the prefix but matching no route, or no route for the method.
UNROUTED = (
    ("GET", "/ratchet/nope"),
    ("GET", "/ratchet/jobs/x/y/z"),
    ("GET", f"/ratchet/jobs/{ZERO_ID}/retry"),
    ("GET", "/ratchet/recurring/pause"),
    ("GET", "/ratchet/resources/limit/x"),
    ("POST", "/ratchet/nope"),
    ("PUT", "/ratchet/jobs"),
    ("DELETE", f"/ratchet/jobs/{ZERO_ID}"),
)


def test_any_url_under_the_prefix_is_403_without_a_role(app: Flask) -> None:
    client = app.test_client()
    routed = (
        ("GET", "/ratchet"),  # the app's slash redirect
        ("GET", "//ratchet//jobs"),  # slashes merged, it is the job list
        ("GET", "/ratchet/static/console.css"),
    )
    for method, url in (*UNROUTED, *routed):
        for headers in ({}, {"X-Role": "root"}):
            # The path as a server passes it on: a test client would read "//ratchet" as a host.
            answer = client.open(
                "/", method=method, headers=headers | ORIGIN, environ_overrides={"PATH_INFO": url}
            )
            assert answer.status_code == 403, (method, url, headers, answer.status_code)
            assert_console_headers(answer, url)
    # The host app's own URLs beside the prefix are none of the console's business.
    assert client.get("/ratchet-old").status_code == 404
    assert "Content-Security-Policy" not in client.get("/ratchet-old").headers


def test_with_a_role_unknown_urls_are_404_and_wrong_methods_405(console: Console) -> None:
    expected = {
        "/ratchet/nope": 404,
        "/ratchet/jobs/x/y/z": 404,
        f"/ratchet/jobs/{ZERO_ID}/retry": 405,
        "/ratchet/recurring/pause": 405,
    }
    for url, status in expected.items():
        answer = console.get(url)
        assert answer.status_code == status, url
        assert_console_headers(answer, url)


def test_the_host_apps_own_hooks_run_before_a_page_asks_for_the_role(database_url: str) -> None:
    app = create_app(database_url, RATCHET_CONSOLE_AUTH=lambda request: g.get("user_role"))

    @app.before_request
    def name_the_user() -> None:
        g.user_role = request.headers.get("X-User-Role")

    client = app.test_client()
    assert client.get("/ratchet/", headers={"X-User-Role": "read"}).status_code == 200
    assert client.get("/ratchet/").status_code == 403
    with app.app_context():
        db.engine.dispose()


def test_a_console_closed_to_everyone_is_403_everywhere(database_url: str) -> None:
    app = create_app(database_url, RATCHET_CONSOLE_AUTH=None)
    client = app.test_client()
    for method, url in UNROUTED:
        assert client.open(url, method=method, headers=ADMIN | ORIGIN).status_code == 403, url
    with app.app_context():
        db.engine.dispose()


def test_server_errors_carry_the_console_headers(app: Flask) -> None:
    def broken() -> str:
        raise RuntimeError("a page that fails")

    app.view_functions["ratchet_console.nodes"] = broken
    answer = Console(app.test_client()).get("/ratchet/nodes")
    assert answer.status_code == 500
    assert_console_headers(answer, "/ratchet/nodes")


# -- property: arbitrary query strings and forms -------------------------------------------------

#: Every GET route with the parameters it reads; ``{job}`` and ``{batch}`` are path ids.
GET_ROUTES: dict[str, tuple[str, ...]] = {
    "/ratchet/": ("window",),
    "/ratchet/alarms": (),
    "/ratchet/jobs": (*filters.FILTER_NAMES, "size", "cursor"),
    "/ratchet/jobs/new-count": (*filters.FILTER_NAMES, "newest"),
    "/ratchet/jobs/{job}": (),
    "/ratchet/jobs/bulk": (*filters.FILTER_NAMES, "action", "size", "cursor"),
    "/ratchet/dead-letters": (),
    "/ratchet/nodes": (),
    "/ratchet/audit": ("actor", "what", "size", "cursor"),
    "/ratchet/metrics": (),
    "/ratchet/queues": (),
    "/ratchet/recurring": ("canceled",),
    "/ratchet/recurring/cancel": ("id",),
    "/ratchet/batches": ("state", "size", "cursor"),
    "/ratchet/batches/{batch}": ("status", "size", "cursor"),
    "/ratchet/batches/{batch}/{action}": (),
    "/ratchet/workflows": ("size", "cursor"),
    "/ratchet/resources": (),
    "/ratchet/resources/limit": ("name",),
    "/ratchet/breakers": (),
    "/ratchet/breakers/reset": ("service",),
}
#: Every POST route with the form fields it reads; ``{action}`` is a path segment.
POST_ROUTES: dict[str, tuple[str, ...]] = {
    "/ratchet/jobs/{job}/{action}": ("next",),
    "/ratchet/jobs/{job}/signal": ("decision", "payload", "reason"),
    "/ratchet/jobs/selected": ("action", "job_id", "next"),
    "/ratchet/jobs/bulk": (*filters.FILTER_NAMES, "action", "bound", "count", "next"),
    "/ratchet/batches/{batch}/{action}": ("count",),
    "/ratchet/recurring/{action}": ("id", "next"),
    "/ratchet/resources/limit": ("name", "max_concurrent", "rate", "retry_delay"),
    "/ratchet/breakers/reset": ("service",),
    "/ratchet/queues/{action}": ("name",),
}
#: Routes where a role may get a 404: the id they name does not exist.
NAMES_A_ROW = frozenset(
    {
        "/ratchet/jobs/{job}",
        "/ratchet/batches/{batch}",
        "/ratchet/batches/{batch}/{action}",
        "/ratchet/recurring/cancel",
        "/ratchet/resources/limit",
        "/ratchet/breakers/reset",
        "/ratchet/jobs/{job}/{action}",
        "/ratchet/jobs/{job}/signal",
    }
)

SPECIAL = (
    "",
    "0",
    "-1",
    "+3",
    "3.5",
    "1e400",
    "nan",
    "inf",
    SUPERSCRIPT_TWO,
    ARABIC_THREE,
    "\N{FULLWIDTH DIGIT FIVE}0",
    HUGE,
    str(2**31),
    str(2**63),
    str(-(2**63) - 1),
    "\x00",
    "a\x00b",
    PAST_THE_END,
    BEFORE_THE_START,
    "9999-12-31T23:59:59.999999+14:00",
    "0001-01-01T00:00:00-14:00",
    "2026-02-30T25:61",
    ZERO_ID,
    "{" + ZERO_ID + "}",
    "urn:uuid:" + ZERO_ID,
    "\N{ARABIC-INDIC DIGIT ZERO}" * 32,
    f"p.{ARABIC_THREE}.{ZERO_ID}",
    f"p.99999.{ZERO_ID}",
    f"n.{ZERO_ID}",
    f"b.{ZERO_ID}",
    "FAILED",
    "running",
    "priority",
    "HIGH",
    "retry",
    "delete",
    "\ud800",
    "\udfff\ud800x",
    "<script>alert(1)</script>",
    "'; DROP TABLE ratchet_job; --",
    "%",
    "x" * 300,
)
#: Byte sequences a client may send that are no UTF-8 text (a lone surrogate, a stray byte,
#: an overlong slash) or no escape at all.
RAW = ("%ED%A0%80", "%FF", "%C0%AF", "%00", "%", "%zz")


def encoded_values() -> st.SearchStrategy[str]:
    text = st.one_of(
        st.sampled_from(SPECIAL),
        st.text(max_size=20),
        st.integers().map(str),
        st.text(st.characters(categories=["Nd", "No"]), min_size=1, max_size=6),
        st.datetimes(timezones=st.timezones()).map(lambda d: d.isoformat()),
    ).map(q)
    return st.one_of(text, st.tuples(text, st.sampled_from(RAW)).map("".join))


def query_strings(names: tuple[str, ...]) -> st.SearchStrategy[str]:
    key = st.one_of(st.sampled_from(names), st.text(max_size=8)) if names else st.text(max_size=8)
    pair = st.tuples(key.map(q), encoded_values()).map("=".join)
    return st.lists(pair, max_size=6).map("&".join)


ROLES = st.sampled_from([None, "read", "admin"])
#: A path id: the real one (empty), arbitrary text, or bytes that are no text.
SEGMENTS = st.one_of(st.just(""), st.text(max_size=12).map(q), st.sampled_from(RAW))


def path_of(route: str, ids: dict[str, str], segment: str) -> str:
    """``route`` with its path ids: the real ones when ``segment`` is empty, else ``segment``
    in each place."""
    for name, real in ids.items():
        route = route.replace("{" + name + "}", segment or real)
    return route


def allowed(route: str, role: str | None, method: str, segment: str) -> set[int]:
    """The answers a request may get: 2xx, 3xx, 400 or 403; 404 for a row that does not exist
    and, with a made-up path, 404 or 405 as for any unknown URL; 409 for a bulk action that
    must be confirmed again. Never a 500."""
    if role is None or (role == "read" and method == "POST"):
        return {403}
    codes = {200, 204, 301, 302, 303, 307, 308, 400, 403}
    if route in NAMES_A_ROW:
        codes.add(404)
    if segment:
        codes |= {404, 405}
    if route in ("/ratchet/jobs/bulk", "/ratchet/batches/{batch}/{action}") and method == "POST":
        codes.add(409)
    return codes


class Site:
    """The console with something on every page, and a client for each role (the admin's and
    the reader's send the CSRF token of their pages)."""

    def __init__(self, app: Flask) -> None:
        self.app = app
        with app.app_context():
            failed = job_in(JobStatus.FAILED)
            job_in(JobStatus.PENDING)
            master("nightly")
            batch = ratchet.enqueue_batch("nightly").add(add, 1, 2).submit().id
            ratchet.configure_resource("api", 2)
        self.ids = {"job": str(failed), "batch": str(batch), "action": "retry"}
        self.sessions = {role: Console(app.test_client(), role=role) for role in ROLE_NAMES}
        self.anonymous = app.test_client()

    def send(self, role: str | None, method: str, url: str, body: str = "") -> TestResponse:
        headers = dict(ORIGIN)
        client = self.anonymous
        if role is not None:
            session = self.sessions[role]
            client = session.client
            headers |= session.headers | {"X-Ratchet-CSRF": session.token}
        with self.app.app_context():
            return client.open(
                url,
                method=method,
                data=body,
                headers=headers,
                content_type="application/x-www-form-urlencoded",
            )


ROLE_NAMES = ("read", "admin")
PROPERTY = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture
def site(app: Flask) -> Site:
    return Site(app)


@pytest.mark.slow  # hundreds of examples
@PROPERTY
@given(route=st.sampled_from(sorted(GET_ROUTES)), role=ROLES, segment=SEGMENTS, data=st.data())
def test_arbitrary_query_strings_never_answer_500(
    site: Site, route: str, role: str | None, segment: str, data: st.DataObject
) -> None:
    query = data.draw(query_strings(GET_ROUTES[route]), label="query")
    url = f"{path_of(route, site.ids, segment)}?{query}"
    answer = site.send(role, "GET", url)
    assert answer.status_code in allowed(route, role, "GET", segment), (
        url,
        role,
        answer.status_code,
        answer.text[-300:],
    )
    assert_console_headers(answer, url)


@pytest.mark.slow  # hundreds of examples
@PROPERTY
@given(route=st.sampled_from(sorted(POST_ROUTES)), role=ROLES, segment=SEGMENTS, data=st.data())
def test_arbitrary_forms_never_answer_500(
    site: Site, route: str, role: str | None, segment: str, data: st.DataObject
) -> None:
    body = data.draw(query_strings(POST_ROUTES[route]), label="form")
    url = path_of(route, site.ids, segment)
    answer = site.send(role, "POST", url, body)
    assert answer.status_code in allowed(route, role, "POST", segment), (
        url,
        body,
        role,
        answer.status_code,
        answer.text[-300:],
    )
    assert_console_headers(answer, url)


def test_the_property_covers_every_route(app: Flask) -> None:
    def shape(rule: str) -> str:
        for name, placeholder in (("job_id", "job"), ("batch_id", "batch"), ("action", "action")):
            rule = rule.replace(f"<{name}>", "{" + placeholder + "}")
        return rule

    rules = [r for r in app.url_map.iter_rules() if r.endpoint.startswith("ratchet_console.")]
    routed = {
        method: {shape(r.rule) for r in rules if method in (r.methods or ())}
        for method in ("GET", "POST")
    }
    assert routed["GET"] - {"/ratchet/static/<path:filename>"} == set(GET_ROUTES)
    assert routed["POST"] == set(POST_ROUTES)


def test_the_403_page_says_where_access_is_configured(app: Flask) -> None:
    page = app.test_client().get("/ratchet/")
    assert page.status_code == 403
    assert "RATCHET_CONSOLE_AUTH" in page.text and "&#39;read&#39; or &#39;admin&#39;" in page.text
