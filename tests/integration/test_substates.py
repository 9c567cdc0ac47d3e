"""Sub-states (flask_ratchet/substates.py): PENDING and RUNNING jobs told apart in the console's
list, filter, overview, nodes, resources and job pages; "run now" for a scheduled or retrying
job (API and console, audited); and a worker recording when its attempts start, on SQLite,
PostgreSQL and MariaDB."""

from __future__ import annotations

import re
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa
from flask import Flask

from flask_ratchet import JobStatus
from flask_ratchet.schema import job_queue
from flask_ratchet.store.types import ClaimedJob, Finished, Outcome
from flask_ratchet.substates import attempt_started_at
from flask_ratchet.worker.runner import Worker
from tests.apps import add, create_app, db, ratchet, wait_for_file
from tests.integration.helpers import add_node
from tests.integration.test_console import Console, audit_rows


@pytest.fixture
def console(app: Flask) -> Console:
    return Console(app.test_client())


@dataclass
class Jobs:
    """One job in each sub-state."""

    started: uuid.UUID
    claimed: uuid.UUID
    retrying: uuid.UUID
    due: uuid.UUID
    scheduled: uuid.UUID
    #: A chain's first step, due in an hour: scheduled too.
    chain_first: uuid.UUID
    #: Its second step, waiting for the first: blocked.
    chain_second: uuid.UUID
    #: A due job in a paused queue: blocked.
    paused_queue: uuid.UUID


def mark_started(claimed: ClaimedJob, node: str = "node-a") -> None:
    """Record the attempt's start as the worker's watchdog does."""
    runtime = ratchet.runtime
    at = attempt_started_at(claimed.picked_at, 0.25)
    with runtime.store.begin(runtime.engine) as conn:
        runtime.store.executions.mark_started(conn, node, [(claimed.job_id, at)])


def make_jobs() -> Jobs:
    """One job in each sub-state, through the real operations (running jobs first: a claim takes
    every due job)."""
    first = ratchet.enqueue(add, 1, 1).with_resource("api").submit().id
    second = ratchet.enqueue(add, 2, 2).with_resource("api").submit().id
    claimed = {c.job_id: c for c in ratchet.claim_due(10, "node-a")}
    assert set(claimed) == {first, second}
    mark_started(claimed[first])
    failing = ratchet.enqueue(add, 3, 3).submit().id
    (taken,) = ratchet.claim_due(10, "node-b")
    runtime = ratchet.runtime
    retry = Finished(failing, Outcome.RETRY, taken.task, taken.attempt, error="boom", delay=3600)
    with runtime.store.begin(runtime.engine) as conn:
        assert runtime.store.executions.complete_many(conn, "node-b", [retry]) == {failing}
    chain = ratchet.schedule(3600, add, 4, 4).then(add, 5, 5).submit()
    mail = ratchet.enqueue(add, 6, 6).with_queue("mail").submit().id
    ratchet.pause_queue("mail")
    return Jobs(
        started=first,
        claimed=second,
        retrying=failing,
        due=ratchet.enqueue_now(add, 7, 7).id,
        scheduled=ratchet.schedule(3600, add, 8, 8).submit().id,
        chain_first=chain.ids[0],
        chain_second=chain.ids[1],
        paused_queue=mail,
    )


def listed(console: Console, query: str) -> set[uuid.UUID]:
    page = console.get(f"/ratchet/jobs?{query}")
    assert page.status_code == 200, page.text
    return {
        uuid.UUID(i)
        for i in re.findall(r'<a class="id" href="/ratchet/jobs/([0-9a-f-]{36})"', page.text)
    }


def due_cell(page: str, job_id: uuid.UUID) -> str:
    row = re.search(rf'href="/ratchet/jobs/{job_id}".*?</tr>', page, re.S)
    assert row is not None, f"no row for {job_id}"
    cell = re.search(r'<td class="due wide-only"[^>]*>(.*?)</td>', row.group(0), re.S)
    assert cell is not None
    return " ".join(re.sub(r"<[^>]+>", " ", cell.group(1)).split())


def test_the_job_list_filters_by_sub_state(console: Console) -> None:
    jobs = make_jobs()
    assert listed(console, "sub=due") == {jobs.due}
    assert listed(console, "sub=scheduled") == {jobs.scheduled, jobs.chain_first}
    assert listed(console, "sub=retrying") == {jobs.retrying}
    assert listed(console, "sub=blocked") == {jobs.chain_second, jobs.paused_queue}
    assert listed(console, "status=RUNNING&sub=started") == {jobs.started}
    assert listed(console, "sub=claimed") == {jobs.claimed}
    assert listed(console, "node=node-a&sub=claimed") == {jobs.claimed}
    # Old URLs keep working: a status alone lists every job in it.
    assert len(listed(console, "status=PENDING")) == 6
    assert console.get("/ratchet/jobs?status=FAILED&sub=due").status_code == 400
    assert console.get("/ratchet/jobs?sub=sleeping").status_code == 400


