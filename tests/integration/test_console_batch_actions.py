"""A batch's actions in the console (cancel the batch, retry its failed children: confirmed,
audited, admins only) and its state and parallelism, on every database; and
``ratchet.cancel_batch``."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta

import pytest
import sqlalchemy as sa
from flask import Flask

from flask_ratchet.job import Job
from flask_ratchet.schema import audit, batch
from flask_ratchet.states import JobStatus
from tests.apps import add, create_app, db, ratchet
from tests.integration.helpers import count
from tests.integration.test_console import Console
from tests.integration.test_console_flows import _follow_ups, children_of, make_batch
from tests.integration.test_flows import status, work

#: How the pages write 5.7 times parallel.
PARALLEL = "5.7\N{MULTIPLICATION SIGN} parallel"


@pytest.fixture
def console(app: Flask) -> Console:
    return Console(app.test_client())


def statuses(ids: list[uuid.UUID]) -> list[JobStatus]:
    return [status(i) for i in ids]


def audit_rows() -> list[sa.Row[tuple[object, ...]]]:
    with db.engine.connect() as conn:
        return list(conn.execute(sa.select(audit).order_by(audit.c.at)).all())


def confirmed_count(page_text: str) -> int | None:
    found = re.search(r'name="count" value="(\d+)"', page_text)
    return int(found.group(1)) if found else None


def test_cancel_batch_cancels_its_parent_and_live_children_only_and_is_audited(
    console: Console, app: Flask
) -> None:
    target = make_batch("to-cancel", 4)
    other = make_batch("left-alone", 3)
    plain = ratchet.enqueue(add, 1, 2).submit().id
    first, *live = children_of(target)
    assert ratchet.cancel_job(first)  # one child ended already: it is not counted again
    page = console.get(f"/ratchet/batches/{target}")
    assert 'data-action="cancel"' in page.text and 'data-state="running"' in page.text
    assert 'data-action="retry"' in page.text  # the canceled child counts as failed
    confirm = console.get(f"/ratchet/batches/{target}/cancel")
    assert confirm.status_code == 200
    assert "<strong>4</strong> jobs can be canceled" in confirm.text  # the parent and 3 children
    assert confirmed_count(confirm.text) == 4
    assert count("ratchet_audit") == 0  # the confirmation writes nothing
    done = console.post(f"/ratchet/batches/{target}/cancel", {"count": "4"}, htmx=True)
    assert done.status_code == 200
    assert "4 of 4 jobs canceled" in done.text
    assert status(target) == JobStatus.CANCELED
    assert statuses([first, *live]) == [JobStatus.CANCELED] * 4
    assert statuses(_follow_ups(target)) == [JobStatus.CANCELED] * 2  # as the parent's were
    assert statuses([other, *children_of(other), plain]) == [JobStatus.PENDING] * 5
    (row,) = audit_rows()
    assert (row.action, row.scope, row.target) == ("cancel-batch", "batch", str(target))
    assert (row.role, row.requested, row.changed) == ("admin", 4, 4)
    after = console.get(f"/ratchet/batches/{target}")
    assert 'data-state="canceled"' in after.text and 'data-action="cancel"' not in after.text
    listed = console.get("/ratchet/batches").text
    assert listed.count('data-state="canceled"') == 1 and listed.count('data-state="running"') == 1
    # Again: the batch has settled, nothing is left to cancel.
    again = console.get(f"/ratchet/batches/{target}/cancel")
    assert "<strong>0</strong> jobs can be canceled" in again.text
    assert confirmed_count(again.text) is None


def test_retry_failed_children_retries_that_batchs_failed_children_only(
    console: Console, app: Flask
) -> None:
    target = make_batch("flaky", 6, fail_every=3)  # 3 and 6 fail
    other = make_batch("other-flaky", 4, fail_every=2)  # 2 and 4 fail
    work(app)
    failed = [i for i in children_of(target) if status(i) == JobStatus.FAILED]
    others = [i for i in children_of(other) if status(i) == JobStatus.FAILED]
    assert len(failed) == 2 and len(others) == 2
    page = console.get(f"/ratchet/batches/{target}")
    assert 'data-state="complete with failures"' in page.text
    assert 'data-action="retry"' in page.text and 'data-action="cancel"' not in page.text
    confirm = console.get(f"/ratchet/batches/{target}/retry")
    assert "<strong>2</strong> failed children can be retried" in confirm.text
    assert "This batch has settled" in confirm.text
    done = console.post(f"/ratchet/batches/{target}/retry", {"count": "2"})  # without htmx
    assert done.status_code == 200 and "2 of 2 jobs retried" in done.text
    assert statuses(failed) == [JobStatus.PENDING] * 2
    assert statuses(others) == [JobStatus.FAILED] * 2
    assert statuses([i for i in children_of(target) if i not in failed]) == (
        [JobStatus.SUCCEEDED] * 4
    )
    (row,) = audit_rows()
    assert (row.action, row.scope, row.target) == ("retry-failed-children", "batch", str(target))
    assert (row.requested, row.changed) == (2, 2)


def test_a_stale_confirmation_changes_nothing_and_asks_again(console: Console, app: Flask) -> None:
    target = make_batch("grew", 4, fail_every=2)
    work(app)
    # Confirmed for one job while two can be retried now: nothing changes, the page asks again.
    answer = console.post(f"/ratchet/batches/{target}/retry", {"count": "1"})
    assert answer.status_code == 409
    assert "nothing was changed" in answer.text and confirmed_count(answer.text) == 2
    assert [status(i) for i in children_of(target)].count(JobStatus.FAILED) == 2
    assert count("ratchet_audit") == 0


def test_the_read_role_sees_no_batch_action_and_may_not_post_one(database_url: str) -> None:
    app = create_app(database_url)
    with app.app_context():
        target = make_batch("read-only", 3, fail_every=3)
        work(app)
        reader = Console(app.test_client(), role="read")
        page = reader.get(f"/ratchet/batches/{target}")
        assert page.status_code == 200 and "data-action" not in page.text
        confirm = reader.get(f"/ratchet/batches/{target}/retry")
        assert confirm.status_code == 200 and confirmed_count(confirm.text) is None
        for action in ("retry", "cancel"):
            refused = reader.post(f"/ratchet/batches/{target}/{action}", {"count": "9"})
            assert refused.status_code == 403, action
        assert [status(i) for i in children_of(target)].count(JobStatus.FAILED) == 1
        assert count("ratchet_audit") == 0
        db.engine.dispose()


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("/ratchet/batches/{batch}/explode", 400),
        (f"/ratchet/batches/{uuid.UUID(int=7)}/cancel", 404),
        ("/ratchet/batches/not-an-id/retry", 404),
    ],
)
def test_bad_batch_actions_are_refused(console: Console, url: str, code: int) -> None:
    target = make_batch("bad", 2)
    assert console.get(url.format(batch=target)).status_code == code
    posted = console.post(url.format(batch=target), {"count": "1"})
    assert posted.status_code == code
    for bad in ("", "-1", "x", "1e3"):
        answer = console.post(f"/ratchet/batches/{target}/cancel", {"count": bad})
        assert answer.status_code == 400, bad
    assert statuses(children_of(target)) == [JobStatus.PENDING] * 2
    assert count("ratchet_audit") == 0


def test_a_batch_of_plain_job_is_no_batch(console: Console) -> None:
    plain = ratchet.enqueue(add, 1, 2).submit().id
    assert console.get(f"/ratchet/batches/{plain}/cancel").status_code == 404
    assert console.post(f"/ratchet/batches/{plain}/cancel", {"count": "1"}).status_code == 404
    assert status(plain) == JobStatus.PENDING


def test_batch_states_and_parallelism_for_known_figures(console: Console, app: Flask) -> None:
    fine = make_batch("fine", 3)
    work(app)
    running = make_batch("running", 2)
    # Known times: ten seconds of wall time for 57 seconds of the children's summed run time.
    with ratchet.transaction() as conn:
        created = conn.execute(sa.select(batch.c.created_at).where(batch.c.batch_id == fine))
        start = created.scalar_one()
        conn.execute(
            sa.update(batch)
            .where(batch.c.batch_id == fine)
            .values(child_run_ms=57_000.0, finished_at=start + timedelta(seconds=10))
        )
    listed = console.get("/ratchet/batches").text
    row = listed[listed.index(f'data-batch="{fine}"') :]
    row = row[: row.index("</tr>")]
    assert 'data-state="complete">complete</span>' in row
    assert PARALLEL in row and "Overhead" not in listed
    page = console.get(f"/ratchet/batches/{fine}").text
    assert f"<dt>Parallelism</dt><dd>{PARALLEL}</dd>" in page
    assert "negative when" not in page
    other = listed[listed.index(f'data-batch="{running}"') :]
    assert 'data-state="running">running</span>' in other[: other.index("</tr>")]
    job_page = console.get(f"/ratchet/jobs/{fine}").text  # the Flow section: the batch's state
    flow = job_page[job_page.index('id="job-flow"') :]
    assert 'data-state="complete"' in flow


def test_ratchet_cancel_batch_cancels_once(app: Flask) -> None:
    target = make_batch("api", 3)
    assert ratchet.cancel_batch(target, actor="ops") == 4
    assert ratchet.cancel_batch(target) == 0  # settled: nothing left to cancel
    assert statuses([target, *children_of(target)]) == [JobStatus.CANCELED] * 4
    (row,) = audit_rows()
    assert (row.actor, row.role, row.action, row.changed) == ("ops", "app", "cancel-batch", 4)
    found = ratchet.get_job(target)
    assert isinstance(found, Job) and found.status == JobStatus.CANCELED
    assert ratchet.retry_jobs(batch=target) == 0  # canceled children are not retried
    with pytest.raises(ValueError, match="is not a job id"):
        ratchet.cancel_batch("nope")
