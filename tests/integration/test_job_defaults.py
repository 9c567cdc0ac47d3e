"""``RATCHET_DEFAULT_*``: the options of every job whose task and builder set none, in place of
the built-in ones (3 retries, exponential backoff from 10 s, no timeout, the default queue,
NORMAL priority)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from flask import Flask

from flask_ratchet import Backoff, JobStatus, Priority
from flask_ratchet.testing import run_jobs
from tests.apps import add, charge, create_app, ratchet
from tests.celery_tasks import always_fails

CELERY_LIKE = {
    "RATCHET_DEFAULT_MAX_RETRIES": 0,
    "RATCHET_DEFAULT_BACKOFF": "FIXED",
    "RATCHET_DEFAULT_BACKOFF_BASE": timedelta(seconds=3),
    "RATCHET_DEFAULT_TIMEOUT": 90,
    "RATCHET_DEFAULT_QUEUE": "work",
    "RATCHET_DEFAULT_PRIORITY": Priority.LOW,
}


@pytest.fixture
def celery_like(database_url: str) -> Iterator[Flask]:
    """The test app with every job default changed."""
    app = create_app(database_url, **CELERY_LIKE)
    with app.app_context():
        app.extensions["ratchet"].ensure_schema()
        yield app


def test_a_job_whose_task_and_builder_set_nothing_takes_the_apps_defaults(
    celery_like: Flask,
) -> None:
    job = ratchet.get_job(add.enqueue(1, 2).id)
    assert job is not None
    assert (job.max_retries, job.backoff, job.backoff_base) == (0, Backoff.FIXED, 3.0)
    assert (job.timeout, job.queue, job.priority) == (90.0, "work", Priority.LOW)


def test_what_the_task_sets_and_then_the_builder_wins(celery_like: Flask) -> None:
    # charge: @ratchet.task(name="billing.charge", priority=HIGH, max_retries=5, tags=[...])
    own = ratchet.get_job(charge.enqueue(7).id)
    assert own is not None and (own.priority, own.max_retries) == (Priority.HIGH, 5)
    assert (own.queue, own.timeout, own.backoff) == ("work", 90.0, Backoff.FIXED)  # the app's
    built = charge.builder(8).with_max_retries(1).with_queue("billing").submit()
    job = ratchet.get_job(built.id)
    assert job is not None and (job.max_retries, job.queue, job.priority) == (
        1,
        "billing",
        Priority.HIGH,
    )


def test_batches_chains_and_recurring_children_take_them_too(celery_like: Flask) -> None:
    batch = ratchet.enqueue_batch("b").add(add, 1, 1).submit()
    (child,) = ratchet.find_jobs(task=add).items
    parent = ratchet.get_job(batch.id)
    assert parent is not None and (parent.queue, parent.max_retries) == ("work", 0)
    assert (child.queue, child.max_retries, child.timeout) == ("work", 0, 90.0)
    chain = ratchet.enqueue(add, 1, 2).then(add, 3, 4).submit()
    steps = [ratchet.get_job(i) for i in chain.ids]
    assert [(s.queue, s.max_retries) for s in steps if s] == [("work", 0), ("work", 0)]
    (master,) = ratchet.register_recurring()  # tests.new-year-2099 sets no option
    assert master.options.queue == "work" and master.options.max_retries == 0  # type: ignore[union-attr]
    scheduled = ratchet.schedule_recurring("@daily", "UTC", add, 1, 1).submit()
    assert scheduled.options.priority == Priority.LOW  # type: ignore[union-attr]


def test_no_retry_by_default_when_the_app_says_so(celery_like: Flask) -> None:
    handle = ratchet.enqueue(always_fails, "down").with_queue("default").submit()
    (ran,) = run_jobs(celery_like)  # one run: no retry, as Celery does unless told
    assert (ran.id, ran.status, ran.attempts) == (handle.id, JobStatus.FAILED, 1)


def test_without_defaults_a_task_that_sets_nothing_retries_three_times(app: Flask) -> None:
    handle = always_fails.enqueue("down")
    ran = run_jobs(app)  # retries run at once here
    assert [j.id for j in ran] == [handle.id] * 4
    assert (ran[-1].status, ran[-1].attempts, ran[-1].max_retries) == (JobStatus.FAILED, 4, 3)
