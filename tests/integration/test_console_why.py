"""The job page says why a job whose time has come does not run: its queue is paused, no live
worker (or none taking its queue), its resource is full or at its rate, its breaker is open,
workers that do not know its task handed it back; and shows its queue."""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask

from flask_ratchet.breaker import BreakerSnapshot, BreakerState
from flask_ratchet.schema import job_queue, resource_permit
from tests.apps import add, ratchet
from tests.integration.helpers import add_node
from tests.integration.test_console import Console


@pytest.fixture
def console(app: Flask) -> Console:
    return Console(app.test_client())


def why(console: Console, job_id: uuid.UUID) -> list[str]:
    page = console.get(f"/ratchet/jobs/{job_id}").text
    found = re.search(r"<section class=\"panel why\" data-why>(.*?)</section>", page, re.S)
    if found is None:
        return []
    return [
        " ".join(re.sub(r"<[^>]+>", " ", item).split())
        for item in re.findall(r"<li>(.*?)</li>|<p class=\"muted\">(.*?)</p>", found.group(1), re.S)
        for item in item
        if item
    ]


def live_node(node_id: str, **published: Any) -> None:
    add_node(node_id, info=json.dumps(published))


def test_a_due_job_with_nothing_in_its_way_says_so_and_shows_its_queue(console: Console) -> None:
    live_node("node-a", queues=None)
    job_id = add.enqueue(1, 2).id
    page = console.get(f"/ratchet/jobs/{job_id}").text
    assert '<dt>Queue</dt><dd dir="auto"><a href="/ratchet/jobs?queue=default">default</a>' in page
    assert why(console, job_id) == [
        "Its time has come and nothing holds it: a worker takes it at its next poll."
    ]
    later = ratchet.schedule(timedelta(hours=1), add, 1, 2).submit().id
    assert "data-why" not in console.get(f"/ratchet/jobs/{later}").text  # not due: no panel


def test_a_paused_queue_and_no_live_worker_are_named(console: Console) -> None:
    job_id = ratchet.enqueue(add, 1, 2).with_queue("mail").submit().id
    assert console.post("/ratchet/queues/pause", {"name": "mail"}).status_code == 200
    reasons = why(console, job_id)
    assert reasons[0].startswith("Its queue mail is paused (since ")
    assert "by 127.0.0.1" in reasons[0] and reasons[0].endswith("See")  # the console's actor
    assert reasons[1].startswith("No worker is live")


def test_workers_that_take_other_queues_are_named(console: Console) -> None:
    live_node("node-a", queues=["reports"])
    live_node("node-b", queues=["mail", "reports"])
    job_id = ratchet.enqueue(add, 1, 2).with_queue("bulk").submit().id
    assert why(console, job_id)[0].startswith("None of the 2 live workers takes queue bulk")
    taken = ratchet.enqueue(add, 1, 2).with_queue("mail").submit().id
    assert why(console, taken)[0].startswith("Its time has come")


def test_a_full_resource_an_open_breaker_and_refusals_are_named(console: Console) -> None:
    snapshot = BreakerSnapshot(BreakerState.OPEN, 10, 10, 1.0, 30.0, 0, 0, 1)
    live_node("node-a", queues=None, breakers={"tests.apps:add": asdict(snapshot)})
    ratchet.configure_resource("geo-api", max_concurrent=1)
    job_id = ratchet.enqueue(add, 1, 2).with_resource("geo-api").submit().id
    with ratchet.transaction() as conn:
        conn.execute(
            sa.insert(resource_permit).values(
                job_id=uuid.uuid4(),
                resource_name="geo-api",
                node_id="node-a",
                acquired_at=datetime.now(UTC),
            )
        )
        conn.execute(
            sa.update(job_queue)
            .where(job_queue.c.job_id == job_id)
            .values(refused_by=json.dumps([["node-z", "unknown task"]]))
        )
    reasons = why(console, job_id)
    assert reasons[0] == "Its resource geo-api is full: 1 of 1 permits are out. See"
    assert reasons[1].startswith("The circuit breaker of tests.apps:add is open on 1 of 1")
    assert reasons[2] == "Workers that do not know the task tests.apps:add handed it back: node-z."
