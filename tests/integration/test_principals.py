"""Who submitted a job, and who may see it, on every database: ``RATCHET_PRINCIPAL`` is written
into each job and filters lists; ``RATCHET_AUTHORIZE`` refuses a create before anything is
written and hides another tenant's jobs from reads, operations, bulk operations and the
console."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask, has_request_context, request

from flask_ratchet import Job, JobNotAuthorized, JobNotFound, JobStatus
from flask_ratchet.errors import ConfigError
from flask_ratchet.schema import job as job_table
from tests.apps import add, approve, create_app, db, ratchet
from tests.integration.helpers import count, finish
from tests.integration.test_console import Console
from tests.integration.test_flows import work

#: Who the test is acting as, outside a request (inside one: the ``X-User`` header).
acting: dict[str, str | None] = {"as": None}


def who() -> str | None:
    if has_request_context():
        return request.headers.get("X-User")
    return acting["as"]


def tenant(principal: str | None) -> str | None:
    return None if principal is None else principal.partition("@")[2]


def same_tenant(principal: str | None, operation: str, job: Job) -> bool:
    """The policy: nobody named (the app itself) may do anything; mallory may create nothing;
    everyone else sees and changes their own tenant's jobs only."""
    if principal is None:
        return True
    if operation == "create":
        return principal != "mallory@t3"
    return tenant(principal) == tenant(job.principal)


@pytest.fixture
def tenants(database_url: str) -> Iterator[Flask]:
    app = create_app(database_url, RATCHET_PRINCIPAL=who, RATCHET_AUTHORIZE=same_tenant)
    with app.app_context():
        app.extensions["ratchet"].ensure_schema()
        yield app
        acting["as"] = None
        db.session.remove()
        db.engine.dispose()


def submitted_as(principal: str | None, *builders: Any) -> list[uuid.UUID]:
    acting["as"] = principal
    try:
        return [h.id for h in ratchet.enqueue_many(builders)]
    finally:
        acting["as"] = None


def test_the_principal_is_written_into_each_job_and_filters_lists(tenants: Flask) -> None:
    alice = submitted_as("alice@t1", ratchet.enqueue(add, 1, 1), ratchet.enqueue(add, 2, 2))
    (bob,) = submitted_as("bob@t2", ratchet.enqueue(add, 3, 3))
    (anon,) = submitted_as(None, ratchet.enqueue(add, 4, 4))
    assert [ratchet.get_job(i).principal for i in (*alice, bob, anon)] == [  # type: ignore[union-attr]
        "alice@t1",
        "alice@t1",
        "bob@t2",
        None,
    ]
    assert [j.id for j in ratchet.find_jobs(principal="alice@t1").items] == alice[::-1]
    listed = tenants.test_cli_runner().invoke(
        args=["ratchet", "jobs", "list", "--principal", "bob@t2"]
    )
    assert (
        listed.exit_code == 0 and str(bob) in listed.output and str(alice[0]) not in listed.output
    )
    page = Console(tenants.test_client()).get("/ratchet/jobs?principal=alice%40t1").text
    assert all(str(i) in page for i in alice) and str(bob) not in page
    detail = Console(tenants.test_client()).get(f"/ratchet/jobs/{bob}").text
    assert "Submitted by" in detail and "bob@t2" in detail


def test_a_denied_create_writes_nothing_and_leaves_the_transaction_usable(
    tenants: Flask,
) -> None:
    acting["as"] = "mallory@t3"
    with pytest.raises(JobNotAuthorized, match="does not let 'mallory@t3' create"):
        ratchet.enqueue(add, 1, 2).submit()
    with pytest.raises(JobNotAuthorized):
        ratchet.enqueue_many([ratchet.enqueue(add, 1, 2), ratchet.enqueue(add, 3, 4)])
    with pytest.raises(JobNotAuthorized):
        ratchet.enqueue_batch("refused").add(add, 1, 2).submit()
    acting["as"] = "alice@t1"
    kept = ratchet.enqueue(add, 5, 6).submit().id  # the same session goes on
    db.session.commit()
    assert count("ratchet_job") == 1 and ratchet.get_job(kept) is not None