def test_the_job_list_shows_each_jobs_due_time_or_attempt(console: Console) -> None:
    jobs = make_jobs()
    page = console.get("/ratchet/jobs?size=25").text
    assert "Due / next attempt" in page
    assert due_cell(page, jobs.due).startswith("due ")
    assert due_cell(page, jobs.scheduled) in ("scheduled in 59 min", "scheduled in 1 h")
    assert due_cell(page, jobs.retrying) in ("attempt 2 in 59 min", "attempt 2 in 1 h")
    assert due_cell(page, jobs.chain_second) == "blocked on a job"
    assert due_cell(page, jobs.paused_queue) == "blocked queue paused"
    assert due_cell(page, jobs.started).startswith("started ")
    assert due_cell(page, jobs.claimed) == "waiting for a thread"
    # The exact time on hover.
    assert re.search(
        rf'href="/ratchet/jobs/{jobs.scheduled}".*?title="scheduled: [^"]*due 20', page, re.S
    )


def test_the_overview_counts_each_sub_state(console: Console) -> None:
    make_jobs()
    page = console.get("/ratchet/").text
    counts = dict(re.findall(r'data-sub="(\w+)"[^>]*>[^<]*<b>([^<]+)</b>', page))
    assert counts == {
        "due": "1",
        "scheduled": "2",
        "retrying": "1",
        "blocked": "2",
        "started": "1",
        "claimed": "1",
    }
    assert 'href="/ratchet/jobs?sub=retrying"' in page


def test_nodes_and_resources_split_running_jobs_into_started_and_waiting(
    console: Console,
) -> None:
    make_jobs()
    add_node("node-a")
    nodes = console.get("/ratchet/nodes").text
    split = re.search(r"<td class=\"nowrap\" data-split>(.*?)</td>", nodes, re.S)
    assert split is not None
    text = " ".join(re.sub(r"<[^>]+>", " ", split.group(1)).split())
    assert text == "1 started · 1 waiting for a thread"
    assert "/ratchet/jobs?node=node-a&amp;sub=claimed" in nodes
    resources = console.get("/ratchet/resources").text
    row = re.search(
        r'<tr data-resource="api">.*?<td class="nowrap running"[^>]*>(.*?)</td>', resources, re.S
    )
    assert row is not None
    assert " ".join(re.sub(r"<[^>]+>", " ", row.group(1)).split()) == "2 (1 started · 1 waiting)"


def test_the_job_page_shows_the_attempt_in_progress(console: Console) -> None:
    jobs = make_jobs()
    started = console.get(f"/ratchet/jobs/{jobs.started}").text
    attempt = re.search(r"<dd data-attempt>(.*?)</dd>", started, re.S)
    assert attempt is not None
    text = " ".join(re.sub(r"<[^>]+>", " ", attempt.group(1)).split())
    assert text.startswith("attempt 1 on node-a : claimed ") and ", started " in text
    assert attempt.group(1).count('<time datetime="20') == 2  # both instants, on hover
    waiting = console.get(f"/ratchet/jobs/{jobs.claimed}").text
    assert "waiting for a worker thread" in waiting
    retrying = console.get(f"/ratchet/jobs/{jobs.retrying}").text
    assert 'data-sub="retrying"' in retrying and "attempt 2 in" in retrying
    assert 'data-action="run_now"' in retrying
    assert 'data-action="run_now"' not in console.get(f"/ratchet/jobs/{jobs.due}").text
    assert 'data-action="run_now"' not in console.get(f"/ratchet/jobs/{jobs.chain_second}").text


def test_run_job_now_makes_a_scheduled_or_retrying_job_due(app: Flask) -> None:
    jobs = make_jobs()
    assert ratchet.run_job_now(jobs.scheduled)
    assert not ratchet.run_job_now(jobs.scheduled)  # due already: nothing to do
    assert ratchet.run_job_now(str(jobs.retrying))
    for other in (jobs.due, jobs.chain_second, jobs.started, jobs.claimed, uuid.uuid4()):
        assert not ratchet.run_job_now(other)
    ratchet.resume_queue("mail")
    claimed = {c.job_id: c for c in ratchet.claim_due(10, "node-c")}
    assert set(claimed) == {jobs.scheduled, jobs.retrying, jobs.due, jobs.paused_queue}
    assert claimed[jobs.retrying].attempt == 2  # the failed attempt still counts


