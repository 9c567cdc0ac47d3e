"""The job list's filters on several statuses, its search by short id and by error text, and
FAILED jobs sorted by when they failed: list, pages, banner and bulk actions agree."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from flask import Flask

from flask_ratchet.schema import job
from flask_ratchet.states import JobStatus
from tests.apps import add, ratchet
from tests.integration.helpers import dead_letters, job_in
from tests.integration.test_console import Console, confirmed_form

ADMIN_ONLY = 403


@pytest.fixture
def console(app: Flask) -> Console:
    return Console(app.test_client())


def listed(console: Console, url: str) -> list[str]:
    """Every job id the list shows at ``url``, page after page (the "next" links)."""
    seen: list[str] = []
    next_url: str | None = url
    while next_url:
        page = console.get(next_url)
        assert page.status_code == 200, (next_url, page.text[-300:])
        seen += re.findall(r'name="job_id" value="([0-9a-f-]{36})"', page.text)
        found = re.search(r'rel="next" href="([^"]+)"', page.text)
        next_url = found.group(1).replace("&amp;", "&") if found else None
    return seen


def canceled(n: int) -> list[uuid.UUID]:
    ids = [h.id for h in ratchet.enqueue_many(ratchet.enqueue(add, i, 0) for i in range(n))]
    for job_id in ids:
        assert ratchet.cancel_job(job_id)
    return ids


# -- several statuses --------------------------------------------------------------------------


def test_several_statuses_list_page_and_count_new_jobs(console: Console) -> None:
    failed = dead_letters(["boom", "bang"])
    gone = canceled(25)
    pending = ratchet.enqueue(add, 1, 2).submit().id
    wanted = {str(i) for i in [*failed, *gone]}
    for query in (
        "status=FAILED&status=CANCELED",
        "status=failed,canceled",
        "status=CANCELED&status=FAILED&status=FAILED",
    ):
        seen = listed(console, f"/ratchet/jobs?{query}&size=25")
        assert sorted(seen) == sorted(wanted) and len(seen) == len(wanted), query
    assert str(pending) not in listed(console, "/ratchet/jobs?status=FAILED&status=CANCELED")
    page = console.get("/ratchet/jobs?status=failed&status=canceled")
    assert "<b>FAILED,CANCELED</b>" in page.text  # the summary names both, as the form does
    assert '<option value="FAILED" selected>' in page.text
    assert '<option value="CANCELED" selected>' in page.text
    assert '<option value="PENDING" selected>' not in page.text
    banner = console.get(
        f"/ratchet/jobs/new-count?newest={failed[0]}&status=FAILED&status=CANCELED"
    )
    assert "26 new jobs" in banner.text  # the other FAILED and the 25 CANCELED, not PENDING


@pytest.mark.parametrize(
    "query",
    [
        "status=FAILED&status=NOPE",
        "status=FAILED,,DONE",
        "status=PENDING&status=RUNNING&sub=due",
        "status=FAILED&sort=failed&status=CANCELED",
    ],
)
def test_a_bad_status_among_several_is_refused(console: Console, query: str) -> None:
    page = console.get(f"/ratchet/jobs?{query}")
    assert page.status_code == 400
    name = "sort" if "sort" in query else "sub" if "sub" in query else "status"
    assert name in page.text


def test_a_substate_keeps_working_with_one_status(console: Console) -> None:
    due = ratchet.enqueue(add, 1, 2).submit().id
    assert listed(console, "/ratchet/jobs?status=pending&sub=due") == [str(due)]
    assert listed(console, "/ratchet/jobs?sub=due") == [str(due)]


def test_bulk_confirmation_counts_what_the_action_changes_across_statuses(
    console: Console,
) -> None:
    failed = dead_letters(["boom", "bang"])
    succeeded = job_in(JobStatus.SUCCEEDED)
    gone = canceled(2)
    pending = ratchet.enqueue(add, 1, 2).submit().id
    # Retry starts from FAILED only: the CANCELED jobs of the filter are not counted.
    retry = console.get("/ratchet/jobs/bulk?action=retry&status=FAILED&status=CANCELED")
    assert "<strong>2</strong> jobs match" in retry.text
    confirm = console.get("/ratchet/jobs/bulk?action=delete&status=FAILED&status=canceled")
    assert "<strong>4</strong> jobs match" in confirm.text
    form = confirmed_form(confirm)
    assert form["status"] == "FAILED,CANCELED" and form["count"] == "4"
    done = console.post("/ratchet/jobs/bulk", form)
    assert "4 of 4 jobs deleted" in done.text
    assert all(ratchet.get_job(i) is None for i in [*failed, *gone])
    assert ratchet.get_job(succeeded) is not None and ratchet.get_job(pending) is not None


# -- short ids ---------------------------------------------------------------------------------


def test_a_short_id_prefix_finds_the_jobs_it_starts(app: Flask, console: Console) -> None:
    ids = [h.id for h in ratchet.enqueue_many(ratchet.enqueue(add, i, 0) for i in range(3))]
    target = str(ids[1])
    # 24 hex digits (the time and some of the random part) name one job; every role may look.
    reader = Console(app.test_client(), role="read")
    for prefix in (target[:28], target[:28].replace("-", ""), target[:28].upper()):
        page = reader.get(f"/ratchet/jobs?q={prefix}")
        assert page.status_code == 200, prefix
        assert page.text.count(f'href="/ratchet/jobs/{target}"') >= 1, prefix
        assert listed(console, f"/ratchet/jobs?q={prefix}") == [target], prefix
    # The short id the console shows (8 digits) finds the jobs created in the same minute.
    assert set(listed(console, f"/ratchet/jobs?q={target[:8]}")) >= {str(i) for i in ids}
    assert listed(console, "/ratchet/jobs?q=00000000") == []
    assert listed(console, "/ratchet/jobs?q=ffffffff-ffff") == []
    # Fewer than 8 digits, or hyphens where an id has none, are argument text (admins only).
    assert reader.get(f"/ratchet/jobs?q={target[:7]}").status_code == ADMIN_ONLY
    assert reader.get(f"/ratchet/jobs?q={target[:4]}-{target[4:10]}").status_code == ADMIN_ONLY
    count = console.get(f"/ratchet/jobs/new-count?newest={ids[0]}&q={target[:28]}")
    assert "1 new job" in count.text


# -- error text --------------------------------------------------------------------------------


def test_error_search_matches_wildcards_as_plain_text(app: Flask, console: Console) -> None:
    full, thousand, under, other = dead_letters(
        ["disk 100% full", "disk 1000 full", "bad a_b value", "bad axb value"]
    )
    pending = job_in(JobStatus.PENDING)
    cases = {
        "100%": [full],
        "100": [full, thousand],
        "a_b": [under],
        "bad a": [under, other],
        "nowhere": [],
    }
    for term, expected in cases.items():
        query = f"/ratchet/jobs?error={term.replace('%', '%25')}"
        assert listed(console, query) == [str(i) for i in reversed(expected)], term
    page = console.get("/ratchet/jobs?error=disk&status=FAILED")
    assert "Error text is looked for in the newest" in page.text
    assert 'name="error" value="disk"' in page.text
    assert str(pending) not in listed(console, "/ratchet/jobs?error=disk")
    bulk = console.get("/ratchet/jobs/bulk?action=retry&error=100%25")
    assert (
        "<strong>1</strong> jobs match" in bulk.text
        or "<strong>1</strong> job matches" in bulk.text
    )
    reader = Console(app.test_client(), role="read")
    assert reader.get("/ratchet/jobs?error=disk").status_code == ADMIN_ONLY
    assert 'name="error"' not in reader.get("/ratchet/jobs").text
    assert console.get("/ratchet/jobs?error=password").status_code == 400
    assert console.get("/ratchet/jobs?error=" + "e" * 201).status_code == 400


# -- FAILED by when it failed ------------------------------------------------------------------


def test_failed_jobs_sort_by_when_they_failed_across_pages(console: Console) -> None:
    failed = dead_letters([f"error {i}" for i in range(30)])
    start = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    # Out of id order, with ties (broken by id, newest first).
    ended = {job_id: start + timedelta(minutes=(i * 7) % 11) for i, job_id in enumerate(failed)}
    with ratchet.transaction() as conn:
        for job_id, at in ended.items():
            conn.execute(sa.update(job).where(job.c.job_id == job_id).values(finished_at=at))
    job_in(JobStatus.SUCCEEDED)  # ended too, but not FAILED
    expected = [str(i) for i in sorted(failed, key=lambda i: (ended[i], i), reverse=True)]
    assert listed(console, "/ratchet/jobs?status=FAILED&sort=failed&size=25") == expected
    assert listed(console, "/ratchet/jobs?status=failed&sort=failed&error=error%201") == [
        str(i)
        for i in sorted(failed[1:2] + failed[10:20], key=lambda i: (ended[i], i), reverse=True)
    ]
    page = console.get("/ratchet/jobs?status=FAILED&sort=failed")
    assert "failed most recently" in page.text


@pytest.mark.parametrize(
    "query",
    [
        "sort=failed",
        "status=PENDING&sort=failed",
        f"status=FAILED&sort=failed&cursor=f.99999999999999999999.{uuid.UUID(int=1)}",
        f"status=FAILED&sort=failed&cursor=n.{uuid.UUID(int=1)}",
        f"status=FAILED&cursor=f.1.{uuid.UUID(int=1)}",
    ],
)
def test_sort_failed_needs_the_failed_status_and_its_own_cursors(
    console: Console, query: str
) -> None:
    page = console.get(f"/ratchet/jobs?{query}")
    assert page.status_code == 400
    assert ("cursor" if "cursor" in query else "sort") in page.text
