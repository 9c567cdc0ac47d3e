"""The console's batch and flow pages through ``app.test_client()``, on SQLite and PostgreSQL:
access, the batch list and a batch's page (progress, metrics, follow-ups, children, keyset pages,
filters), the Flow section of the job page (batch, parent, condition, decision, tree), escaping,
and GETs that never write."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask
from werkzeug.test import TestResponse

from flask_ratchet.console import present
from flask_ratchet.console.reads import batches as flows
from flask_ratchet.job import BatchProgress
from flask_ratchet.schema import batch, job, workflow_condition
from tests.apps import add, create_app, db, ratchet
from tests.flow_tasks import batch_item, broken, follow_up, predicate_raises, produce, step
from tests.integration.helpers import count
from tests.integration.test_console import ADMIN, ORIGIN, Console
from tests.integration.test_flows import work

HOSTILE = '<script>alert(1)</script><div hx-get="/ratchet/jobs" hx-trigger="load">x</div>'


@pytest.fixture
def console(app: Flask) -> Console:
    return Console(app.test_client())


def make_batch(name: str, n: int, *, fail_every: int = 0) -> uuid.UUID:
    """A batch of ``n`` children of ``batch_item`` with two follow-ups."""
    builder = ratchet.enqueue_batch(name)
    for i in range(1, n + 1):
        builder.add(batch_item, i, fail_every)
    builder.on_success(follow_up, f"{name} ok").when_success_rate(0.9, follow_up, f"{name} 90%")
    return builder.submit().id


def children_of(batch_id: uuid.UUID) -> list[uuid.UUID]:
    """The batch's children, oldest first."""
    with db.engine.connect() as conn:
        return list(
            conn.execute(
                sa.select(job.c.job_id).where(job.c.batch_id == batch_id).order_by(job.c.job_id)
            ).scalars()
        )


def batch_ids(page: TestResponse) -> list[str]:
    """The batches a batch list shows, in order."""
    return re.findall(r'<tr data-batch="([0-9a-f-]{36})"', page.text)


def child_ids(page: TestResponse) -> list[str]:
    """The children a batch page lists, in order."""
    rows = page.text[page.text.index("<h2>Children") :]
    return re.findall(r'<a class="id" href="/ratchet/jobs/([0-9a-f-]{36})"', rows)


def next_url(page: TestResponse) -> str | None:
    found = re.search(r'rel="next" href="([^"]+)"', page.text)
    return found.group(1).replace("&amp;", "&") if found else None


class TreeParser(HTMLParser):
    """The flow tree of a job page as nested ``(job id, highlighted, [children])``."""

    def __init__(self) -> None:
        super().__init__()
        self.roots: list[Any] = []
        self._stack: list[list[Any]] = []
        self._depth = 0  # <ul> nesting inside the tree; 0 = outside it

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "ul" and (self._depth or found.get("class") == "flow-tree"):
            self._depth += 1
        elif tag == "li" and self._depth and not (found.get("class") or "").startswith("muted"):
            node: list[Any] = [None, found.get("aria-current") == "true", []]
            (self._stack[-1][2] if self._stack else self.roots).append(node)
            self._stack.append(node)
        elif tag == "a" and self._stack and self._stack[-1][0] is None:
            href = found.get("href") or ""
            if "/jobs/" in href:
                self._stack[-1][0] = href.rsplit("/", 1)[1]

    def handle_endtag(self, tag: str) -> None:
        if tag == "ul" and self._depth:
            self._depth -= 1
        elif tag == "li" and self._depth and self._stack:
            self._stack.pop()


def shows_far_future(text: str) -> bool:
    """Whether a page shows the year 9999 (a waiting step's stored due time) as a date; a UUID
    may hold the digits 9999, so those are left out."""
    without_ids = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "", text)
    return re.search(r"\b9999-\d\d-\d\d", without_ids) is not None


def tree(page: TestResponse) -> list[Any]:
    parser = TreeParser()
    parser.feed(page.text)
    return parser.roots


