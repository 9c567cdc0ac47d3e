"""Rows a job's end reads to set off its follow-ups (``ratchet_workflow_condition``,
``ratchet_batch``), written straight into the tables with what ratchet
never writes: the job's own outcome is always written, a follow-up that cannot be decided is
canceled with a decision naming the column, and every other follow-up is set off as usual. Run
by an in-process burst worker on SQLite and PostgreSQL."""

from __future__ import annotations

import math
import uuid

import pytest
import sqlalchemy as sa
from flask import Flask

from flask_ratchet import JobStatus
from flask_ratchet.columns import StoredUuid
from flask_ratchet.schema import batch, job_queue, workflow_condition
from tests.apps import add, db, ratchet
from tests.flow_tasks import batch_item, follow_up, produce, progress_seen
from tests.integration.helpers import each_database_that_holds
from tests.integration.test_flows import children_of, decisions, noted, notes, status, work

__all__ = ["notes"]  # the autouse fixture that makes tests.flow_tasks record

NAN = math.nan


def write(table: sa.Table, key: sa.Column[uuid.UUID], row: uuid.UUID, **values: object) -> None:
    """Write ``values`` into a row as a hand or a damaged disk would: no checks, and no
    conversion by the column's type (SQLite stores text in a number column as it is)."""
    sets = ", ".join(f"{column} = :{column}" for column in values)
    statement = sa.text(f"UPDATE {table.name} SET {sets} WHERE {key.name} = :row")
    with db.engine.begin() as conn:
        conn.execute(statement.bindparams(sa.bindparam("row", row, type_=StoredUuid())), values)


def follow_ups(parent: uuid.UUID) -> dict[str, uuid.UUID]:
    """The dependents of ``parent`` by their label (their first argument)."""
    found = {}
    for job_id in decisions(parent):
        dependent = ratchet.get_job(job_id)
        assert dependent is not None and isinstance(dependent.args, list)
        found[dependent.args[0]] = job_id
    return found


def live_jobs() -> int:
    with db.engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT count(*) FROM ratchet_job_queue")).scalar_one())


# -- conditions of chain steps and workflow branches -----------------------------------------------

#: (column of ratchet_workflow_condition, what it holds).
CONDITION_DAMAGE: list[tuple[str, object]] = [
    ("kind", "SIDEWAYS"),
    ("kind", ""),
    ("decision", "MAYBE"),
]


@pytest.mark.parametrize(("column", "value"), CONDITION_DAMAGE)
def test_a_damaged_condition_cancels_its_dependent_alone(
    app: Flask, column: str, value: object
) -> None:
    handle = (
        ratchet.enqueue(produce, 20)
        .then_on_success(follow_up, "good")
        .then_on_success(follow_up, "damaged")
        .submit()
    )
    root, good, damaged = handle.ids
    beside = ratchet.enqueue_now(add, 1, 2).id
    write(workflow_condition, workflow_condition.c.job_id, damaged, **{column: value})
    work(app)
    assert status(root) == status(good) == status(beside) == JobStatus.SUCCEEDED
    assert status(damaged) == JobStatus.CANCELED
    decision, error = decisions(root)[damaged]
    assert decision == "ERROR"
    assert error is not None and f"column {column!r}" in error, error
    assert ratchet.get_job(damaged).error == error  # type: ignore[union-attr]
    assert [v for _, v in noted("follow-up")] == ["good"]
    assert live_jobs() == 0


#: A batch follow-up's threshold ratchet never writes (SQLite stores NaN as NULL; MariaDB holds
#: neither NaN nor infinity), and the databases that can hold it.
EVERYWHERE = ("sqlite", "postgresql", "mariadb")
THRESHOLD_DAMAGE: list[tuple[object, tuple[str, ...]]] = [
    (NAN, ("sqlite", "postgresql")),
    (None, EVERYWHERE),
    (-1.0, EVERYWHERE),
    (math.inf, ("sqlite", "postgresql")),
    (7.5, EVERYWHERE),
]


