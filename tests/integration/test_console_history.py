"""A job's status history on its console page, put together from attempts, audit rows and its
flow decision."""

from __future__ import annotations

import re

from flask import Flask

from flask_ratchet import JobStatus
from tests.apps import ratchet
from tests.flow_tasks import broken, step
from tests.integration.test_console import Console
from tests.integration.test_flows import work


def history(console: Console, job_id: object) -> list[tuple[str, str]]:
    """(status, what) of each row of the page's history table, in order."""
    page = console.get(f"/ratchet/jobs/{job_id}")
    assert page.status_code == 200
    table = page.text.split('<table class="jobs history">', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr>\s*<td[^>]*>.*?</td>\s*<td>(.*?)</td>\s*<td>(.*?)</td>", table, re.S)
    return [(re.sub(r"<[^>]+>", "", status).strip(), what.strip()) for status, what in rows]


def test_attempts_operator_actions_and_the_end_in_order(app: Flask) -> None:
    console = Console(app.test_client())
    job_id = ratchet.enqueue(broken, "<script>alert(1)</script>").submit().id
    work(app)
    assert ratchet.get_job(job_id).status == JobStatus.FAILED  # type: ignore[union-attr]
    assert console.post(f"/ratchet/jobs/{job_id}/retry").status_code == 200
    assert console.post(f"/ratchet/jobs/{job_id}/cancel").status_code == 200
    assert history(console, job_id) == [
        ("PENDING", "submitted"),
        ("RUNNING", "attempt 1 started"),
        ("FAILED", "attempt 1 failed"),
        ("PENDING", "retry by 127.0.0.1"),
        ("CANCELED", "cancel by 127.0.0.1"),  # the end itself: no separate "ended" row
    ]
    page = console.get(f"/ratchet/jobs/{job_id}").text
    assert "<script>alert(1)</script>" not in page  # the error's text is escaped


def test_a_refused_action_and_a_released_step(app: Flask) -> None:
    console = Console(app.test_client())
    handle = ratchet.enqueue(step, "a").then(step, "b").submit()
    first, second = handle.ids
    assert history(console, second) == [
        ("PENDING", "submitted"),
        ("", "waiting for the job it depends on"),
    ]
    assert console.post(f"/ratchet/jobs/{first}/retry").status_code in (200, 409)  # not FAILED
    work(app)
    assert [w for _, w in history(console, first)][-1] == "ended SUCCEEDED"
    assert "retry by 127.0.0.1 (refused)" in [w for _, w in history(console, first)]
    assert ("", "released: THEN held") in history(console, second)
    assert history(console, second)[-1] == ("SUCCEEDED", "ended SUCCEEDED")