def shape(nodes: list[Any]) -> list[Any]:
    """A tree as ``[(id, [children…]), …]`` (the highlight left out)."""
    return [(n[0], shape(n[2])) for n in nodes]


def highlighted(nodes: list[Any]) -> list[str]:
    out = []
    for n in nodes:
        if n[1]:
            out.append(n[0])
        out += highlighted(n[2])
    return out


# -- access ------------------------------------------------------------------------------------


def test_the_new_pages_are_403_without_auth_and_open_to_the_read_role(database_url: str) -> None:
    closed = create_app(database_url, RATCHET_CONSOLE_AUTH=None)
    with closed.app_context():
        closed.extensions["ratchet"].ensure_schema()
        batch_id = make_batch("visible", 3)
        chain = ratchet.enqueue(step, "a").then(step, "b").submit()
        db.engine.dispose()
    urls = (
        "/ratchet/batches",
        "/ratchet/batches?state=running",
        f"/ratchet/batches/{batch_id}",
        f"/ratchet/batches/{batch_id}?status=PENDING",
        f"/ratchet/jobs/{chain.last}",
    )
    client = closed.test_client()
    for url in urls:
        assert client.get(url, headers=ADMIN).status_code == 403, url
    opened = create_app(database_url)
    with opened.app_context():
        reader = Console(opened.test_client(), role="read")
        for url in urls:
            page = reader.get(url)
            assert page.status_code == 200, url
            assert "data-action" not in page.text and 'name="action"' not in page.text, url
        assert 'aria-current="page">Batches</a>' in reader.get("/ratchet/batches").text
        db.engine.dispose()


