"""The console's nodes page: the queues each worker takes (from its heartbeat), the jobs it
runs now and for how long, and, once no worker runs, the last ones that stopped cleanly."""

from __future__ import annotations

import json
import re
import threading
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from flask import Flask

from flask_ratchet.console.reads import nodes as reads_nodes
from flask_ratchet.schema import job_queue
from flask_ratchet.store.cluster import WORKER_STOPPED
from flask_ratchet.worker.runner import Worker
from tests.apps import add, ratchet, send_mail
from tests.integration.helpers import add_node, count
from tests.integration.test_console import Console, audit_rows


@pytest.fixture
def console(app: Flask) -> Console:
    return Console(app.test_client())


def node_row(page: str, node_id: str) -> str:
    found = re.search(rf'<tr [^>]*data-node="{re.escape(node_id)}">(.*?)</tr>', page, re.S)
    assert found is not None, f"no row for node {node_id!r}"
    return found.group(1)


def text(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def test_each_node_shows_the_queues_it_takes_and_the_jobs_it_runs(console: Console) -> None:
    add_node("node-a", info=json.dumps({"queues": ["mail", "reports"], "breakers": {}}))
    add_node("node-b")  # a heartbeat that names no queues: every queue
    add_node("node-c", info="not json")
    ratchet.enqueue_many(ratchet.enqueue(send_mail, f"{i}@example.com") for i in range(23))
    claimed = ratchet.claim_due(22, "node-a", queues=["mail"])
    assert len(claimed) == 22
    slow = ratchet.enqueue(add, 1, 2).with_queue("reports").submit().id
    assert [c.job_id for c in ratchet.claim_due(1, "node-a", queues=["reports"])] == [slow]
    other = ratchet.enqueue(add, 3, 4).submit().id
    assert [c.job_id for c in ratchet.claim_due(1, "node-b", queues=["default"])] == [other]
    now = datetime.now(UTC)
    with ratchet.transaction() as conn:
        # Claimed two hours ago: the longest running of node-a's, listed first.
        conn.execute(
            sa.update(job_queue)
            .where(job_queue.c.job_id == slow)
            .values(picked_at=now - timedelta(hours=2))
        )
        rows = {n.node_id: n for n in reads_nodes.nodes(conn, now)}
    assert rows["node-a"].queues == ["mail", "reports"]
    assert rows["node-b"].queues is None and rows["node-c"].queues is None
    assert rows["node-a"].running == 23 and rows["node-b"].running == 1
    assert rows["node-c"].running == 0 and rows["node-c"].jobs == []
    shown = rows["node-a"].jobs
    assert len(shown) == reads_nodes.RUNNING_SHOWN and rows["node-a"].jobs_not_shown == 3
    assert (shown[0].job_id, shown[0].task, shown[0].queue) == (slow, "tests.apps:add", "reports")
    assert 7200 <= shown[0].elapsed < 7200 + 600
    assert {j.job_id for j in shown[1:]} <= {c.job_id for c in claimed}
    assert [(j.job_id, j.queue) for j in rows["node-b"].jobs] == [(other, "default")]

    page = console.get("/ratchet/nodes").text
    a = node_row(page, "node-a")
    assert re.findall(r'jobs\?queue=([^"]+)"><code>', a) == ["mail", "reports"]
    assert "23 / 4" in text(a)
    assert text(a).count("tests.apps:send_mail") == 19
    assert "tests.apps:add reports · 2 h 00 m" in text(a)
    assert f'href="/ratchet/jobs/{slow}"' in a
    assert 'href="/ratchet/jobs?node=node-a&amp;status=RUNNING">and 3 more</a>' in a
    assert "every queue" in text(node_row(page, "node-b"))
    assert "tests.apps:add default" in text(node_row(page, "node-b"))
    assert "No worker" not in page


def test_after_a_clean_stop_the_nodes_page_names_the_last_workers(
    app: Flask, console: Console
) -> None:
    assert "No worker has reported in" in console.get("/ratchet/nodes").text
    job_id = ratchet.enqueue(send_mail, "a@example.com").submit().id
    for node_id, queues in (("worker-1", {"mail": None}), ("worker-2", None)):
        worker = Worker(app, concurrency=1, burst=True, node_id=node_id, queues=queues)
        thread = threading.Thread(target=worker.run, name="test-worker")
        thread.start()
        thread.join(60)
        assert not thread.is_alive(), "the burst worker did not finish"
    assert ratchet.get_job(job_id).status == "SUCCEEDED"  # type: ignore[union-attr]
    # The node rows are gone, as before: nothing counts a stopped worker live.
    assert count("ratchet_node") == 0
    page = console.get("/ratchet/nodes").text
    assert "No worker has reported in" not in page
    said = text(page)
    assert "No worker is running. Last seen:" in said
    found = re.findall(r"node (worker-\d) on (\S+) \(pid (\d+)\) stopped cleanly ", said)
    assert [name for name, _, _ in found] == ["worker-2", "worker-1"]
    rows = [r for r in audit_rows() if r.action == WORKER_STOPPED]
    assert [(r.actor, r.role, r.scope, r.changed) for r in rows] == [
        ("worker-1", "worker", "node", 1),
        ("worker-2", "worker", "node", 1),
    ]
    assert json.loads(rows[0].target)["queues"] == ["mail"]
    assert json.loads(rows[1].target)["queues"] is None
    # Not an operator's action: the overview's recent actions leave it out.
    assert "worker-stopped" not in console.get("/ratchet/").text
    # A worker that reports in again is what the page shows.
    add_node("worker-3")
    page = console.get("/ratchet/nodes").text
    assert "No worker is running" not in page and 'data-node="worker-3"' in page
