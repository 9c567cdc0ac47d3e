"""A live job's page refreshes only what changes while the job lives; its call is sent once, and a
long argument or result is cut to its first few KB, with a link to the whole of it."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from flask import Flask

from flask_ratchet.store.types import Finished, Outcome
from tests.apps import create_app, ratchet, send_mail
from tests.integration.test_console import Console

#: What htmx sends when the job page's live region polls.
REGION = {"HX-Request": "true", "HX-Target": "job-live"}

#: A megabyte of argument, in a shape the rest of the page cannot contain by chance.
BIG = "qz" * 500_000


@pytest.fixture
def roomy_app(database_url: str) -> Iterator[Flask]:
    app = create_app(database_url, RATCHET_MAX_PAYLOAD_BYTES=2_200_000)
    with app.app_context():
        app.extensions["ratchet"].ensure_schema()
        yield app


@pytest.fixture
def console(roomy_app: Flask) -> Console:
    return Console(roomy_app.test_client())


def test_a_region_refresh_sends_the_live_parts_without_the_arguments(console: Console) -> None:
    job_id = (
        ratchet.enqueue(send_mail, BIG).with_tags("vip").with_business_key("order-7").submit().id
    )
    ratchet.claim_due(10, "node-a")  # running: the page polls
    url = f"/ratchet/jobs/{job_id}"
    page = console.get(url).text
    assert 'id="job-live"' in page and "every 2s" in page
    live = page[page.index('id="job-live"') : page.index('id="call"')]
    assert "qzqz" not in live and "order-7" not in live  # sent once, outside the region
    assert "order-7" in page and 'class="tag"' in page

    region = console.get(url, headers=REGION)
    assert region.status_code == 200
    text = region.text
    assert 'id="job-live"' in text and "every 2s" in text and "data-attempt" in text
    assert "qz" not in text and "Arguments" not in text and "order-7" not in text
    assert "<header" not in text and 'id="alarms"' not in text  # no layout either
    assert len(region.data) < 20_000 < len(BIG)


def test_a_long_argument_is_cut_with_a_link_to_the_whole(console: Console) -> None:
    job_id = ratchet.enqueue(send_mail, BIG).submit().id
    url = f"/ratchet/jobs/{job_id}"
    page = console.get(url).text
    assert "qz" * 1000 in page and BIG not in page
    assert len(page) < 30_000
    link = f'href="{url}?args=all#arguments" data-show-all>Show all (977 KB)</a>'
    assert link in page
    whole = console.get(f"{url}?args=all").text
    assert BIG in whole and "data-show-all" not in whole.split('id="call"')[1]


def test_a_long_result_is_cut_with_a_link_to_the_whole(console: Console) -> None:
    job_id = ratchet.enqueue(send_mail, "ann").submit().id
    (claimed,) = ratchet.claim_due(10, "node-a")
    done = Finished(
        job_id, Outcome.SUCCEEDED, claimed.task, claimed.attempt, result=json.dumps(BIG)
    )
    runtime = ratchet.runtime
    with runtime.store.begin(runtime.engine) as conn:
        assert job_id in runtime.store.executions.complete_many(conn, "node-a", [done])
    url = f"/ratchet/jobs/{job_id}"
    page = console.get(url).text
    assert "qz" * 1000 in page and BIG not in page
    assert f'href="{url}?result=all#result"' in page
    whole = console.get(f"{url}?result=all").text
    assert BIG in whole
    # Its refresh (after an action) keeps showing the whole result.
    assert f'hx-get="{url}?result=all"' in whole
