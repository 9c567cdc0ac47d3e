"""The dead-letter page: FAILED jobs grouped by task and fingerprint, paged with a total, and a
group retried or deleted as exactly the jobs its card counts."""

from __future__ import annotations

import html
import re
import uuid

import pytest
import sqlalchemy as sa
from flask import Flask

from flask_ratchet.schema import job
from flask_ratchet.states import JobStatus
from tests.apps import add, charge, ratchet
from tests.integration.helpers import dead_letters, finish
from tests.integration.test_console import Console, confirmed_form

ADD = "tests.apps:add"
#: Between the first and the last group's number on the page.
DASH = "\N{EN DASH}"
CHARGE = "billing.charge"


@pytest.fixture
def console(app: Flask) -> Console:
    return Console(app.test_client())


def fingerprints(ids: list[uuid.UUID]) -> list[str | None]:
    with ratchet.transaction() as conn:
        found = dict(
            (r.job_id, r.fingerprint)
            for r in conn.execute(
                sa.select(job.c.job_id, job.c.fingerprint).where(job.c.job_id.in_(ids))
            )
        )
    return [found[i] for i in ids]


def cards(page: str) -> list[tuple[str, str, int]]:
    """Each card of the page: (task, fingerprint, jobs), in the page's order."""
    found = re.findall(
        r'<section class="panel group" data-task="([^"]*)" data-jobs="(\d+)">\s*<h2><code '
        r'class="fingerprint" dir="auto" hx-disable>([^<]*)</code>',
        page,
    )
    return [(task, text, int(jobs)) for task, jobs, text in found]


def statuses(ids: list[uuid.UUID]) -> set[JobStatus]:
    return {ratchet.get_job(i).status for i in ids}  # type: ignore[union-attr]


def test_dead_letters_group_by_task_and_fingerprint(console: Console) -> None:
    orders = dead_letters([f"ValueError: order {n} not found" for n in range(1, 6)])
    invoices = dead_letters([f"ValueError: invoice 'INV-{n}' missing" for n in range(2)])
    charges = dead_letters(["ValueError: order 77 not found"], task=charge)
    assert fingerprints(orders + invoices + charges) == (
        ["ValueError: order {n} not found"] * 5
        + ["ValueError: invoice '{s}' missing"] * 2
        + ["ValueError: order {n} not found"]
    )
    page = console.get("/ratchet/dead-letters")
    assert page.status_code == 200
    assert cards(page.text) == [
        (ADD, "ValueError: order {n} not found", 5),
        (ADD, "ValueError: invoice &#39;{s}&#39; missing", 2),
        (CHARGE, "ValueError: order {n} not found", 1),
    ]
    assert f"Showing 1{DASH}3 of 3 groups" in page.text
    assert "5 jobs</span> · 3 samples" in page.text  # the newest three of five
    for newest in orders[-3:]:
        assert f"/ratchet/jobs/{newest}" in page.text
    assert f"/ratchet/jobs/{orders[0]}" not in page.text
    assert "ValueError: order 5 not found" in page.text  # a sample's own message
    assert "Next page" not in page.text


def test_retrying_a_group_retries_exactly_its_jobs(console: Console) -> None:
    group = dead_letters([f"KeyError: 'cust-{n}' unknown at 10.0.0.{n}:5432" for n in range(7)])
    same_task = dead_letters([f"KeyError: cust {n} unknown" for n in range(4)])
    other_task = dead_letters(["KeyError: 'cust-1' unknown at 10.0.0.1:5432"], task=charge)
    page = console.get("/ratchet/dead-letters")
    shown = "KeyError: &#39;{s}&#39; unknown at {ip}"
    assert (ADD, shown, 7) in cards(page.text)
    link = re.search(r'href="(/ratchet/jobs/bulk\?action=retry[^"]*)">Retry 7…', page.text)
    assert link is not None
    confirm = console.get(html.unescape(link.group(1)))
    assert confirm.status_code == 200 and "<strong>7</strong> jobs match" in confirm.text
    form = confirmed_form(confirm)
    assert form["next"] == "/ratchet/dead-letters"  # where "back" leads
    assert 'href="/ratchet/dead-letters">Cancel</a>' in confirm.text
    done = console.post("/ratchet/jobs/bulk", form)
    assert "7 of 7 jobs retried" in done.text
    assert 'href="/ratchet/dead-letters">Back</a>' in done.text
    assert statuses(group) == {JobStatus.PENDING}
    assert statuses(same_task + other_task) == {JobStatus.FAILED}
    assert fingerprints(group) == [None] * 7  # no longer a dead letter
    after = cards(console.get("/ratchet/dead-letters").text)
    assert after == [(ADD, "KeyError: cust {n} unknown", 4), (CHARGE, shown, 1)]


def test_deleting_a_group_deletes_exactly_its_jobs(console: Console) -> None:
    group = dead_letters([f"OSError: disk {n} full" for n in range(3)])
    others = dead_letters(["OSError: disk is gone"])
    page = console.get("/ratchet/dead-letters")
    link = re.search(r'href="(/ratchet/jobs/bulk\?action=delete[^"]*)">Delete 3…', page.text)
    assert link is not None
    confirm = console.get(html.unescape(link.group(1)))
    assert "<strong>3</strong> jobs match" in confirm.text
    assert "3 of 3 jobs deleted" in console.post("/ratchet/jobs/bulk", confirmed_form(confirm)).text
    assert [ratchet.get_job(i) for i in group] == [None] * 3
    assert statuses(others) == {JobStatus.FAILED}