def test_another_tenants_job_is_invisible_and_unchangeable(tenants: Flask) -> None:
    (mine,) = submitted_as("bob@t2", ratchet.enqueue(add, 1, 1).with_tags("shared"))
    theirs = submitted_as(
        "alice@t1",
        ratchet.enqueue(add, 2, 2).with_tags("shared"),
        ratchet.enqueue(approve, "a").await_signal("go", timeout=timedelta(hours=1)),
    )
    (waiting_mine,) = submitted_as(
        "bob@t2", ratchet.enqueue(approve, "b").await_signal("go", timeout=timedelta(hours=1))
    )
    acting["as"] = "bob@t2"
    assert ratchet.get_job(theirs[0]) is None
    assert [j.id for j in ratchet.find_jobs(tag="shared").items] == [mine]
    assert [j.id for j in ratchet.find_jobs(limit=1).items] == [waiting_mine]
    with pytest.raises(JobNotFound):
        ratchet.wait(theirs[0], timeout=0.1)
    assert not ratchet.cancel_job(theirs[0]) and not ratchet.pause_job(theirs[0])
    with pytest.raises(JobNotFound):
        ratchet.replace(theirs[0], 0, add, 9, 9)
    assert ratchet.deliver_signal("go") == 1  # only bob's waiting job
    assert ratchet.cancel_jobs(tag="shared") == 1
    acting["as"] = None  # the app itself sees every job
    assert ratchet.get_job(mine).status == JobStatus.CANCELED  # type: ignore[union-attr]
    assert ratchet.get_job(theirs[0]).status == JobStatus.PENDING  # type: ignore[union-attr]
    assert ratchet.get_job(theirs[1]).status == JobStatus.WAITING  # type: ignore[union-attr]
    assert ratchet.get_job(waiting_mine).status == JobStatus.PENDING  # type: ignore[union-attr]


def test_the_console_shows_an_operator_only_their_tenants_jobs(tenants: Flask) -> None:
    (mine,) = submitted_as("bob@t2", ratchet.enqueue(add, 1, 1))
    (theirs,) = submitted_as("alice@t1", ratchet.enqueue(add, 2, 2))
    console = Console(tenants.test_client())
    console.headers["X-User"] = "ops@t2"
    listed = console.get("/ratchet/jobs").text
    assert str(mine) in listed and str(theirs) not in listed
    assert console.get(f"/ratchet/jobs/{theirs}").status_code == 404
    assert console.get(f"/ratchet/jobs/{mine}").status_code == 200
    assert console.post(f"/ratchet/jobs/{theirs}/cancel").status_code in (200, 303, 409)
    done = console.post(
        "/ratchet/jobs/selected", {"action": "cancel", "job_id": [str(mine), str(theirs)]}
    )
    assert done.status_code in (200, 303, 409)
    work(tenants)
    assert ratchet.get_job(mine).status == JobStatus.CANCELED  # type: ignore[union-attr]
    assert ratchet.get_job(theirs).status == JobStatus.SUCCEEDED  # type: ignore[union-attr]


def test_a_principal_that_is_no_text_is_a_clear_error(database_url: str) -> None:
    app = create_app(database_url, RATCHET_PRINCIPAL=lambda: ["not", "a", "name"])
    with app.app_context(), pytest.raises(ConfigError, match="RATCHET_PRINCIPAL must return"):
        ratchet.enqueue(add, 1, 2).submit()
    with pytest.raises(ConfigError, match="RATCHET_AUTHORIZE must be a callable"):
        create_app(database_url, RATCHET_AUTHORIZE="allow")


def test_recurring_jobs_ask_for_create_and_a_run_now_child_is_the_callers(
    tenants: Flask,
) -> None:
    acting["as"] = "mallory@t3"
    with pytest.raises(JobNotAuthorized):
        ratchet.schedule_recurring("@every 1h", "UTC", add, 1, 2).submit()
    assert count("ratchet_recurring") == 0
    acting["as"] = None
    master = ratchet.schedule_recurring("@every 1h", "UTC", add, 1, 2).submit()
    acting["as"] = "mallory@t3"
    with pytest.raises(JobNotAuthorized):
        ratchet.run_recurring_now(master.id)
    assert count("ratchet_job") == 0
    acting["as"] = "bob@t2"
    child = ratchet.run_recurring_now(master.id)
    assert child is not None and ratchet.get_job(child.id).principal == "bob@t2"  # type: ignore[union-attr]


