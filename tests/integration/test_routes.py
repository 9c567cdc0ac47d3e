"""RATCHET_ROUTES on every database: jobs whose queue nothing chose go where the routes say, at
enqueue, through every way of submitting; a queue chosen on the job or its task wins; the testing
kit runs the routed jobs from their queue."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest
from flask import Flask

from flask_ratchet import InvalidOption
from flask_ratchet.testing import run_jobs
from flask_ratchet.worker.runner import Worker
from tests.apps import add, charge, create_app, db, ratchet, report, send_mail
from tests.flow_tasks import batch_item, follow_up, kept_in_default

ROUTES = {"billing.*": "billing", "tests.apps:add": "math", "*": "other"}


@pytest.fixture
def routed_app(database_url: str) -> Iterator[Flask]:
    app = create_app(database_url, RATCHET_ROUTES=ROUTES)
    with app.app_context():
        app.extensions["ratchet"].ensure_schema()
        yield app
        db.session.remove()


def queue_of(job_id: uuid.UUID) -> str:
    job = ratchet.get_job(job_id)
    assert job is not None
    return job.queue


def test_a_job_goes_to_its_routed_queue_unless_it_or_its_task_chose_one(
    routed_app: Flask,
) -> None:
    assert queue_of(add.enqueue(1, 2).id) == "math"
    assert queue_of(ratchet.enqueue_now(charge, 7).id) == "billing"
    assert queue_of(report.enqueue(3).id) == "other"
    assert queue_of(send_mail.enqueue("ada@example.org").id) == "mail"  # @task(queue="mail")
    assert queue_of(kept_in_default.enqueue(1).id) == "default"  # @task(queue="default")
    assert queue_of(ratchet.enqueue(add, 1, 2).with_queue("default").submit().id) == "default"
    assert queue_of(ratchet.schedule(60, add, 1, 2).submit().id) == "math"
    many = ratchet.enqueue_many([ratchet.enqueue(add, 1, 2), ratchet.enqueue(charge, 8)])
    assert [queue_of(h.id) for h in many] == ["math", "billing"]


def test_run_jobs_takes_routed_jobs_from_their_queue(routed_app: Flask) -> None:
    handle = add.enqueue(2, 3)
    db.session.commit()
    assert run_jobs(routed_app, queues=["default"]) == []  # not there any more
    (ran,) = run_jobs(routed_app, queues=["math"])
    assert (ran.id, ran.queue, ran.result) == (handle.id, "math", 5)


def test_batches_and_chains_route_their_jobs_unless_they_chose_a_queue(
    routed_app: Flask,
) -> None:
    batch = ratchet.enqueue_batch("routed").add(add, 1, 2).add(charge, 3)
    handle = batch.on_success(follow_up, "done").submit()
    kids = ratchet.find_jobs(queue="math").items + ratchet.find_jobs(queue="billing").items
    assert len(kids) == 2
    follow_ups = [j for j in ratchet.find_jobs(queue="other").items if j.depends_on == handle.id]
    assert len(follow_ups) == 1
    ratchet.enqueue_batch("chosen").with_queue("bulk").add(add, 1, 2).add(charge, 5).submit()
    bulk = ratchet.find_jobs(queue="bulk").items
    assert sorted(j.task for j in bulk) == ["billing.charge", "flask_ratchet:batch", add.name]
    ratchet.streaming_batch("streamed").from_iterable([1, 2]).process(batch_item).start()
    assert len(ratchet.find_jobs(queue="other", task=batch_item).items) == 2
    streamed = ratchet.streaming_batch("bulk").from_iterable([3]).process(batch_item)
    streamed.with_queue("bulk").start()
    assert len(ratchet.find_jobs(queue="bulk", task=batch_item).items) == 1
    flow = ratchet.enqueue(add, 1, 2).then(charge, 4).submit()
    assert [queue_of(i) for i in flow.ids] == ["math", "billing"]
    kept = ratchet.enqueue(add, 1, 2).then(charge, 4).with_queue("chain").submit()
    assert [queue_of(i) for i in kept.ids] == ["chain", "chain"]


def test_recurring_children_are_routed_when_the_master_is_registered(routed_app: Flask) -> None:
    built = ratchet.schedule_recurring("0 0 * * *", "UTC", add, 1, 2).submit()
    assert built.options.queue == "math"
    chosen = ratchet.schedule_recurring("0 0 * * *", "UTC", add, 1, 3).with_queue("default")
    assert chosen.with_business_key("kept").submit().options.queue == "default"
    (declared,) = ratchet.register_recurring()  # tests.apps:new_year_2099, declared at import
    assert declared.options.queue == "other"
    child = ratchet.run_recurring_now(built.id)
    assert child is not None and queue_of(child.id) == "math"


def test_a_replacement_keeps_the_queue_of_the_job_it_replaces(routed_app: Flask) -> None:
    old = ratchet.schedule(3600, add, 1, 2).with_queue("default").submit()
    new = ratchet.replace(old.id, 0, add, 5, 6)
    assert queue_of(new.id) == "default"


def test_a_callable_route_and_its_refusal(database_url: str) -> None:
    def by_name(task: str) -> str | None:
        return "reports" if task.endswith(":report") else "bad queue" if "charge" in task else None

    app = create_app(database_url, RATCHET_ROUTES=[by_name, {"*": "other"}])
    with app.app_context():
        app.extensions["ratchet"].ensure_schema()
        assert queue_of(report.enqueue(1).id) == "reports"
        assert queue_of(add.enqueue(1, 2).id) == "other"
        with pytest.raises(InvalidOption, match=r"by_name gave task 'billing\.charge'"):
            ratchet.enqueue_now(charge, 1)
        assert len(ratchet.find_jobs().items) == 2  # the refused job wrote nothing
        db.session.remove()


def test_a_worker_registers_declared_masters_with_their_routed_queue(routed_app: Flask) -> None:
    worker = Worker(routed_app, concurrency=1)
    thread = threading.Thread(target=worker.run, name="test-worker")
    thread.start()
    try:
        assert worker.started.wait_for(timeout=30), "the worker did not start"
    finally:
        worker.request_stop()
        thread.join(30)
    assert not thread.is_alive()
    declared = ratchet.get_recurring("tests.new-year-2099")  # registered before "started"
    assert declared is not None and declared.options.queue == "other"


def test_routes_come_before_the_default_queue(database_url: str) -> None:
    app = create_app(
        database_url,
        RATCHET_ROUTES={"tests.apps:add": "math"},
        RATCHET_DEFAULT_QUEUE="fallback",
    )
    with app.app_context():
        app.extensions["ratchet"].ensure_schema()
        assert queue_of(add.enqueue(1, 2).id) == "math"  # routed
        assert queue_of(report.enqueue(1).id) == "fallback"  # no route: the app's default
        assert queue_of(send_mail.enqueue("a@example.org").id) == "mail"  # the task's own
        db.session.remove()
