"""Tasks wrapped by the app's own decorators: registered under their name, run by that name
(the wrapper, with the job's context through it), typed and masked by the function they wrap."""

from __future__ import annotations

from flask import Flask

from flask_ratchet import JobStatus
from flask_ratchet.registry import positional_names
from flask_ratchet.testing import run_jobs
from tests.apps import ratchet
from tests.celery_tasks import plus_one, tenfold_add, tenfold_default_name


def test_a_decorated_task_runs_by_its_registered_name_through_its_wrapper(app: Flask) -> None:
    handle = tenfold_add.enqueue(1, 2)
    by_name = ratchet.enqueue_now("tests.tenfold_add", 3, 4)
    stored = ratchet.get_job(handle.id)
    assert stored is not None and stored.task == "tests.tenfold_add"
    ran = {job.id: job for job in run_jobs(app)}
    # The wrapper ran (tenfold), and the context reached the function through it (attempt 1).
    assert (ran[handle.id].status, ran[handle.id].result) == (JobStatus.SUCCEEDED, 30)
    assert ran[by_name.id].result == 70


def test_a_wrapped_function_keeps_its_own_name_and_a_renamed_wrapper_runs(app: Flask) -> None:
    assert tenfold_default_name.name == "tests.celery_tasks:tenfold_default_name"
    assert plus_one.name == "tests.plus_one"
    first, second = tenfold_default_name.enqueue(4), plus_one.delay(4)
    ran = {job.id: job.result for job in run_jobs(app)}
    assert ran == {first.id: 40, second.id: 5}


def test_what_a_job_binds_its_arguments_to_follows_the_wrapped_function(app: Flask) -> None:
    task = ratchet.registry.get("tests.tenfold_add")
    assert task is not None and task.func is tenfold_add.__wrapped__
    assert positional_names(task.func) == ("a", "b", "ctx")  # the wrapper's is (*args, **kwargs)
    assert ratchet.registry.parameter_names("tests.tenfold_add") == ("a", "b", "ctx")