def test_a_replacement_keeps_the_principal_and_hidden_batches_logs_and_counts_stay_hidden(
    tenants: Flask,
) -> None:
    (bobs,) = submitted_as("bob@t2", ratchet.enqueue(add, 1, 1).with_tags("t"))
    new = ratchet.replace(bobs, 0, add, 2, 2).id  # by the app itself
    assert ratchet.get_job(new).principal == "bob@t2"  # type: ignore[union-attr]
    acting["as"] = "alice@t1"
    batch = ratchet.enqueue_batch("alices")
    batch.add(add, 3, 3)
    parent = batch.submit().id
    acting["as"] = "bob@t2"
    assert ratchet.batch_progress(parent) is None
    assert ratchet.get_job(new) is not None
    runner = tenants.test_cli_runner()
    dry = runner.invoke(args=["ratchet", "jobs", "cancel", "--task", "tests.apps:add", "--dry-run"])
    assert dry.exit_code == 0 and "1 job would be canceled" in dry.output, dry.output
    console = Console(tenants.test_client())
    console.headers["X-User"] = "ops@t2"
    assert console.get(f"/ratchet/batches/{parent}").status_code == 404
    console.headers["X-User"] = "ops@t1"
    assert console.get(f"/ratchet/batches/{parent}").status_code == 200


def test_the_dead_letters_and_batches_an_operator_sees_are_their_tenants(tenants: Flask) -> None:
    (mine,) = submitted_as("bob@t2", ratchet.enqueue(add, 1, 1))
    (theirs,) = submitted_as("alice@t1", ratchet.enqueue(add, 2, 2))
    assert len(ratchet.claim_due(10, "node-a")) == 2
    assert finish(mine, JobStatus.FAILED, error="bob's card declined")
    assert finish(theirs, JobStatus.FAILED, error="alice's card declined")
    acting["as"] = "alice@t1"
    batch = ratchet.enqueue_batch("alices-batch")
    batch.add(add, 3, 3)
    parent = batch.submit().id
    acting["as"] = None
    console = Console(tenants.test_client())
    console.headers["X-User"] = "ops@t2"
    letters = console.get("/ratchet/dead-letters").text
    assert "bob&#39;s card declined" in letters and "alice" not in letters
    assert str(parent) not in console.get("/ratchet/batches").text
    console.headers["X-User"] = "ops@t1"
    letters = console.get("/ratchet/dead-letters").text
    assert "alice&#39;s card declined" in letters and "bob" not in letters
    assert str(parent) in console.get("/ratchet/batches").text


def test_a_batch_is_canceled_only_by_whom_may_cancel_every_live_job_of_it(
    tenants: Flask,
) -> None:
    acting["as"] = "alice@t1"
    mixed = ratchet.enqueue_batch("mixed").add(add, 1, 1).add(add, 2, 2).submit().id
    own = ratchet.enqueue_batch("own").add(add, 3, 3).add(add, 4, 4).submit().id
    acting["as"] = None
    with ratchet.transaction() as conn:  # one child of "mixed" is another tenant's now
        conn.execute(
            sa.update(job_table)
            .where(job_table.c.batch_id == mixed, job_table.c.job_id == children(mixed)[0])
            .values(principal="eve@t9")
        )
    console = Console(tenants.test_client())
    console.headers["X-User"] = "ops@t2"  # another tenant's batches are not there at all
    for url in (f"/ratchet/batches/{own}/cancel", f"/ratchet/batches/{own}/retry"):
        assert console.get(url).status_code == 404
        assert console.post(url, {"count": "0"}).status_code == 404
    console.headers["X-User"] = "ops@t1"
    assert (
        "<strong>0</strong> jobs can be canceled"
        in console.get(f"/ratchet/batches/{mixed}/cancel").text
    )  # the cascade would cancel eve's child too: refused whole
    done = console.post(f"/ratchet/batches/{mixed}/cancel", {"count": "0"}, htmx=True)
    assert done.status_code == 200 and "0 of 0 jobs canceled" in done.text
    assert (
        "<strong>3</strong> jobs can be canceled"
        in console.get(f"/ratchet/batches/{own}/cancel").text
    )
    assert console.post(f"/ratchet/batches/{own}/cancel", {"count": "3"}).status_code == 200
    acting["as"] = None
    statuses = {i: ratchet.get_job(i) for i in [mixed, own, *children(mixed), *children(own)]}
    assert [j.status for j in statuses.values() if j is not None] == [
        JobStatus.PENDING,
        JobStatus.CANCELED,
        *[JobStatus.PENDING] * 2,
        *[JobStatus.CANCELED] * 2,
    ]


def children(batch_id: uuid.UUID) -> list[uuid.UUID]:
    with db.engine.connect() as conn:
        found = conn.execute(
            sa.select(job_table.c.job_id)
            .where(job_table.c.batch_id == batch_id)
            .order_by(job_table.c.job_id)
        )
        return list(found.scalars())
