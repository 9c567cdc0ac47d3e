"""Chains, workflow branches, batches and callbacks, run by an in-process burst worker on both
databases (the multi-process runs are in tests/acceptance/test_flows.py)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask
from sqlalchemy.engine import Connection

from flask_ratchet import JobStatus, events
from flask_ratchet.flows import NOT_YET
from flask_ratchet.schema import batch, job, job_queue, workflow_condition
from flask_ratchet.testing import run_jobs
from tests.acceptance.conftest import wait_until
from tests.apps import add, db, ratchet
from tests.flow_tasks import (
    FlowNote,
    batch_item,
    broken,
    callback,
    callback_raises,
    follow_up,
    is_big,
    is_big_and_noted,
    is_small,
    predicate_raises,
    produce,
    progress_seen,
    step,
)
from tests.integration.helpers import count, finish, lock_waits


@pytest.fixture(autouse=True)
def notes(app: Flask) -> None:
    app.config["FLOW_NOTES"] = True  # the signal receivers of tests.flow_tasks record


def work(app: Flask) -> None:
    """Run what is due in-process until nothing is, as a burst worker does (retries wait for
    their backoff)."""
    run_jobs(app, retry_delays=True)


def status(job_id: uuid.UUID) -> JobStatus:
    found = ratchet.get_job(job_id)
    assert found is not None
    return found.status


def noted(kind: str) -> list[tuple[str, Any]]:
    with db.engine.connect() as conn:
        rows = conn.execute(
            sa.select(FlowNote.job_id, FlowNote.value).where(FlowNote.kind == kind)
        ).all()
    return [(r.job_id, json.loads(r.value)) for r in rows]


def decisions(parent: uuid.UUID) -> dict[uuid.UUID, tuple[str | None, str | None]]:
    with db.engine.connect() as conn:
        rows = conn.execute(
            sa.select(
                workflow_condition.c.job_id,
                workflow_condition.c.decision,
                workflow_condition.c.error,
            ).where(workflow_condition.c.parent_id == parent)
        )
        return {r.job_id: (r.decision, r.error) for r in rows}


# -- chains ----------------------------------------------------------------------------------------


def test_a_chain_runs_in_order_and_passes_each_result_on(app: Flask) -> None:
    handle = ratchet.enqueue(step, "a").then(step, "b").then(step, "c").submit()
    a, b, c = handle.ids
    assert handle.id == a and handle.last == c
    assert [status(i) for i in handle.ids] == [JobStatus.PENDING] * 3
    with db.engine.connect() as conn:  # the later steps wait: never due until released
        due = {r.job_id: r.scheduled_time for r in conn.execute(sa.select(job_queue))}
    assert due[b] == NOT_YET and due[c] == NOT_YET
    work(app)
    assert [status(i) for i in handle.ids] == [JobStatus.SUCCEEDED] * 3
    seen = {json.loads(json.dumps(v))["label"]: v["previous"] for _, v in noted("step")}
    assert seen == {"a": None, "b": "a-done", "c": "b-done"}
    assert ratchet.get_job(b).depends_on == a  # type: ignore[union-attr]
    assert [j for j, _ in noted("signal:chain_completed")] == [str(c)]
    assert noted("signal:chain_failed") == []


def test_a_step_that_fails_for_good_cancels_every_step_after_it(app: Flask) -> None:
    handle = ratchet.enqueue(step, "a").then(broken, "b").then(step, "c").then(step, "d").submit()
    _a, b, c, d = handle.ids
    work(app)
    assert [status(i) for i in handle.ids] == [
        JobStatus.SUCCEEDED,
        JobStatus.FAILED,
        JobStatus.CANCELED,
        JobStatus.CANCELED,
    ]
    assert [j for j, _ in noted("signal:chain_failed")] == [str(b)]  # once, at the cause
    assert {j for j, _ in noted("signal:job_canceled")} == {str(c), str(d)}
    assert [v["label"] for _, v in noted("step")] == ["a"]


def test_canceling_a_step_cancels_the_steps_after_it_and_nothing_before(app: Flask) -> None:
    got: list[dict[str, Any]] = []

    def receive(sender: Flask, **data: Any) -> None:
        got.append(data)

    handle = ratchet.enqueue(add, 1, 1).then(add, 2, 2).then(add, 3, 3).submit()
    _a, b, c = handle.ids
    with events.job_canceled.connected_to(receive):
        assert ratchet.cancel_job(b)
    assert [status(i) for i in handle.ids] == [
        JobStatus.PENDING,
        JobStatus.CANCELED,
        JobStatus.CANCELED,
    ]
    assert {(d["job_id"], d.get("cascade", False)) for d in got} == {(b, False), (c, True)}
    assert decisions(b) == {c: ("SKIPPED", None)}
    assert not ratchet.cancel_job(c)  # already canceled: an illegal transition, False


def test_canceling_the_first_step_cancels_the_whole_chain(app: Flask) -> None:
    handle = ratchet.enqueue(add, 1, 1).then(add, 2, 2).then(add, 3, 3).submit()
    assert ratchet.cancel_job(handle.id)
    assert [status(i) for i in handle.ids] == [JobStatus.CANCELED] * 3


def test_a_chain_rolled_back_with_its_transaction_leaves_nothing(app: Flask) -> None:
    with pytest.raises(RuntimeError), ratchet.transaction():
        ratchet.enqueue(add, 1, 1).then(add, 2, 2).submit()
        raise RuntimeError("the caller's transaction fails")
    with db.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM ratchet_job")).scalar() == 0
        assert (
            conn.execute(sa.text("SELECT count(*) FROM ratchet_workflow_condition")).scalar() == 0
        )


def test_bad_flows_are_refused_before_anything_is_written(app: Flask) -> None:
    from flask_ratchet.errors import TaskNotAllowed

    with pytest.raises(TaskNotAllowed):
        ratchet.enqueue(add, 1, 1).when(lambda r: True, add, 2, 2)
    with pytest.raises(ValueError, match="idempotency keys are not supported"):
        ratchet.enqueue(add, 1, 1).with_idempotency_key("k").then(add, 2, 2).submit()
    with pytest.raises(TypeError, match="not JSON"):
        ratchet.enqueue(add, 1, 1).then(add, object(), 2)
    with db.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM ratchet_job")).scalar() == 0


# -- workflow branches -----------------------------------------------------------------------------


def test_branches_of_a_success_run_and_the_rest_are_canceled(app: Flask) -> None:
    handle = (
        ratchet.enqueue(produce, 20)
        .then_on_success(follow_up, "shipped")
        .then_on_failure(follow_up, "refunded")
        .when(is_big, follow_up, "big")
        .when(is_small, follow_up, "small")
        .submit()
    )
    root, shipped, refunded, big, small = handle.ids
    work(app)
    assert status(root) == JobStatus.SUCCEEDED
    assert status(shipped) == status(big) == JobStatus.SUCCEEDED
    assert status(refunded) == status(small) == JobStatus.CANCELED
    assert sorted(v for _, v in noted("follow-up")) == ["big", "shipped"]
    assert decisions(root) == {
        shipped: ("TRIGGERED", None),
        refunded: ("SKIPPED", None),
        big: ("TRIGGERED", None),
        small: ("SKIPPED", None),
    }
    triggered = {j: v["condition"] for j, v in noted("signal:branch_triggered")}
    assert triggered == {str(shipped): "ON_SUCCESS", str(big): "WHEN"}


def test_a_failure_runs_the_failure_branch_only(app: Flask) -> None:
    handle = (
        ratchet.enqueue(broken, "charge")
        .then_on_success(follow_up, "shipped")
        .then_on_failure(follow_up, "refunded")
        .when(is_big, follow_up, "big")
        .submit()
    )
    root, shipped, refunded, big = handle.ids
    work(app)
    assert status(root) == JobStatus.FAILED
    assert status(refunded) == JobStatus.SUCCEEDED
    assert status(shipped) == status(big) == JobStatus.CANCELED
    assert [v for _, v in noted("follow-up")] == ["refunded"]


def test_a_raising_predicate_fails_routing_and_cancels_every_branch(app: Flask) -> None:
    handle = (
        ratchet.enqueue(produce, 5)
        .then_on_success(follow_up, "shipped")
        .when(predicate_raises, follow_up, "never")
        .submit()
    )
    root, shipped, never = handle.ids
    work(app)
    assert status(root) == JobStatus.SUCCEEDED  # the job itself is done; its routing failed
    assert status(shipped) == status(never) == JobStatus.CANCELED
    found = decisions(root)
    assert {d for d, _ in found.values()} == {"ERROR"}
    error = found[never][1]
    assert error is not None and "predicate tests.flow_tasks:predicate_raises raised" in error
    assert "ValueError: cannot judge this result" in error
    assert ratchet.get_job(never).error == error  # type: ignore[union-attr]
    assert noted("follow-up") == []


# -- callbacks -------------------------------------------------------------------------------------


def test_callbacks_run_on_success_and_on_failure_and_a_raising_one_changes_nothing(
    app: Flask,
) -> None:
    ok = ratchet.enqueue(add, 1, 2).on_success(callback).on_success(callback_raises).submit()
    bad = ratchet.enqueue(broken, "x").on_failure(callback).on_success(callback).submit()
    work(app)
    assert status(ok.id) == JobStatus.SUCCEEDED
    assert status(bad.id) == JobStatus.FAILED
    assert sorted(noted("callback")) == sorted([(str(ok.id), "SUCCEEDED"), (str(bad.id), "FAILED")])


# -- batches ---------------------------------------------------------------------------------------


def test_a_batch_counts_its_children_and_runs_the_matching_follow_ups(app: Flask) -> None:
    builder = ratchet.enqueue_batch("import-users").with_tags("import")
    for i in range(1, 41):
        builder.add(batch_item, i, 10)  # 10, 20, 30, 40 fail
    handle = (
        builder.on_success(follow_up, "all good")
        .on_failure(follow_up, "some failed")
        .when_failure_count(4, follow_up, "four failed")
        .when_success_rate(0.95, follow_up, "95%")
        .on_progress(progress_seen)
        .submit()
    )
    assert handle.total == 40
    assert status(handle.id) == JobStatus.PENDING
    work(app)
    progress = handle.progress()
    assert (progress.total, progress.succeeded, progress.failed) == (40, 36, 4)
    assert progress.finished and progress.wall_ms is not None and progress.child_run_ms > 0
    parent = ratchet.get_job(handle.id)
    assert parent is not None and parent.status == JobStatus.FAILED
    assert parent.error == "4 of 40 children failed"
    assert parent.result == {"total": 40, "succeeded": 36, "failed": 4}
    assert sorted(v for _, v in noted("follow-up")) == ["four failed", "some failed"]
    assert [j for j, _ in noted("signal:batch_completed")] == [str(handle.id)]
    assert noted("progress")  # the progress callback ran as children ended
    tagged = ratchet.find_jobs(tag="import", limit=100).items  # the children and the parent
    children = [c for c in tagged if c.task == "tests.flow_tasks:batch_item"]
    assert len(children) == 40 and {c.max_retries for c in children} == {0}


def test_canceling_a_batch_cancels_its_children_and_settles_it_once(app: Flask) -> None:
    builder = ratchet.enqueue_batch("doomed")
    for i in range(5):
        builder.add(batch_item, i)
    handle = builder.on_failure(follow_up, "failed").submit()
    assert ratchet.cancel_job(handle.id)
    progress = handle.progress()
    assert progress.finished and (progress.succeeded, progress.failed) == (0, 5)
    assert status(handle.id) == JobStatus.CANCELED
    with db.engine.connect() as conn:
        live = conn.execute(sa.text("SELECT count(*) FROM ratchet_job_queue")).scalar()
    assert live == 0  # children and follow-up all canceled


def test_an_empty_batch_succeeds_at_once(app: Flask) -> None:
    handle = ratchet.enqueue_batch("nothing").on_success(follow_up, "empty").submit()
    assert status(handle.id) == JobStatus.SUCCEEDED
    work(app)
    assert [v for _, v in noted("follow-up")] == ["empty"]


def test_a_batch_child_canceled_by_hand_counts_as_failed(app: Flask) -> None:
    builder = ratchet.enqueue_batch("one-canceled")
    first = None
    for i in range(3):
        builder.add(batch_item, i)
    handle = builder.submit()
    with db.engine.connect() as conn:
        first = conn.execute(
            sa.select(job.c.job_id).where(job.c.job_type == "BATCH_CHILD").limit(1)
        ).scalar_one()
    assert ratchet.cancel_job(first)
    work(app)
    progress = handle.progress()
    assert (progress.succeeded, progress.failed, progress.finished) == (2, 1, True)
    with db.engine.connect() as conn:
        assert conn.execute(sa.select(batch.c.finished_at)).scalar() is not None


def test_the_recovery_sweep_settles_a_batch_whose_children_ended_unseen(app: Flask) -> None:
    builder = ratchet.enqueue_batch("stranded")
    for i in range(3):
        builder.add(batch_item, i)
    handle = builder.on_failure(follow_up, "swept").submit()
    runtime = ratchet.runtime
    with runtime.store.begin(runtime.engine) as conn:
        # Children ended without their batch hearing of it (as if written by hand).
        ids = list(
            conn.execute(
                sa.select(job.c.job_id).where(job.c.batch_id == handle.id).order_by(job.c.job_id)
            ).scalars()
        )
        conn.execute(sa.delete(job_queue).where(job_queue.c.job_id.in_(ids)))
        conn.execute(
            sa.update(job).where(job.c.job_id.in_(ids)).values(terminal_status="SUCCEEDED")
        )
        conn.execute(sa.update(job).where(job.c.job_id == ids[0]).values(terminal_status="FAILED"))
    assert not handle.progress().finished
    with runtime.store.begin(runtime.engine) as conn:
        assert runtime.store.flows.settle_stranded_batches(conn) == 1
        assert runtime.store.flows.settle_stranded_batches(conn) == 0  # once
    progress = handle.progress()
    assert (progress.succeeded, progress.failed, progress.finished) == (2, 1, True)
    assert status(handle.id) == JobStatus.FAILED
    work(app)
    assert [v for _, v in noted("follow-up")] == ["swept"]


def test_a_failed_batch_parent_cannot_be_retried_or_paused(app: Flask) -> None:
    handle = ratchet.enqueue_batch("refused").add(broken, "x").submit()
    work(app)
    assert status(handle.id) == JobStatus.FAILED
    assert not ratchet.retry_job(handle.id)  # no work of its own: retry its children instead
    assert not ratchet.pause_job(handle.id)
    assert status(handle.id) == JobStatus.FAILED


def children_of(batch_id: uuid.UUID) -> list[uuid.UUID]:
    with db.engine.connect() as conn:
        return list(
            conn.execute(
                sa.select(job.c.job_id).where(job.c.batch_id == batch_id).order_by(job.c.job_id)
            ).scalars()
        )


def test_a_revived_child_is_not_counted_twice(app: Flask) -> None:
    builder = ratchet.enqueue_batch("revived")
    for i in (1, 2, 3):
        builder.add(batch_item, i, 3)  # the third fails for good
    handle = builder.on_failure(follow_up, "some failed").submit()
    first, _second, third = children_of(handle.id)
    assert ratchet.pause_job(first)  # held back: the batch cannot end while it waits
    work(app)

    def counts() -> tuple[int, int, bool]:
        p = handle.progress()
        return p.succeeded, p.failed, p.finished

    assert counts() == (1, 1, False)
    assert ratchet.retry_job(third)  # its failure no longer counts
    assert counts() == (1, 0, False)
    work(app)
    assert counts() == (1, 1, False)  # failed again: counted once
    assert ratchet.pause_job(third) and counts() == (1, 0, False)
    assert ratchet.resume_job(third) and counts() == (1, 1, False)  # FAILED again
    assert ratchet.pause_job(third) and ratchet.cancel_job(third)
    assert counts() == (1, 1, False)
    assert noted("follow-up") == []  # nothing settled while a child was still live
    assert ratchet.resume_job(first)
    work(app)
    assert counts() == (2, 1, True)
    assert [v for _, v in noted("follow-up")] == ["some failed"]


def test_a_streamed_batch_that_fails_in_a_callers_transaction_leaves_nothing(app: Flask) -> None:
    def source() -> Any:
        yield from range(5)
        raise RuntimeError("the source broke")

    with ratchet.transaction():
        ratchet.enqueue_now(add, 1, 1)
        with pytest.raises(RuntimeError, match="the source broke"):
            (
                ratchet.streaming_batch("broken")
                .from_iterable(source())
                .process(batch_item)
                .with_chunk_size(2)
                .on_success(follow_up, "never")
                .start()
            )
        # The caller goes on and commits its own work.
    with db.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM ratchet_job")).scalar() == 1
        for table in ("ratchet_batch", "ratchet_workflow_condition"):
            assert conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar() == 0
        assert conn.execute(sa.text("SELECT count(*) FROM ratchet_job_queue")).scalar() == 1


def test_signals_carry_their_documented_data_and_a_raising_receiver_stops_no_other(
    app: Flask,
) -> None:
    heard: list[tuple[str, dict[str, Any]]] = []

    def raising(sender: Flask, **data: Any) -> None:
        raise RuntimeError("a broken receiver")

    def listening(sender: Flask, **data: Any) -> None:
        heard.append(("canceled", data))

    builder = ratchet.enqueue_batch("canceled-with-signals")
    for i in range(2):
        builder.add(batch_item, i)
    handle = builder.submit()
    with (
        events.job_canceled.connected_to(raising),
        events.job_canceled.connected_to(listening),
    ):
        assert ratchet.cancel_job(handle.id)
    by_job = {d["job_id"]: d for _, d in heard}
    assert by_job[handle.id] == {
        "job_id": handle.id,
        "task": "flask_ratchet:batch",
        "cascade": False,
    }
    children = children_of(handle.id)
    assert all(by_job[c]["cascade"] is True for c in children)


def test_retrying_a_failed_chain_step_does_not_complete_the_chain(app: Flask) -> None:
    handle = ratchet.enqueue(step, "a").then(broken, "b").then(step, "c").submit()
    _a, b, c = handle.ids
    work(app)
    assert status(c) == JobStatus.CANCELED
    assert ratchet.retry_job(b)
    work(app)
    assert noted("signal:chain_completed") == []  # its next step was canceled: no end
    assert [j for j, _ in noted("signal:chain_failed")] == [str(b), str(b)]


def test_a_predicate_that_writes_runs_outside_the_workers_transaction(app: Flask) -> None:
    handle = ratchet.enqueue(produce, 20).when(is_big_and_noted, follow_up, "big").submit()
    work(app)
    assert status(handle.last) == JobStatus.SUCCEEDED
    assert [v for _, v in noted("predicate")] == [{"n": 20}]


def test_a_scheduled_builder_cannot_be_a_step(app: Flask) -> None:
    later = ratchet.schedule(60, add, 2, 2)
    with pytest.raises(ValueError, match="runs as soon as the job before it ends"):
        ratchet.enqueue(add, 1, 1).then(later)
    later.submit()  # still usable on its own


def test_canceling_a_batch_while_a_worker_ends_its_last_child_commits_both(app: Flask) -> None:
    """One lock order (batch row, then job rows) for the completer and for cancel: on
    PostgreSQL these two used to deadlock, and the cancel raised."""
    from flask_ratchet.store.types import Ended, Finished, Outcome

    runtime = ratchet.runtime
    store, engine = runtime.store, runtime.engine
    handle = ratchet.enqueue_batch("raced").add(batch_item, 1).add(batch_item, 2).submit()
    first, last = children_of(handle.id)
    assert ratchet.cancel_job(first)
    with store.begin(engine) as conn:
        assert [c.job_id for c in store.jobs.claim_due(conn, 10, "n1", 0)] == [last]

    def complete(conn: Connection, started: threading.Event) -> None:
        done = Finished(
            last, Outcome.SUCCEEDED, "t", 1, result="2", follow_up=True, batch_id=handle.id
        )
        store.executions.complete_many(conn, "n1", [done])
        started.set()
        time.sleep(0.5)  # the cancel starts meanwhile
        store.flows.ended(conn, [Ended(last, JobStatus.SUCCEEDED, batch_id=handle.id)])

    outcome = two_writers(complete, lambda conn: store.jobs.cancel(conn, handle.id))
    assert outcome == {"first": "committed", "second": "committed"}
    progress = handle.progress()
    assert (progress.succeeded, progress.failed, progress.finished) == (1, 1, True)


def wait_for_a_lock_wait(engine: sa.Engine) -> None:
    """Until a transaction of this database waits for a lock (PostgreSQL). SQLite's writers
    wait in ``BEGIN IMMEDIATE``, where nothing shows it: half a second there."""
    if engine.dialect.name != "postgresql":
        time.sleep(0.5)
        return
    wait_until(lambda: lock_waits(engine), 10, "a transaction to wait for a lock")


def two_writers(
    first: Callable[[Connection, threading.Event], object],
    second: Callable[[Connection], object],
) -> dict[str, str]:
    """``first(conn, started)`` and, once it sets ``started``, ``second(conn)``, each in a
    transaction of its own, in two threads: how each one ended ("committed", or its error)."""
    store, engine = ratchet.runtime.store, ratchet.runtime.engine
    outcome: dict[str, str] = {}
    started = threading.Event()

    def run(name: str, write: Callable[[Connection], object]) -> None:
        try:
            with store.begin(engine) as conn:
                write(conn)
            outcome[name] = "committed"
        except Exception as exc:
            outcome[name] = repr(exc)

    def run_second() -> None:
        started.wait(10)
        run("second", second)

    threads = [
        threading.Thread(target=run, args=("first", lambda conn: first(conn, started))),
        threading.Thread(target=run_second),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return outcome


def race_with_batch_cancel(
    batch_id: uuid.UUID, other: Callable[[Connection], object]
) -> dict[str, str]:
    """Cancel a batch while ``other(conn)`` runs: the cancel takes the batch row, waits until
    the other writer waits for a lock, then goes on to the job rows. How each one ended."""
    store, engine = ratchet.runtime.store, ratchet.runtime.engine

    def cancel(conn: Connection, started: threading.Event) -> None:
        store.flows.batches.lock_of(conn, [batch_id])  # cancel's first step ...
        started.set()
        wait_for_a_lock_wait(engine)  # ... the other writer is stuck on one ...
        assert store.jobs.cancel(conn, batch_id)  # ... and the rest of the cancel

    return two_writers(cancel, other)


def test_recovering_a_spent_batch_child_while_the_batch_is_canceled_commits_both(
    app: Flask,
) -> None:
    """Orphan recovery fails a child that used its last attempt (and counts it into its batch)
    while the batch is canceled: both take the batch row before any job row, so on PostgreSQL
    neither waits for the other in a cycle (they used to deadlock, and one of them raised)."""
    store, engine = ratchet.runtime.store, ratchet.runtime.engine
    handle = (
        ratchet.enqueue_batch("orphaned")
        .with_max_retries(0)
        .add(batch_item, 1)
        .add(batch_item, 2)
        .submit()
    )
    with store.begin(engine) as conn:  # claimed by a node that never sends a heartbeat
        assert len(store.jobs.claim_due(conn, 10, "gone", 0)) == 2
    time.sleep(0.05)  # claimed before "now" on every clock
    recovered: list[Any] = []
    outcome = race_with_batch_cancel(
        handle.id, lambda conn: recovered.append(store.cluster.recover_orphans(conn, 0))
    )
    assert outcome == {"first": "committed", "second": "committed"}
    # The cancel came first: the children were canceled with their batch, none was left to fail.
    assert (recovered[0].requeued, recovered[0].failed) == ([], [])
    assert [status(c) for c in children_of(handle.id)] == [JobStatus.CANCELED] * 2
    progress = handle.progress()
    assert (progress.failed, progress.finished) == (2, True)


def test_resuming_a_paused_failed_child_while_the_batch_is_canceled_commits_both(
    app: Flask,
) -> None:
    """Resumed to FAILED, a child counts into its batch again: batch row first, as above."""
    store, engine = ratchet.runtime.store, ratchet.runtime.engine
    handle = ratchet.enqueue_batch("resumed").add(batch_item, 1).add(batch_item, 2).submit()
    first, second = children_of(handle.id)
    with store.begin(engine) as conn:
        assert len(store.jobs.claim_due(conn, 10, "node-a", 0)) == 2
    assert finish(first, JobStatus.FAILED)
    assert ratchet.pause_job(first)  # FAILED -> PAUSED: live again, no longer counted
    resumed: list[bool] = []
    outcome = race_with_batch_cancel(
        handle.id, lambda conn: resumed.append(store.jobs.resume(conn, first))
    )
    assert outcome == {"first": "committed", "second": "committed"}
    assert resumed == [False]  # canceled with its batch before the resume could take it
    assert [status(first), status(second)] == [JobStatus.CANCELED] * 2
    progress = handle.progress()
    assert (progress.failed, progress.finished) == (2, True)


def test_archiving_a_flow_takes_its_batch_and_condition_rows_with_it(app: Flask) -> None:
    handle = ratchet.enqueue_batch("archived").add(batch_item, 1).on_success(step, "s").submit()
    ratchet.enqueue(step, "a").then(step, "b").submit()
    work(app)
    store, engine = ratchet.runtime.store, ratchet.runtime.engine
    assert handle.progress().finished
    with store.begin(engine) as conn:
        assert store.cluster.archive_ended(conn, older_than=0, limit=100) == count("ratchet_job")
    assert count("ratchet_job") == count("ratchet_batch") == 0
    assert count("ratchet_workflow_condition") == 0