def test_run_now_from_the_console_is_audited_and_needs_the_admin_role(
    app: Flask, console: Console
) -> None:
    jobs = make_jobs()
    done = console.post(f"/ratchet/jobs/{jobs.retrying}/run_now", htmx=True)
    assert done.status_code == 200 and f"Job {jobs.retrying} made due now." in done.text
    refused = console.post(f"/ratchet/jobs/{jobs.due}/run_now", htmx=True)
    assert "was not made due now: only PENDING and due later" in refused.text
    selected = console.post(
        "/ratchet/jobs/selected",
        {"action": "run_now", "job_id": [str(jobs.scheduled), str(jobs.chain_second)]},
    )
    assert selected.status_code == 200 and "1 of 2 jobs made due now." in selected.text
    rows = [(r.action, r.scope, r.requested, r.changed) for r in audit_rows()]
    assert rows[-3:] == [
        ("run_now", "job", 1, 1),
        ("run_now", "job", 1, 0),
        ("run_now", "selected", 2, 1),
    ]
    reader = Console(app.test_client(), role="read")
    assert reader.post(f"/ratchet/jobs/{jobs.chain_first}/run_now").status_code == 403
    with app.app_context():
        no_token = app.test_client().post(
            f"/ratchet/jobs/{jobs.chain_first}/run_now",
            headers={"X-Role": "admin", "Origin": "http://localhost"},
        )
    assert no_token.status_code in (400, 403)
    assert console.get("/ratchet/jobs?sub=scheduled").status_code == 200
    assert jobs.chain_first in listed(console, "sub=scheduled")  # neither moved it


def test_a_worker_records_when_its_attempts_start(app: Flask, tmp_path: Path) -> None:
    """Two jobs that wait for a file, one thread and room for one more claimed: the first is
    shown started (its start written by the watchdog's sweep), the second waiting."""
    gate = tmp_path / "go"
    first = ratchet.enqueue_now(wait_for_file, str(gate)).id
    second = ratchet.enqueue_now(wait_for_file, str(gate)).id
    worker = Worker(app, concurrency=1, burst=True, prefetch=1)
    thread = threading.Thread(target=worker.run, name="test-worker")
    thread.start()
    try:
        rows = _wait_for_a_start(first, second)
    finally:
        gate.touch()
        thread.join(60)
    assert not thread.is_alive(), "the burst worker did not finish"
    by_id = {r.job_id: r for r in rows}
    assert [r.status for r in rows] == ["RUNNING", "RUNNING"]
    started = [i for i, r in by_id.items() if r.started_at is not None]
    assert len(started) == 1, rows
    (began,) = started
    assert by_id[began].started_at >= by_id[began].picked_at
    for job_id in (first, second):
        found = ratchet.get_job(job_id)
        assert found is not None and found.status == JobStatus.SUCCEEDED


def _wait_for_a_start(*ids: uuid.UUID) -> list[sa.Row[tuple[object, ...]]]:
    """The hot rows of ``ids`` once both are RUNNING and one has a recorded start (a sweep runs
    every second; a minute is far more than it needs)."""
    deadline = time.monotonic() + 60
    while True:
        with ratchet.runtime.engine.connect() as conn:
            rows = list(
                conn.execute(
                    sa.select(
                        job_queue.c.job_id,
                        job_queue.c.status,
                        job_queue.c.picked_at,
                        job_queue.c.started_at,
                    ).where(job_queue.c.job_id.in_(list(ids)))
                )
            )
        if len(rows) == 2 and all(r.status == "RUNNING" for r in rows):
            if any(r.started_at is not None for r in rows):
                return rows
        assert time.monotonic() < deadline, f"no start recorded: {rows}"
        time.sleep(0.1)


def test_run_job_now_asks_the_policy_for_run_now(database_url: str) -> None:
    asked: list[str] = []

    def no_run_now(principal: str | None, operation: str, job: object) -> bool:
        asked.append(operation)
        return operation != "run_now"

    app = create_app(database_url, RATCHET_PRINCIPAL=lambda: "ops", RATCHET_AUTHORIZE=no_run_now)
    with app.app_context():
        app.extensions["ratchet"].ensure_schema()
        try:
            job_id = ratchet.schedule(3600, add, 1, 1).submit().id
            assert not ratchet.run_job_now(job_id)
            assert asked[-1] == "run_now"
            found = ratchet.get_job(job_id)
            assert found is not None and found.scheduled_at > found.created_at
        finally:
            db.session.remove()
            db.engine.dispose()