def test_gets_on_the_new_pages_never_write(console: Console, app: Flask) -> None:
    batch_id = make_batch("read-only", 4, fail_every=2)
    chain = ratchet.enqueue(produce, 5).then_on_success(follow_up, "x").submit()
    work(app)
    child = children_of(batch_id)[0]
    gets = [
        "/ratchet/batches",
        "/ratchet/batches?state=running&size=25",
        "/ratchet/batches?state=finished",
        f"/ratchet/batches/{batch_id}",
        f"/ratchet/batches/{batch_id}?status=FAILED&size=25",
        f"/ratchet/jobs/{batch_id}",
        f"/ratchet/jobs/{child}",
        f"/ratchet/jobs/{chain.id}",
        f"/ratchet/jobs/{chain.last}",
    ]
    statements: list[str] = []

    def record(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        statements.append(statement)

    sa.event.listen(sa.Engine, "before_cursor_execute", record)
    try:
        for url in gets:
            assert console.get(url).status_code == 200, url
    finally:
        sa.event.remove(sa.Engine, "before_cursor_execute", record)
    writes = re.compile(r"^\s*(INSERT|UPDATE|DELETE|REPLACE|CREATE|DROP|ALTER|TRUNCATE)\b", re.I)
    assert statements and [s for s in statements if writes.match(s) or "FOR UPDATE" in s] == []
    assert console.post(f"/ratchet/batches/{batch_id}").status_code == 405
    assert count("ratchet_audit") == 0


# -- the batch list ----------------------------------------------------------------------------


def test_the_batch_list_shows_progress_counts_and_metrics(console: Console, app: Flask) -> None:
    done = make_batch("nightly-import", 10, fail_every=5)  # 5 and 10 fail
    work(app)
    running = make_batch("still-running", 3)
    page = console.get("/ratchet/batches")
    assert page.status_code == 200
    assert batch_ids(page) == [str(running), str(done)]
    row = page.text[page.text.index(f'data-batch="{done}"') :]
    row = row[: row.index("</tr>")]
    assert "nightly-import" in row  # the parent settled FAILED: a child failed
    assert 'data-state="complete with failures">complete with failures</span>' in row
    assert "8 succeeded</span>" in row and "2 failed</span>" in row and "0 to go" in row
    assert 'aria-label="8 succeeded, 2 failed, 0 to go, of 10"' in row
    assert '<rect class="ok" x="0" y="0" width="80.0"' in row
    assert '<rect class="failed" x="80.0" y="0" width="20.0"' in row
    assert "style=" not in page.text  # the CSP forbids style attributes: SVG attributes only
    assert ">running<" not in row and "so far" not in row
    other = page.text[page.text.index(f'data-batch="{running}"') :]
    other = other[: other.index("</tr>")]
    assert "3 to go" in other and "so far" in other and 'data-state="running"' in other
    main = page.text[page.text.index("<main") :]  # the header's alarm strip has its own
    assert 'hx-trigger="every 5s' in main  # live while a shown batch runs
    finished = console.get("/ratchet/batches?state=finished")
    assert batch_ids(finished) == [str(done)]
    main = finished.text[finished.text.index("<main") :]
    assert 'hx-trigger="every 5s' not in main  # nothing shown can change by itself
    assert batch_ids(console.get("/ratchet/batches?state=running")) == [str(running)]


def test_the_batch_list_pages_by_keyset_and_is_stable_while_batches_arrive(
    console: Console,
) -> None:
    made = [make_batch(f"b{i}", 1) for i in range(30)]
    first = console.get("/ratchet/batches?size=25")
    assert batch_ids(first) == [str(i) for i in reversed(made[-25:])]
    later = next_url(first)
    assert later is not None and "size=25" in later
    [make_batch(f"new{i}", 1) for i in range(5)]  # arrive meanwhile
    second = console.get(later)
    assert batch_ids(second) == [str(i) for i in reversed(made[:5])]
    assert next_url(second) is None and "« First page" in second.text
    assert f'hx-get="{later}"'.replace("&", "&amp;") in second.text  # refreshes this very page


def test_the_state_filter_looks_at_a_window_and_carries_on(
    console: Console, monkeypatch: pytest.MonkeyPatch
) -> None:
    ended = [make_batch(f"empty{i}", 0) for i in range(3)]  # an empty batch ends at once
    running = [make_batch(f"run{i}", 1) for i in range(4)]
    monkeypatch.setattr(flows, "BATCH_WINDOW", 3)
    page = console.get("/ratchet/batches?state=finished&size=25")
    # The newest three batches are running: the window holds no finished one.
    assert batch_ids(page) == []
    assert "No finished batches among the 3 looked at" in page.text
    assert "this page is short" in page.text
    rest = next_url(page)
    assert rest is not None
    second = console.get(rest)
    assert batch_ids(second) == [str(ended[2]), str(ended[1])]
    third = console.get(next_url(second) or "")
    assert batch_ids(third) == [str(ended[0])] and next_url(third) is None
    assert batch_ids(console.get("/ratchet/batches?state=running&size=25")) == [
        str(i) for i in reversed(running[1:])
    ]


@pytest.mark.parametrize(
    "query",
    ["state=stuck", "size=7", "size=-1", "cursor=garbage", "cursor=c.00000000-0000-0000-0000-"],
)
def test_bad_batch_list_values_are_refused(console: Console, query: str) -> None:
    assert console.get(f"/ratchet/batches?{query}").status_code == 400


# -- a batch's page ----------------------------------------------------------------------------


def test_a_batch_page_shows_metrics_follow_ups_and_children(console: Console, app: Flask) -> None:
    batch_id = make_batch("weekly", 10, fail_every=5)
    waiting = console.get(f"/ratchet/batches/{batch_id}")
    assert waiting.status_code == 200
    assert "0 succeeded</span>" in waiting.text and "10 to go" in waiting.text
    assert waiting.text.count("waiting for the batch") == 2 and "undecided" in waiting.text
    assert 'hx-trigger="every 3s' in waiting.text
    work(app)
    page = console.get(f"/ratchet/batches/{batch_id}")
    text = page.text
    assert "<title>Batch weekly · Ratchet</title>" in text
    assert "8 succeeded</span>" in text and "2 failed</span>" in text
    assert 'hx-trigger="every 3s' not in text  # finished: nothing left to follow
    assert "a child</span>" in text and "so far" not in text
    ups = text[text.index("<h2>Follow-ups") : text.index("<h2>Children")]
    assert ups.count("<tr>") == 1 + 2  # the head and two follow-ups
    assert "BATCH_SUCCESS" in ups and "SUCCESS_RATE ≥ 90%" in ups
    # 2 of 10 failed: every child did not succeed, but 80 % is under 90 %: both skipped.
    assert ups.count("decision-skipped") == 2 and ups.count("status-canceled") == 2
    assert child_ids(page) == [str(i) for i in reversed(children_of(batch_id))]
    assert "item 5 refused" in text  # the first line of a child's error
    assert f'href="/ratchet/jobs/{batch_id}"' in text  # the parent job


def test_a_batch_page_pages_its_children_and_filters_them_by_status(
    console: Console, monkeypatch: pytest.MonkeyPatch
) -> None:
    batch_id = make_batch("big", 60)
    kids = children_of(batch_id)
    for canceled in kids[5:60:10]:  # 6 canceled, spread out
        assert ratchet.cancel_job(canceled)
    first = console.get(f"/ratchet/batches/{batch_id}?size=25")
    assert child_ids(first) == [str(i) for i in reversed(kids[-25:])]
    second = console.get(next_url(first) or "")
    assert child_ids(second) == [str(i) for i in reversed(kids[10:35])]
    third = console.get(next_url(second) or "")
    assert child_ids(third) == [str(i) for i in reversed(kids[:10])] and not next_url(third)
    expected = [str(i) for i in reversed(kids[5:60:10])]
    assert child_ids(console.get(f"/ratchet/batches/{batch_id}?status=CANCELED")) == expected
    pending = console.get(f"/ratchet/batches/{batch_id}?status=PENDING&size=200")
    assert len(child_ids(pending)) == 54
    assert child_ids(console.get(f"/ratchet/batches/{batch_id}?status=SUCCEEDED")) == []
    # A window of 20 children a page: the filter carries on window by window.
    monkeypatch.setattr(flows, "CHILD_WINDOW", 20)
    seen: list[str] = []
    url: str | None = f"/ratchet/batches/{batch_id}?status=CANCELED"
    pages = 0
    while url:
        page = console.get(url)
        assert page.status_code == 200
        seen += child_ids(page)
        url = next_url(page)
        pages += 1
    assert seen == expected and pages == 3


@pytest.mark.parametrize("query", ["status=DONE", "size=1000", "cursor=b.x", "cursor=" + "c" * 200])
def test_bad_batch_page_values_are_refused(console: Console, query: str) -> None:
    batch_id = make_batch("strict", 1)
    assert console.get(f"/ratchet/batches/{batch_id}?{query}").status_code == 400


def test_an_unknown_batch_is_404(console: Console) -> None:
    plain = ratchet.enqueue(add, 1, 2).submit().id
    assert console.get("/ratchet/batches/not-a-uuid").status_code == 404
    assert console.get(f"/ratchet/batches/{uuid.uuid4()}").status_code == 404
    assert console.get(f"/ratchet/batches/{plain}").status_code == 404  # a job, not a batch


# -- the job page's Flow section ---------------------------------------------------------------


def test_a_plain_job_has_no_flow_section(console: Console) -> None:
    plain = ratchet.enqueue(add, 1, 2).submit().id
    page = console.get(f"/ratchet/jobs/{plain}")
    assert page.status_code == 200 and 'id="job-flow"' not in page.text


def test_a_waiting_step_says_what_it_waits_for_instead_of_a_date(console: Console) -> None:
    a, b, c = ratchet.enqueue(step, "a").then(step, "b").then(step, "c").submit().ids
    page = console.get(f"/ratchet/jobs/{b}")
    assert not shows_far_future(page.text)
    assert f'waiting for <a href="/ratchet/jobs/{a}">' in page.text
    assert "not decided yet: waiting for its parent to end" in page.text
    flow = page.text[page.text.index('id="job-flow"') :]
    assert "Waits for</dt>" in flow and f'href="/ratchet/jobs/{a}"' in flow
    assert 'hx-trigger="every 5s' in flow  # the flow is live
    assert shape(tree(page)) == [(str(a), [(str(b), [(str(c), [])])])]
    assert highlighted(tree(page)) == [str(b)]


def test_the_tree_of_a_chain_with_branches_shows_each_decision_and_the_routing_error(
    console: Console, app: Flask
) -> None:
    handle = (
        ratchet.enqueue(step, "a")
        .then(produce, 20)
        .then_on_success(follow_up, "shipped")
        .then_on_failure(follow_up, "refunded")
        .when(predicate_raises, follow_up, "never")
        .then(step, "c")
        .then(step, "d")
        .submit()
    )
    a, p, shipped, refunded, never, c, d = handle.ids
    work(app)
    page = console.get(f"/ratchet/jobs/{never}")
    assert page.status_code == 200
    expected = [
        (
            str(a),
            [
                (
                    str(p),
                    [
                        (str(shipped), []),
                        (str(refunded), []),
                        (str(never), []),
                        (str(c), [(str(d), [])]),
                    ],
                )
            ],
        )
    ]
    assert shape(tree(page)) == expected
    assert highlighted(tree(page)) == [str(never)]
    flow = page.text[page.text.index('id="job-flow"') :]
    # The predicate raised: every branch of p, and its next step, were canceled with the error.
    assert flow.count("decision-error") == 1 + 4  # this job's decision, and four in the tree
    assert "Routing error</dt>" in flow
    # Shown once in the tree, on the first of the siblings it canceled, and once for this job.
    assert flow.count("routing failed and every branch of this job was canceled") == 2
    assert not shows_far_future(page.text) and "never: it ended before" in page.text
    assert "predicate tests.flow_tasks:predicate_raises raised ValueError" in flow
    assert "WHEN tests.flow_tasks:predicate_raises(result)" in flow
    assert 'hx-trigger="every 5s' not in flow  # every job of it has ended
    # The same tree from the root, highlighted there; the step after it is TRIGGERED.
    root = console.get(f"/ratchet/jobs/{a}")
    assert shape(tree(root)) == expected and highlighted(tree(root)) == [str(a)]
    step_p = console.get(f"/ratchet/jobs/{p}")
    section = step_p.text[step_p.text.index('id="job-flow"') :]
    assert "THEN</code>" in section and "decision-triggered" in section


def test_a_failed_step_cancels_the_rest_and_the_tree_shows_skipped(
    console: Console, app: Flask
) -> None:
    a, b, c = ratchet.enqueue(step, "a").then(broken, "b").then(step, "c").submit().ids
    work(app)
    page = console.get(f"/ratchet/jobs/{c}")
    assert shape(tree(page)) == [(str(a), [(str(b), [(str(c), [])])])]
    flow = page.text[page.text.index('id="job-flow"') :]
    assert "decision-skipped" in flow and "Routing error" not in flow


def test_a_batch_child_and_parent_link_to_their_batch(console: Console, app: Flask) -> None:
    batch_id = make_batch("linked", 4)
    child = children_of(batch_id)[0]
    page = console.get(f"/ratchet/jobs/{child}")
    flow = page.text[page.text.index('id="job-flow"') :]
    assert "In batch</dt>" in flow and f'href="/ratchet/batches/{batch_id}"' in flow
    assert "4 to go" in flow and 'hx-trigger="every 5s' in flow
    parent = console.get(f"/ratchet/jobs/{batch_id}")
    assert "waiting for its children to end" in parent.text and not shows_far_future(parent.text)
    flow = parent.text[parent.text.index('id="job-flow"') :]
    assert "Parent of batch</dt>" in flow
    # Its tree: the parent and its two follow-ups, each with its condition.
    assert [n[0] for n in tree(parent)[0][2]] == [
        str(i) for i in sorted(_follow_ups(batch_id), key=lambda i: i.bytes)
    ]
    assert "BATCH_SUCCESS" in flow and "SUCCESS_RATE ≥ 90%" in flow
    work(app)
    done = console.get(f"/ratchet/jobs/{child}")
    assert 'hx-trigger="every 5s' not in done.text[done.text.index('id="job-flow"') :]


def _follow_ups(batch_id: uuid.UUID) -> list[uuid.UUID]:
    with db.engine.connect() as conn:
        return list(
            conn.execute(
                sa.select(workflow_condition.c.job_id).where(
                    workflow_condition.c.parent_id == batch_id
                )
            ).scalars()
        )


def test_a_wide_or_deep_flow_is_cut_but_keeps_the_path_to_the_job(
    console: Console, monkeypatch: pytest.MonkeyPatch
) -> None:
    builder = ratchet.enqueue(step, "root")
    for i in range(6):
        builder = builder.then_on_success(follow_up, f"branch {i}")
    handle = builder.then(step, "next").then(step, "last").submit()
    root, *branches, nxt, last = handle.ids
    monkeypatch.setattr(flows, "MAX_WIDTH", 2)
    page = console.get(f"/ratchet/jobs/{last}")
    (top,) = tree(page)
    assert top[0] == str(root)
    shown = [n[0] for n in top[2]]
    # Two dependents of root fit; the path down to the job on screen is drawn as well.
    assert shown == [str(branches[0]), str(branches[1]), str(nxt)]
    assert highlighted(tree(page)) == [str(last)]
    assert "more dependents, not shown" in page.text and "The tree is cut" in page.text
    monkeypatch.setattr(flows, "MAX_WIDTH", 20)
    monkeypatch.setattr(flows, "MAX_DEPTH", 1)
    page = console.get(f"/ratchet/jobs/{last}")
    (top,) = tree(page)
    assert [n[0] for n in top[2]] == [*(str(b) for b in branches), str(nxt)]
    nxt_node = next(n for n in top[2] if n[0] == str(nxt))
    assert [n[0] for n in nxt_node[2]] == [str(last)]  # below the depth bound: only the path
    assert "The tree is cut" in page.text
    monkeypatch.setattr(flows, "MAX_DEPTH", 50)
    monkeypatch.setattr(flows, "MAX_UP", 1)
    page = console.get(f"/ratchet/jobs/{last}")
    assert [n[0] for n in tree(page)] == [str(nxt)]  # the walk up stopped one step above
    assert "The tree is cut" in page.text


def test_a_flow_whose_first_job_was_deleted_is_drawn_from_what_is_left(console: Console) -> None:
    a, b, c = ratchet.enqueue(step, "a").then(step, "b").then(step, "c").submit().ids
    assert ratchet.cancel_job(a)  # and with it b and c
    with ratchet.transaction() as conn:
        conn.execute(sa.delete(job).where(job.c.job_id == a))
    page = console.get(f"/ratchet/jobs/{c}")
    assert page.status_code == 200
    assert shape(tree(page)) == [(str(b), [(str(c), [])])]
    assert "The tree is cut" not in page.text
    first = console.get(f"/ratchet/jobs/{b}")
    assert first.status_code == 200 and "Waits for</dt>" not in first.text
    assert "decision-skipped" in first.text  # its own condition outlives its parent


# -- escaping ----------------------------------------------------------------------------------


def test_hostile_batch_names_args_tasks_and_errors_are_inert(console: Console, app: Flask) -> None:
    builder = ratchet.enqueue_batch(HOSTILE)
    builder.add(batch_item, 1, 0)
    builder.add(add, HOSTILE, {"k": HOSTILE})
    builder.on_success(follow_up, HOSTILE)
    batch_id = builder.submit().id
    flow = ratchet.enqueue(produce, 1).when(predicate_raises, follow_up, HOSTILE).submit()
    kids = children_of(batch_id)
    with ratchet.transaction() as conn:
        conn.execute(sa.update(job).where(job.c.job_id == kids[0]).values(task=HOSTILE))
        conn.execute(
            sa.update(workflow_condition)
            .where(workflow_condition.c.job_id == flow.last)
            .values(predicate=HOSTILE, decision="ERROR", error=HOSTILE)
        )
        conn.execute(sa.update(batch).where(batch.c.batch_id == batch_id).values(name=HOSTILE))
    assert ratchet.cancel_job(kids[1])
    with ratchet.transaction() as conn:
        conn.execute(sa.update(job).where(job.c.job_id == kids[1]).values(terminal_error=HOSTILE))
    for url in (
        "/ratchet/batches",
        f"/ratchet/batches/{batch_id}",
        f"/ratchet/batches/{batch_id}?status=CANCELED",
        f"/ratchet/jobs/{batch_id}",
        f"/ratchet/jobs/{kids[0]}",
        f"/ratchet/jobs/{kids[1]}",
        f"/ratchet/jobs/{flow.id}",
        f"/ratchet/jobs/{flow.last}",
    ):
        page = console.get(url)
        assert page.status_code == 200, url
        text = page.text
        assert "<script>alert" not in text, url
        # No element got an attribute out of job data: htmx cannot be steered.
        assert 'hx-trigger="load"' not in text and "<div hx-get" not in text, url
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text, url


def test_the_batch_pages_return_under_the_apps_script_root(console: Console) -> None:
    batch_id = make_batch("rooted", 2)
    with console.client.application.app_context():
        page = console.client.get(
            f"/ratchet/batches/{batch_id}?status=PENDING",
            base_url="http://localhost/app",
            headers=ADMIN | ORIGIN,
        )
    assert page.status_code == 200
    assert f'hx-get="/app/ratchet/batches/{batch_id}?status=PENDING"' in page.text
    assert f'href="/app/ratchet/jobs/{batch_id}"' in page.text


# -- presentation (no database) --------------------------------------------------------------


def progress(total: int, succeeded: int, failed: int, **more: Any) -> BatchProgress:
    return BatchProgress(uuid.uuid4(), "b", total, succeeded, failed, **more)


def test_the_bar_shows_every_share_that_is_not_zero_and_never_overflows() -> None:
    bar = present.batch_bar(progress(10_000, 9_000, 1))
    assert (bar.ok, bar.failed, bar.remaining) == (90.0, present.MIN_SHARE, 999)
    assert bar.label == "9,000 succeeded, 1 failed, 999 to go, of 10,000"
    full = present.batch_bar(progress(10_000, 9_999, 1))
    assert full.ok + full.failed <= 100 and full.failed == present.MIN_SHARE
    assert present.batch_bar(progress(0, 0, 0)).label == "no children"


def test_parallelism_is_run_time_over_wall_time_and_conditions_read_as_written() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    parallel = progress(4, 2, 0, child_run_ms=57_000.0, created_at=start)
    later = start + timedelta(seconds=10)
    assert present.parallelism(parallel, later) == "5.7\N{MULTIPLICATION SIGN} parallel"  # so far
    ended = progress(4, 4, 0, child_run_ms=8_000.0, created_at=start, finished_at=later)
    assert (
        present.parallelism(ended, later + timedelta(hours=1))
        == "0.8\N{MULTIPLICATION SIGN} parallel"
    )
    assert present.parallelism(progress(4, 0, 0, created_at=start), later) == present.NONE
    instant = progress(1, 1, 0, child_run_ms=5.0, created_at=start, finished_at=start)
    assert present.parallelism(instant, later) == present.NONE  # no wall time to divide by
    assert present.wall_time(parallel, start + timedelta(seconds=75)) == 75.0
    waits = flows.WaitsOn(uuid.uuid4(), "SUCCESS_RATE", None, 0.95, None, None, None)
    assert present.condition(waits) == "SUCCESS_RATE ≥ 95%"
    count4 = flows.WaitsOn(uuid.uuid4(), "FAILURE_COUNT", None, 4.0, None, None, None)
    assert present.condition(count4) == "FAILURE_COUNT ≥ 4"
    assert present.condition_meaning("NOT-A-KIND") == ""