@pytest.mark.parametrize(
    ("database_url", "value"),
    [
        pytest.param(database, value, id=f"{database}-{value!r}")
        for value, databases in THRESHOLD_DAMAGE
        for database in databases
    ],
    indirect=["database_url"],
)
def test_a_damaged_threshold_cancels_its_follow_up_alone(app: Flask, value: object) -> None:
    builder = ratchet.enqueue_batch("thresholds")
    for i in range(1, 4):
        builder.add(batch_item, i)
    handle = (
        builder.on_success(follow_up, "all good")
        .when_success_rate(0.5, follow_up, "half")
        .when_failure_count(1, follow_up, "one failed")
        .submit()
    )
    labels = follow_ups(handle.id)
    all_good, half, one_failed = labels["all good"], labels["half"], labels["one failed"]
    write(workflow_condition, workflow_condition.c.job_id, half, threshold=value)
    work(app)
    assert status(handle.id) == status(all_good) == JobStatus.SUCCEEDED
    assert status(half) == status(one_failed) == JobStatus.CANCELED
    found = decisions(handle.id)
    assert found[one_failed] == ("SKIPPED", None)
    decision, error = found[half]
    assert decision == "ERROR" and error is not None and "column 'threshold'" in error, error
    assert [v for _, v in noted("follow-up")] == ["all good"]
    assert live_jobs() == 0


# SQLite only: a float column of PostgreSQL holds no text.
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_text_threshold_cancels_its_follow_up_alone(app: Flask) -> None:
    test_a_damaged_threshold_cancels_its_follow_up_alone(app, "half of it")


# -- batch rows ------------------------------------------------------------------------------------

#: (column of ratchet_batch, what it holds, the dialects that can store it).
BATCH_DAMAGE: list[tuple[str, object, tuple[str, ...]]] = [
    ("total", -1, EVERYWHERE),
    ("succeeded", 2**31 - 1, EVERYWHERE),
    ("failed", -5, EVERYWHERE),
    ("failed", 2**31 - 2, EVERYWHERE),
    ("total", "three", ("sqlite",)),
]


@pytest.mark.parametrize(
    ("database_url", "column", "value"),
    each_database_that_holds(BATCH_DAMAGE),
    indirect=["database_url"],
)
def test_a_damaged_batch_row_is_recounted_and_settles(
    app: Flask, column: str, value: object
) -> None:
    builder = ratchet.enqueue_batch("damaged")
    for i in range(1, 4):
        builder.add(batch_item, i)
    handle = builder.on_success(follow_up, "all good").on_progress(progress_seen).submit()
    children, all_good = children_of(handle.id), follow_ups(handle.id)["all good"]
    beside = ratchet.enqueue_now(add, 1, 2).id
    write(batch, batch.c.batch_id, handle.id, **{column: value})
    work(app)
    assert [status(c) for c in children] == [JobStatus.SUCCEEDED] * 3
    assert status(beside) == JobStatus.SUCCEEDED
    parent = ratchet.get_job(handle.id)
    assert parent is not None and parent.status == JobStatus.SUCCEEDED, parent
    assert parent.result == {"total": 3, "succeeded": 3, "failed": 0}
    assert status(all_good) == JobStatus.SUCCEEDED
    assert live_jobs() == 0


# -- what nothing above reads: the outcome is written all the same ---------------------------------


def test_a_follow_up_the_database_refuses_leaves_the_outcome_written(
    app: Flask, dialect: str
) -> None:
    handle = ratchet.enqueue(produce, 20).then(follow_up, "next").submit()
    root, step = handle.ids
    beside = ratchet.enqueue_now(add, 1, 2).id
    # Releasing the step adds one to its version: past the 32-bit end on PostgreSQL and MariaDB,
    # which refuse the statement (SQLite's integers are 64-bit: there the step is released).
    write(job_queue, job_queue.c.job_id, step, version=2**31 - 1)
    work(app)
    assert status(root) == status(beside) == JobStatus.SUCCEEDED
    found = ratchet.get_job(root)
    assert found is not None and found.error is None and found.result == {"n": 20}
    assert status(step) == (JobStatus.SUCCEEDED if dialect == "sqlite" else JobStatus.PENDING)
    assert ratchet.queue_health()["counts"]["RUNNING"] == 0
