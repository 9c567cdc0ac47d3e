"""The console's workflow list (roots, state, steps done of total, keyset pages) and the
timeline at the top of a root's page, on every database."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from flask import Flask

from flask_ratchet.console.reads import workflows
from flask_ratchet.schema import execution, job
from tests.apps import add, db, ratchet
from tests.flow_tasks import broken, follow_up, step
from tests.integration.helpers import count
from tests.integration.test_console import Console
from tests.integration.test_console_flows import make_batch, next_url
from tests.integration.test_flows import work


@pytest.fixture
def console(app: Flask) -> Console:
    return Console(app.test_client())


def rows(text: str) -> dict[str, str]:
    """Each listed workflow's row, by its root's id, in order."""
    found = {}
    for m in re.finditer(r'<tr data-workflow="([0-9a-f-]{36})">(.*?)</tr>', text, re.S):
        found[m.group(1)] = m.group(2)
    return found


def steps_done(row: str) -> str:
    found = re.search(r'<td class="steps">([^<]*)', row)
    assert found is not None
    return found.group(1).strip()


def test_the_list_shows_each_root_with_its_state_and_steps_done(
    console: Console, app: Flask
) -> None:
    chain = ratchet.enqueue(step, "a").then(step, "b").then(step, "c").submit()
    branches = (
        ratchet.enqueue(step, "x")
        .then_on_success(follow_up, "shipped")
        .then_on_failure(follow_up, "refunded")
        .submit()
    )
    failing = ratchet.enqueue(step, "p").then(broken, "q").then(step, "r").submit()
    ratchet.enqueue(add, 1, 2).submit()  # a plain job: no workflow
    make_batch("not-a-workflow", 2)  # a batch with follow-ups: on the batch pages
    work(app)
    running = ratchet.enqueue(step, "late").then(step, "later").submit()
    page = console.get("/ratchet/workflows")
    assert page.status_code == 200
    listed = rows(page.text)
    roots = [running.ids[0], failing.ids[0], branches.ids[0], chain.ids[0]]
    assert list(listed) == [str(i) for i in roots]  # newest first, roots only
    assert steps_done(listed[str(chain.ids[0])]) == "3 / 3"
    assert 'data-state="complete"' in listed[str(chain.ids[0])]
    # The branch not taken ended CANCELED as skipped: done, and no failure.
    shipped = listed[str(branches.ids[0])]
    assert steps_done(shipped) == "3 / 3" and "1 skipped" in shipped
    assert 'data-state="complete"' in shipped and "failed" not in shipped
    # q failed for good, and r was canceled after it (skipped).
    failed = listed[str(failing.ids[0])]
    assert steps_done(failed) == "3 / 3" and "1 failed or canceled" in failed
    assert 'data-state="complete with failures"' in failed
    late = listed[str(running.ids[0])]
    assert steps_done(late) == "0 / 2" and 'data-state="running"' in late
    main = page.text[page.text.index("<main") :]
    assert 'hx-trigger="every 5s' in main  # live while a workflow shown runs
    assert 'aria-current="page">Workflows</a>' in page.text
    assert count("ratchet_audit") == 0


def test_the_list_pages_by_keyset(console: Console) -> None:
    roots = [ratchet.enqueue(step, f"s{i}").then(step, "t").submit().ids[0] for i in range(27)]
    first = console.get("/ratchet/workflows?size=25")
    assert list(rows(first.text)) == [str(i) for i in reversed(roots[2:])]
    later = ratchet.enqueue(step, "new").then(step, "t").submit().ids[0]  # shifts nothing
    url = next_url(first)
    assert url is not None
    second = console.get(url)
    assert list(rows(second.text)) == [str(roots[1]), str(roots[0])]
    assert next_url(second) is None
    assert str(later) in console.get("/ratchet/workflows").text


def test_a_short_window_carries_on_after_it(app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    chains = [
        ratchet.enqueue(step, f"s{i}").then(step, "t").then(step, "u").submit() for i in range(3)
    ]
    # Two condition rows a window: the newest chain's own steps fill it (t and u are parents
    # of one row each: the root's row and the next step's), so the page holds one root.
    monkeypatch.setattr(workflows, "ROOT_WINDOW", 2)
    with db.engine.connect() as conn:
        page = workflows.list_workflows(conn, 25)
        assert [r.id for r in page.items] == [chains[2].ids[0]]
        assert page.partial and page.next_cursor is not None
        seen = [r.id for r in page.items]
        while page.next_cursor is not None:
            page = workflows.list_workflows(conn, 25, page.next_cursor)
            seen += [r.id for r in page.items]
    assert seen == [c.ids[0] for c in reversed(chains)]


@pytest.mark.parametrize("query", ["cursor=nope", "cursor=w.x", "size=7", "size=%C2%B2"])
def test_bad_workflow_list_values_are_refused(console: Console, query: str) -> None:
    assert console.get(f"/ratchet/workflows?{query}").status_code == 400


def test_a_roots_page_draws_each_steps_bar_on_one_axis(console: Console, app: Flask) -> None:
    a, b, c = ratchet.enqueue(step, "a").then(step, "b").then(broken, "c").submit().ids
    work(app)
    # Known times: every step written at t0; each ran 5 s, starting at 0, 10 and 20 s.
    t0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    with ratchet.transaction() as conn:
        for i, job_id in enumerate((a, b, c)):
            started = t0 + timedelta(seconds=10 * i)
            conn.execute(sa.update(job).where(job.c.job_id == job_id).values(created_at=t0))
            conn.execute(
                sa.update(job)
                .where(job.c.job_id == job_id)
                .values(finished_at=started + timedelta(seconds=5))
            )
            conn.execute(
                sa.update(execution).where(execution.c.job_id == job_id).values(started_at=started)
            )
    page = console.get(f"/ratchet/jobs/{a}")
    assert page.status_code == 200
    timeline = page.text[page.text.index('id="job-timeline"') :]
    timeline = timeline[: timeline.index("</section>")]
    assert timeline.index('id="job-timeline"') < page.text.index('id="job-flow"')
    shown = re.findall(r'<tr data-step="([0-9a-f-]{36})">', timeline)
    assert shown == [str(a), str(b), str(c)]
    assert timeline.count("5.00 s") == 3
    # The axis runs from t0 to the last end (25 s): b starts at 40%, and each bar is 20% wide.
    assert '<rect class="succeeded" x="0.0" y="0" width="20.0"' in timeline
    assert '<rect class="succeeded" x="40.0" y="0" width="20.0"' in timeline
    assert '<rect class="failed" x="80.0" y="0" width="20.0"' in timeline
    assert "tests.flow_tasks:broken" in timeline and "style=" not in timeline
    assert 'hx-trigger="every 5s' not in timeline  # every step has ended
    for other in (b, c):  # a step's page has its flow, and no timeline
        assert 'id="job-timeline"' not in console.get(f"/ratchet/jobs/{other}").text


def test_a_running_workflow_timeline_marks_steps_that_never_ran(
    console: Console, app: Flask
) -> None:
    a, _ = ratchet.enqueue(step, "a").then(step, "b").submit().ids
    page = console.get(f"/ratchet/jobs/{a}").text
    timeline = page[page.index('id="job-timeline"') :]
    timeline = timeline[: timeline.index("</section>")]
    assert timeline.count("never ran") == 2 and 'hx-trigger="every 5s' in timeline
    plain = ratchet.enqueue(add, 1, 1).submit().id
    assert 'id="job-timeline"' not in console.get(f"/ratchet/jobs/{plain}").text
    batch_id = make_batch("no-timeline", 2)
    assert 'id="job-timeline"' not in console.get(f"/ratchet/jobs/{batch_id}").text