def test_the_groups_are_paged_with_their_total(console: Console) -> None:
    dead_letters([f"Error{n:03d}: it broke" for n in range(103)])  # a group each
    dead_letters(["ValueError: order 1 not found", "ValueError: order 2 not found"])
    first = console.get("/ratchet/dead-letters")
    shown = cards(first.text)
    assert len(shown) == 100 and shown[0] == (ADD, "ValueError: order {n} not found", 2)
    assert f"Showing 1{DASH}100 of 104 groups" in first.text
    assert 'rel="next" href="/ratchet/dead-letters?page=2"' in first.text
    second = console.get("/ratchet/dead-letters?page=2")
    rest = cards(second.text)
    assert len(rest) == 4 and not set(rest) & set(shown)
    assert f"Showing 101{DASH}104 of 104 groups" in second.text
    assert "Next page" not in second.text and "First page" in second.text
    assert console.get("/ratchet/dead-letters?page=0").status_code == 400
    assert console.get("/ratchet/dead-letters?page=x").status_code == 400


def test_a_reader_sees_the_groups_without_their_actions(app: Flask) -> None:
    dead_letters(["ValueError: order 1 not found"])
    reader = Console(app.test_client(), role="read")
    page = reader.get("/ratchet/dead-letters")
    assert cards(page.text) == [(ADD, "ValueError: order {n} not found", 1)]
    assert "Retry 1…" not in page.text and "Delete 1…" not in page.text
    assert "the job of this group</a>" in page.text


def test_the_library_filters_by_fingerprint(app: Flask) -> None:
    group = dead_letters([f"TimeoutError: after {n}s" for n in (1, 2)])
    other = dead_letters(["TimeoutError: never"])
    found = ratchet.find_jobs(fingerprint="TimeoutError: after {n}s")
    assert sorted(j.id for j in found.items) == sorted(group)
    assert ratchet.retry_jobs(fingerprint="TimeoutError: after {n}s", task=add) == 2
    assert statuses(group) == {JobStatus.PENDING} and statuses(other) == {JobStatus.FAILED}
    with pytest.raises(ValueError, match="fingerprint must be a text"):
        ratchet.retry_jobs(fingerprint=3)  # type: ignore[typeddict-item]


def test_the_cli_retries_a_group(app: Flask) -> None:
    group = dead_letters([f"TimeoutError: after {n}s" for n in (1, 2, 3)])
    other = dead_letters(["TimeoutError: never"])
    runner = app.test_cli_runner()
    args = ["ratchet", "jobs", "retry", "--task", ADD, "--fingerprint", "TimeoutError: after {n}s"]
    counted = runner.invoke(args=[*args, "--dry-run"])
    assert counted.exit_code == 0 and "3 jobs would be retried" in counted.output
    done = runner.invoke(args=args)
    assert done.exit_code == 0 and "3 jobs retried" in done.output, done.output
    assert statuses(group) == {JobStatus.PENDING} and statuses(other) == {JobStatus.FAILED}


def test_a_job_failed_again_after_a_retry_is_fingerprinted_again(app: Flask) -> None:
    (first,) = dead_letters(["ValueError: order 1 not found"])
    assert ratchet.retry_job(first)
    assert fingerprints([first]) == [None]
    claimed = ratchet.claim_due(10, "node-a")
    assert [c.job_id for c in claimed] == [first]
    assert finish(first, JobStatus.FAILED, error="OSError: socket 9 closed")
    assert fingerprints([first]) == ["OSError: socket {n} closed"]


def test_a_paused_dead_letter_leaves_its_group_and_comes_back(console: Console) -> None:
    jobs = dead_letters([f"ValueError: order {n} not found" for n in range(3)])
    assert ratchet.pause_job(jobs[0])
    assert cards(console.get("/ratchet/dead-letters").text) == [
        (ADD, "ValueError: order {n} not found", 2)
    ]
    confirm = console.get(
        "/ratchet/jobs/bulk?action=retry&status=FAILED&task=tests.apps:add"
        "&fingerprint=ValueError:+order+{n}+not+found"
    )
    assert "<strong>2</strong> jobs match" in confirm.text
    assert ratchet.resume_job(jobs[0])
    assert cards(console.get("/ratchet/dead-letters").text) == [
        (ADD, "ValueError: order {n} not found", 3)
    ]


def test_jobs_failed_without_a_fingerprint_are_one_group_without_actions(
    console: Console,
) -> None:
    """A version without fingerprints may still fail jobs while this one runs (a rolling
    deploy): those are one group of their task, which offers no action that could reach
    more than its jobs."""
    older = dead_letters(["ValueError: order 1 not found", "ValueError: order 2 not found"])
    with ratchet.transaction() as conn:
        conn.execute(sa.update(job).where(job.c.job_id == older[0]).values(fingerprint=None))
    page = console.get("/ratchet/dead-letters")
    assert cards(page.text) == [
        (ADD, "ValueError: order {n} not found", 1),
        (ADD, "(failed before fingerprints were stored)", 1),
    ]
    assert page.text.count("Retry 1…") == 1 and "all FAILED jobs of this task" in page.text
