"""flask_ratchet.testing: in-process runs, eager mode and the enqueued-job assertions."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask

from flask_ratchet import JobStatus, Priority, events
from flask_ratchet.testing import (
    assert_enqueued,
    eager,
    enqueued_jobs,
    refute_enqueued,
    run_jobs,
)
from flask_ratchet.worker import coroutines
from tests.apps import Order, add, charge, create_app, db, fail_until, ratchet, send_mail
from tests.async_tasks import async_add, async_leaves_a_stubborn_task
from tests.flow_tasks import broken, step
from tests.integration.helpers import count, stored_id


def test_run_jobs_runs_what_is_due_and_what_that_makes_due(app: Flask) -> None:
    first = add.enqueue(1, 2)
    chain = ratchet.enqueue(step, "a").then(step, "b").submit()
    later = add.schedule(timedelta(hours=1), 5, 5)
    ran = run_jobs(app)
    assert [j.id for j in ran] == [first.id, *chain.ids]
    assert [j.result for j in ran] == [3, "a-done", "b-done"]
    assert all(j.status == JobStatus.SUCCEEDED for j in ran)
    scheduled = ratchet.get_job(later.id)
    assert scheduled is not None and scheduled.status == JobStatus.PENDING  # not due yet
    assert run_jobs(app) == []


def test_run_jobs_retries_at_once_and_can_raise_the_final_error(app: Flask) -> None:
    works = fail_until.enqueue(3)  # max_retries=2: works on the third run
    ran = run_jobs(app)
    assert [(j.id, j.status) for j in ran] == [(works.id, JobStatus.SUCCEEDED)] * 3
    assert ran[-1].result == "worked on attempt 3"
    never = fail_until.enqueue(9)
    with pytest.raises(ConnectionError, match="attempt 3 failed"):
        run_jobs(app, raise_errors=True)
    ended = ratchet.get_job(never.id)
    assert ended is not None and ended.status == JobStatus.FAILED  # written before it raised
    waits = fail_until.enqueue(9)
    (once,) = run_jobs(app, retry_delays=True)  # the retry waits for its 1 s backoff
    assert once.id == waits.id and once.status == JobStatus.PENDING and once.attempts == 1


def test_run_jobs_runs_async_tasks_and_sends_events(app: Flask) -> None:
    handle = async_add.enqueue(2, 2)
    heard: list[Any] = []

    def receive(sender: Flask, **data: Any) -> None:
        heard.append(data["job_id"])

    with events.job_completed.connected_to(receive):
        (ran,) = run_jobs(app, queues=["default"])
    assert ran.result["sum"] == 4 and ran.result["job_id"] == str(handle.id)
    assert heard == [handle.id]


def test_a_failing_step_ends_its_chain_as_a_worker_would(app: Flask) -> None:
    chain = ratchet.enqueue(broken, "x").then(step, "never").submit()
    ran = run_jobs(app)
    assert [j.id for j in ran] == [chain.ids[0]]
    statuses = [ratchet.get_job(i).status for i in chain.ids]  # type: ignore[union-attr]
    assert statuses == [JobStatus.FAILED, JobStatus.CANCELED]


@pytest.fixture
def shop(database_url: str) -> Iterator[Flask]:
    """An app with routes, no app context pushed: each request has its own session."""
    app = create_app(database_url)
    app.testing = True  # a view's exception reaches the test, as in a team's suite
    with app.app_context():
        app.extensions["ratchet"].ensure_schema()

    @app.post("/order")
    def order() -> str:
        db.session.add(Order(item="book"))
        handle = add.enqueue(20, 22)
        db.session.commit()
        return str(ratchet.get_job(handle.id).result)  # type: ignore[union-attr]

    @app.post("/order-then-fail")
    def order_then_fail() -> str:
        add.enqueue(1, 1)
        db.session.rollback()
        return "rolled back"

    @app.post("/charge-broken")
    def charge_broken() -> str:
        fail_until.enqueue(9)
        db.session.commit()
        return "committed"

    yield app


def test_eager_runs_a_requests_jobs_when_it_commits_and_never_when_it_rolls_back(
    shop: Flask,
) -> None:
    client = shop.test_client()
    with eager(shop):
        assert client.post("/order").text == "42"  # ran inside db.session.commit()
        assert client.post("/order-then-fail").text == "rolled back"
        with pytest.raises(ConnectionError, match="attempt 3 failed"):
            client.post("/charge-broken")
    with shop.app_context():
        assert count("ratchet_job") == 2  # the order's job and the broken charge; no rollback's
        assert db.session.query(Order).count() == 1
        assert [j.status for j in enqueued_jobs(status=None)] == [
            JobStatus.SUCCEEDED,
            JobStatus.FAILED,
        ]
    with eager(shop, raise_errors=False):
        assert client.post("/charge-broken").text == "committed"  # recorded, not raised
    with shop.app_context():
        assert len(enqueued_jobs(fail_until, status="FAILED")) == 2
        add.enqueue(1, 1)  # eager mode is over: it stays PENDING
        assert len(enqueued_jobs(add)) == 1


def test_eager_with_an_in_memory_database_from_the_config() -> None:
    app = create_app("sqlite://", RATCHET_EAGER=True)
    with app.app_context():
        handle = add.enqueue(2, 3)  # outside a transaction: runs at once
        done = ratchet.get_job(handle.id)
        assert done is not None and (done.status, done.result) == (JobStatus.SUCCEEDED, 5)
        with ratchet.transaction():
            inside = add.enqueue(3, 4)
            pending = ratchet.get_job(inside.id)
            assert pending is not None and pending.status == JobStatus.PENDING
        ended = ratchet.get_job(inside.id)
        assert ended is not None and ended.result == 7  # ran when the block committed
        with pytest.raises(ConnectionError):
            fail_until.enqueue(9)
    quiet = create_app("sqlite://", RATCHET_EAGER=True, RATCHET_EAGER_RAISE=False)
    with quiet.app_context():
        failed = ratchet.get_job(fail_until.enqueue(9).id)
        assert failed is not None and failed.status == JobStatus.FAILED


def test_a_job_failing_in_eager_mode_raises_from_commit_and_leaves_the_session_usable(
    app: Flask,
) -> None:
    with eager(app):
        db.session.add(Order(item="book"))
        broken = fail_until.enqueue(9)  # joins the session's transaction
        with pytest.raises(ConnectionError, match="attempt 3 failed"):
            db.session.commit()  # the job runs once the commit is over, and raises
        db.session.rollback()  # the session is usable: no "in 'committed' state"
        assert db.session.query(Order).count() == 1  # the order was committed
        failed = ratchet.get_job(broken.id)
        assert failed is not None and failed.status == JobStatus.FAILED
        db.session.add(Order(item="pen"))
        works = add.enqueue(2, 2)
        db.session.commit()  # the same session, a second commit: its job runs too
        done = ratchet.get_job(works.id)
        assert done is not None and (done.status, done.result) == (JobStatus.SUCCEEDED, 4)
        assert db.session.query(Order).count() == 2


def test_events_are_sent_once_the_sessions_commit_is_over(app: Flask) -> None:
    """A receiver may use ``db.session``: the transaction that committed has ended (in
    SQLAlchemy's ``after_commit`` the session is still in its 'committed' state)."""
    heard: list[tuple[Any, int]] = []

    def receive(sender: Flask, **data: Any) -> None:
        heard.append((data["job_id"], db.session.query(Order).count()))

    first = add.enqueue(1, 1)
    second = add.enqueue(2, 2)
    with events.job_canceled.connected_to(receive):
        db.session.add(Order(item="book"))
        ratchet.cancel_job(first.id)
        db.session.commit()
        db.session.add(Order(item="pen"))
        ratchet.cancel_job(second.id)  # the same session again
        db.session.commit()
    assert heard == [(first.id, 1), (second.id, 2)]


def test_eager_jobs_wait_for_the_outer_commit_not_a_savepoints(app: Flask) -> None:
    heard: list[Any] = []

    def receive(sender: Flask, **data: Any) -> None:
        heard.append(data["job_id"])

    dropped = add.enqueue(0, 0)
    kept = add.enqueue(0, 1)
    with eager(app), events.job_canceled.connected_to(receive):
        db.session.add(Order(item="book"))
        with db.session.begin_nested():  # released: its jobs wait for the outer commit
            inner = add.enqueue(1, 2)
        pending = ratchet.get_job(inner.id)
        assert pending is not None and pending.status == JobStatus.PENDING
        with pytest.raises(LookupError), db.session.begin_nested():
            ratchet.cancel_job(dropped.id)  # rolled back with its savepoint: never heard of
            raise LookupError
        ratchet.cancel_job(kept.id)
        db.session.commit()
    done = ratchet.get_job(inner.id)
    assert done is not None and (done.status, done.result) == (JobStatus.SUCCEEDED, 3)
    assert heard == [kept.id]
    still = ratchet.get_job(dropped.id)
    assert still is not None and still.status == JobStatus.SUCCEEDED  # not canceled: ran


def test_assert_enqueued_matches_arguments_queue_and_options(app: Flask) -> None:
    charge.builder(7).with_tags("eu", "vip").with_priority(Priority.CRITICAL).submit()
    charge.enqueue(8)
    send_mail.enqueue("a@example.org")
    job = assert_enqueued(
        charge, args=[7], tags=["vip", "eu", "billing"], priority=Priority.CRITICAL
    )
    assert job.args == [7]
    assert_enqueued("billing.charge", args=(8,), kwargs={}, max_retries=5)
    assert_enqueued(send_mail, args=["a@example.org"], queue="mail")
    refute_enqueued(send_mail, queue="default")
    refute_enqueued(charge, args=[9])
    with pytest.raises(
        AssertionError, match=r"expected one PENDING job of billing.charge args=\[9\], found no job"
    ):
        assert_enqueued(charge, args=[9])
    with pytest.raises(AssertionError, match="found 2 jobs"):
        assert_enqueued(charge)
    with pytest.raises(AssertionError, match=r"expected no PENDING job of billing.charge, found 2"):
        refute_enqueued(charge)
    with pytest.raises(TypeError, match="colour: not a job field"):
        assert_enqueued(charge, colour="red")
    assert [j.args for j in enqueued_jobs(charge)] == [[7], [8]]  # oldest first
    run_jobs(app)
    refute_enqueued(charge)  # ran: no longer PENDING


@ratchet.task
def waits_for_another() -> str:
    """Waits for a job it enqueued: which can never run while this one runs in-process."""
    handle = add.enqueue(1, 1)
    try:
        handle.wait(timeout=30)
    except RuntimeError as exc:
        return str(exc)
    return "waited"


def test_waiting_inside_a_job_run_in_process_is_refused_at_once(app: Flask) -> None:
    waiter = waits_for_another.enqueue()
    first, second = run_jobs(app)
    assert first.id == waiter.id
    assert first.result.startswith("cannot wait for job") and "run in-process" in first.result
    assert second.result == 2  # the job it enqueued ran after it


def test_an_unknown_task_fails_at_once_in_process(app: Flask) -> None:
    handle = add.enqueue(1, 2)
    with db.engine.begin() as conn:
        key = stored_id(handle.id, db.engine)
        conn.execute(
            sa.text("UPDATE ratchet_job SET task = 'gone.module:task' WHERE job_id = :id"),
            {"id": key},
        )
    (ran,) = run_jobs(app)
    assert ran.status == JobStatus.FAILED and ran.attempts == 1
    assert "task 'gone.module:task' is not registered" in (ran.error or "")
    assert "(run in-process)" in (ran.error or "")


def test_a_coroutines_stubborn_leftover_task_is_abandoned_with_its_loop(
    app: Flask, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(coroutines, "LEFTOVER_GRACE", 0.2)
    stubborn = async_leaves_a_stubborn_task.enqueue()
    after = async_add.enqueue(1, 1)
    with caplog.at_level(logging.WARNING, "flask_ratchet.worker"):
        ran = run_jobs(app)
    assert [(j.id, j.status) for j in ran] == [
        (stubborn.id, JobStatus.SUCCEEDED),
        (after.id, JobStatus.SUCCEEDED),  # on a new loop
    ]
    assert any("did not end 0.2s after they were cancelled" in r.message for r in caplog.records)


def test_async_tasks_run_from_code_that_runs_an_event_loop(app: Flask) -> None:
    handle = async_add.enqueue(3, 4)

    async def an_async_test() -> list[Any]:
        return run_jobs(app)  # this thread runs a loop: the job's coroutine gets its own

    (ran,) = asyncio.run(an_async_test())
    assert (ran.id, ran.result["sum"]) == (handle.id, 7)
