"""The audit page: every console action, newest first, in keyset pages, filtered by who and
what, with the filter a filter action used spelt out."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from flask import Flask

from flask_ratchet.console.filters import PAGE_SIZES
from tests.apps import ratchet
from tests.integration.test_console import Console


@pytest.fixture
def console(app: Flask) -> Console:
    return Console(app.test_client())


def record(at: datetime, actor: str, action: str, scope: str, target: str) -> None:
    with ratchet.transaction() as conn:
        ratchet.runtime.store.cluster.record_audit(
            conn,
            at=at,
            actor=actor,
            role="admin",
            action=action,
            scope=scope,
            target=target,
            requested=3,
            changed=2,
        )


def shown_targets(html: str) -> list[str]:
    """The "On" cells of the audit table, in order (job ids are shown short: the queue names
    here stand for rows)."""
    return re.findall(r"queue <a [^>]*><code><bdi>([^<]+)</bdi></code>", html)


def test_pages_run_newest_first_without_gaps_or_repeats(console: Console) -> None:
    size = PAGE_SIZES[0]
    start = datetime(2026, 1, 1, tzinfo=UTC)
    # Three rows share each instant: their order is their ids' (time ordered), newest last.
    names = [f"q{i:03d}" for i in range(size + 7)]
    for i, name in enumerate(names):
        record(start + timedelta(seconds=i // 3), "ann", "pause-queue", "queue", name)
    first = console.get(f"/ratchet/audit?size={size}")
    assert first.status_code == 200
    on_first = shown_targets(first.text)
    assert on_first == list(reversed(names))[:size]
    found = re.search(r'rel="next" href="([^"]+)"', first.text)
    assert found is not None
    second = console.get(found.group(1).replace("&amp;", "&"))
    assert shown_targets(second.text) == list(reversed(names))[size:]
    assert 'rel="next"' not in second.text


def test_a_filter_action_names_its_filter_and_the_page_filters_by_who_and_what(
    console: Console,
) -> None:
    now = datetime.now(UTC)
    used = {"filter": {"status": "FAILED", "task": "shop.mail:send"}, "changed": []}
    record(now, "ann", "retry", "filter", json.dumps(used))
    record(now + timedelta(seconds=1), "bob", "pause-queue", "queue", "emails")
    page = console.get("/ratchet/audit").text
    assert "filter <code" in page and "status=FAILED task=shop.mail:send" in page
    assert "2 of 3" in page
    by_bob = console.get("/ratchet/audit?actor=bob").text
    assert shown_targets(by_bob) == ["emails"] and "status=FAILED" not in by_bob
    retries = console.get("/ratchet/audit?what=retry").text
    assert shown_targets(retries) == [] and "status=FAILED" in retries
    assert "No action matches." in console.get("/ratchet/audit?actor=carol").text


@pytest.mark.parametrize(
    ("query", "field"),
    [("actor=" + "x" * 256, "actor"), ("what=" + "y" * 33, "what"), ("cursor=j.1", "cursor")],
)
def test_bad_parameters_are_refused_naming_the_field(
    console: Console, query: str, field: str
) -> None:
    answer = console.get(f"/ratchet/audit?{query}")
    assert answer.status_code == 400 and field in answer.text


def test_the_overview_links_to_every_action(console: Console) -> None:
    record(datetime.now(UTC), "ann", "resume-queue", "queue", "emails")
    page = console.get("/ratchet/").text
    assert 'href="/ratchet/audit"' in page and "emails" in page
