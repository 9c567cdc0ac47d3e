"""Typed tasks at run time: the object ``@ratchet.task`` returns is the function, and enqueues
the same jobs ``ratchet.enqueue`` does."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from flask import Flask

from flask_ratchet import InvalidOption, JobStatus, Ratchet, TaskFunction
from tests.apps import add, charge, create_app, db, new_year_2099, ratchet


def test_a_task_is_still_the_function(app: Flask) -> None:
    assert isinstance(add, TaskFunction)
    assert add(2, 3) == 5
    assert (add.__name__, add.__module__, add.name) == ("add", "tests.apps", "tests.apps:add")
    assert charge.name == "billing.charge"
    assert repr(charge) == "<task billing.charge>"
    assert isinstance(new_year_2099, TaskFunction)  # @ratchet.recurring too


def test_enqueue_schedule_and_builder_make_the_jobs_ratchet_enqueue_makes(app: Flask) -> None:
    now = handle = add.enqueue(1, b=2)
    job = ratchet.get_job(handle.id)
    assert job is not None
    assert (job.task, job.args, job.kwargs, job.status) == (
        "tests.apps:add",
        [1],
        {"b": 2},
        JobStatus.PENDING,
    )
    plain = ratchet.get_job(ratchet.enqueue(add, 1, b=2).submit().id)
    assert plain is not None and (plain.task, plain.args, plain.kwargs) == (
        job.task,
        job.args,
        job.kwargs,
    )
    later = ratchet.get_job(add.schedule(timedelta(hours=1), 1, 2).id)
    assert later is not None and later.scheduled_at > job.scheduled_at + timedelta(minutes=59)
    at = datetime(2030, 1, 1, tzinfo=UTC)
    fixed = ratchet.get_job(add.schedule_at(at, 1, 2).id)
    assert fixed is not None and fixed.scheduled_at == at
    built = charge.builder(7).with_priority(1).with_queue("billing").submit()
    charged = ratchet.get_job(built.id)
    assert charged is not None
    assert (charged.task, charged.priority, charged.queue, charged.max_retries) == (
        "billing.charge",
        1,
        "billing",
        5,  # the task's own defaults stay
    )
    assert now.created


def test_a_typed_enqueue_joins_the_request_transaction(database_url: str) -> None:
    app = create_app(database_url)
    with app.app_context():
        app.extensions["ratchet"].ensure_schema()

    @app.post("/rolled-back")
    def rolled_back() -> str:
        handle = add.enqueue(1, 2)
        db.session.rollback()
        return str(handle.id)

    @app.post("/committed")
    def committed() -> str:
        handle = add.enqueue(1, 2)
        db.session.commit()
        return str(handle.id)

    client = app.test_client()
    gone = client.post("/rolled-back").text
    kept = client.post("/committed").text
    with app.app_context():
        assert ratchet.get_job(uuid.UUID(gone)) is None
        assert ratchet.get_job(uuid.UUID(kept)) is not None


def test_bad_arguments_raise_before_anything_is_written(app: Flask) -> None:
    with pytest.raises(InvalidOption, match="delay"):
        add.schedule(-1, 1, 2)
    with pytest.raises(InvalidOption, match="schedule_at"):
        add.schedule_at(datetime(2030, 1, 1), 1, 2)  # naive
    assert ratchet.find_jobs().items == []


def test_a_task_of_another_ratchet_instance_is_refused(app: Flask) -> None:
    with pytest.raises(RuntimeError, match="belongs to another Ratchet instance"):
        elsewhere.enqueue()


def test_stacking_task_and_recurring_registers_the_plain_function(app: Flask) -> None:
    mine = Ratchet()
    stacked = mine.task(mine.task(_plain))
    assert stacked(4) == 4
    assert stacked.__wrapped__ is _plain
    assert mine.registry.get("tests.integration.test_typed_tasks:_plain") is not None


def _plain(x: int) -> int:
    return x


OTHER = Ratchet()


@OTHER.task
def elsewhere() -> None: ...


def test_another_instances_task_runs_from_an_allowed_module(app: Flask) -> None:
    # `elsewhere` is a task object of OTHER in this module's namespace, not a plain function.
    allowed = ("tests.integration.test_typed_tasks",)
    name = "tests.integration.test_typed_tasks:elsewhere"
    task = ratchet.registry.for_run(name, allowed)
    assert task.func is elsewhere.__wrapped__
    assert ratchet.registry.for_submit(elsewhere, allowed).name == name
