"""The store operations workers use: fenced completion, history, orphans, leases, retention."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from flask import Flask

from flask_ratchet import JobStatus
from flask_ratchet.columns import UtcDateTime
from flask_ratchet.context import LogLine
from flask_ratchet.job import Progress
from flask_ratchet.maintenance.periodic import Maintenance, PeriodicTask
from flask_ratchet.store.types import Finished, NodeInfo, Outcome, Recovered
from flask_ratchet.worker.completer import Completer
from tests.apps import add, db, ratchet
from tests.integration.helpers import add_refusing_trigger, count, drop_refusing_trigger, stored_id


@contextmanager
def tx() -> Iterator[sa.Connection]:
    runtime = ratchet.runtime
    with runtime.store.begin(runtime.engine) as conn:
        yield conn


def running(n: int = 1, node: str = "n1", **options: object) -> list[uuid.UUID]:
    ids = [ratchet.enqueue(add, i, i).with_max_retries(1).submit().id for i in range(n)]
    claimed = [c.job_id for c in ratchet.claim_due(n, node)]
    assert sorted(claimed) == sorted(ids)
    return ids


def finished(job_id: uuid.UUID, outcome: Outcome, **kw: object) -> Finished:
    defaults: dict[str, object] = {
        "task": "tests.apps:add",
        "attempt": 1,
        "started_at": datetime.now(UTC),
        "duration_ms": 12.5,
        "queue_wait_ms": 3.0,
    }
    return Finished(job_id, outcome, **(defaults | kw))  # type: ignore[arg-type]


def test_complete_many_writes_every_kind_of_outcome(app: Flask) -> None:
    ok, bad, again, back = running(4)
    items = [
        finished(
            ok,
            Outcome.SUCCEEDED,
            result='{"sum":2}',
            logs=[LogLine(datetime.now(UTC), "INFO", "hi")],
        ),
        finished(bad, Outcome.FAILED, error="ValueError: no", traceback="Traceback …"),
        finished(again, Outcome.RETRY, error="IOError: later", delay=3600),
        finished(back, Outcome.RELEASE),
    ]
    with tx() as conn:
        applied = ratchet.runtime.store.executions.complete_many(conn, "n1", items)
    assert applied == {ok, bad, again, back}
    jobs = {i: ratchet.get_job(i) for i in (ok, bad, again, back)}
    assert jobs[ok].status == JobStatus.SUCCEEDED and jobs[ok].result == {"sum": 2}  # type: ignore[union-attr]
    assert jobs[bad].status == JobStatus.FAILED and jobs[bad].error == "ValueError: no"  # type: ignore[union-attr]
    retried = jobs[again]
    assert retried is not None and retried.status == JobStatus.PENDING
    assert retried.attempts == 1 and retried.error == "IOError: later" and retried.picked_by is None
    assert retried.scheduled_at > datetime.now(UTC) + timedelta(minutes=59)
    released = jobs[back]
    assert released is not None and released.status == JobStatus.PENDING and released.attempts == 0
    assert count("ratchet_execution") == 3  # a release is not an attempt
    assert count("ratchet_job_log") == 1
    assert count("ratchet_dlq_alert") == 1


def test_completion_is_fenced_by_node_and_status(app: Flask) -> None:
    (mine,) = running(1, node="n1")
    with tx() as conn:
        assert (
            ratchet.runtime.store.executions.complete_many(
                conn, "n2", [finished(mine, Outcome.SUCCEEDED)]
            )
            == set()
        )
    assert ratchet.cancel_job(mine)
    with tx() as conn:
        assert (
            ratchet.runtime.store.executions.complete_many(
                conn, "n1", [finished(mine, Outcome.SUCCEEDED)]
            )
            == set()
        )
        assert (
            ratchet.runtime.store.executions.complete_many(
                conn, "n1", [finished(mine, Outcome.RETRY)]
            )
            == set()
        )
    job = ratchet.get_job(mine)
    assert job is not None and job.status == JobStatus.CANCELED
    assert count("ratchet_execution") == 0


def test_dlq_alerts_are_deduplicated_per_job_and_error_per_hour(app: Flask) -> None:
    (job_id,) = running(1)
    for _ in range(3):
        with tx() as conn:
            ratchet.runtime.store.executions.complete_many(
                conn, "n1", [finished(job_id, Outcome.FAILED, error="E: x")]
            )
        assert ratchet.retry_job(job_id)
        ratchet.claim_due(1, "n1")
    with tx() as conn:
        ratchet.runtime.store.executions.complete_many(
            conn, "n1", [finished(job_id, Outcome.FAILED, error="E: other")]
        )
        rows = conn.execute(
            sa.text("SELECT error, occurrences FROM ratchet_dlq_alert ORDER BY error")
        ).all()
    assert [tuple(r) for r in rows] == [("E: other", 1), ("E: x", 3)]


def sql_id(job_id: uuid.UUID) -> object:
    """A job id as raw SQL sees it (SQLite stores UUIDs as 32 hex digits)."""
    return stored_id(job_id, ratchet.runtime.engine)


def test_orphans_of_silent_nodes_are_requeued_or_failed(app: Flask) -> None:
    store = ratchet.runtime.store
    live, dead_once, dead_spent = running(3, node="dead")
    five_minutes_ago = datetime.now(UTC) - timedelta(minutes=5)
    with tx() as conn:
        store.cluster.heartbeat(conn, NodeInfo("alive", "h", 1, "t", 4))
        update = sa.text("UPDATE ratchet_job_queue SET picked_by = 'alive' WHERE job_id = :id")
        conn.execute(update, {"id": sql_id(live)})
        spend = sa.text("UPDATE ratchet_job_queue SET attempts = 2 WHERE job_id = :id")
        conn.execute(spend, {"id": sql_id(dead_spent)})
        conn.execute(
            sa.update(sa.table("ratchet_job_queue", sa.column("picked_at", UtcDateTime()))).values(
                picked_at=five_minutes_ago
            )
        )
    with tx() as conn:
        assert store.cluster.recover_orphans(conn, grace=600) == Recovered(
            [], []
        )  # claimed recently
        recovered = store.cluster.recover_orphans(conn, grace=60)
    assert recovered.requeued == [dead_once] and recovered.failed == [dead_spent]
    assert recovered.tasks == {dead_once: "tests.apps:add", dead_spent: "tests.apps:add"}
    assert recovered.reason == "WorkerLost: its worker stopped sending heartbeats"
    once, spent, alive = (ratchet.get_job(i) for i in (dead_once, dead_spent, live))
    assert once is not None and once.status == JobStatus.PENDING
    assert "WorkerLost" in (once.error or "")
    assert spent is not None and spent.status == JobStatus.FAILED
    assert "every one of its 2" in (spent.error or "")
    assert alive is not None and alive.status == JobStatus.RUNNING  # a live node's job stays


def test_a_node_reclaims_its_own_jobs_at_start(app: Flask) -> None:
    (job_id,) = running(1, node="fixed-id")
    with tx() as conn:
        recovered = ratchet.runtime.store.cluster.reclaim_own(conn, "fixed-id")
    assert recovered.requeued == [job_id]


def test_leases_are_exclusive_renewable_and_expire(app: Flask) -> None:
    store = ratchet.runtime.store
    with tx() as conn:
        assert store.cluster.try_lease(conn, "orphans", "a", ttl=60)
        assert not store.cluster.try_lease(conn, "orphans", "b", ttl=60)
        assert store.cluster.try_lease(conn, "orphans", "a", ttl=60)  # renew
        assert not store.cluster.release_lease(conn, "orphans", "b")
        assert store.cluster.release_lease(conn, "orphans", "a")
        assert store.cluster.try_lease(conn, "orphans", "b", ttl=0.0)  # expires at once
    with tx() as conn:
        assert store.cluster.try_lease(conn, "orphans", "a", ttl=60)


def test_next_due_is_the_earliest_pending_time(app: Flask) -> None:
    store = ratchet.runtime.store
    with tx() as conn:
        assert store.cluster.next_due(conn) is None
    at = datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
    ratchet.schedule_at(at, add, 1, 1).submit()
    ratchet.schedule_at(at + timedelta(days=1), add, 1, 1).with_priority(4).submit()
    with tx() as conn:
        assert store.cluster.next_due(conn) == at


def test_archive_moves_old_ended_jobs_and_purges_history(app: Flask) -> None:
    store = ratchet.runtime.store
    (job_id,) = running(1)
    with tx() as conn:
        store.executions.complete_many(conn, "n1", [finished(job_id, Outcome.FAILED, error="E: x")])
    with tx() as conn:
        assert store.cluster.archive_ended(conn, older_than=3600, limit=10) == 0
        assert store.cluster.archive_ended(conn, older_than=0, limit=10) == 1
    assert ratchet.get_job(job_id) is None
    assert count("ratchet_job_archive") == 1
    assert count("ratchet_execution") == count("ratchet_dlq_alert") == 0


def test_progress_is_fenced(app: Flask) -> None:
    (job_id,) = running(1)
    executions = ratchet.runtime.store.executions
    with tx() as conn:
        assert executions.report_progress(conn, "n1", job_id, '{"done":1}')
        assert not executions.report_progress(conn, "n2", job_id, '{"done":2}')
        assert executions.still_running(conn, "n1", [job_id, uuid.uuid4()]) == {job_id}
    found = ratchet.get_job(job_id)
    assert found is not None and found.progress == Progress(1)  # while it runs
    assert found.progress.fraction is None


@pytest.mark.parametrize("outcome", [Outcome.SUCCEEDED, Outcome.FAILED])
def test_terminal_outcomes_free_the_business_key(app: Flask, outcome: Outcome) -> None:
    job_id = ratchet.enqueue(add, 1, 1).with_business_key("bk").submit().id
    ratchet.claim_due(1, "n1")
    with tx() as conn:
        ratchet.runtime.store.executions.complete_many(conn, "n1", [finished(job_id, outcome)])
    assert count("ratchet_business_key") == 0


def test_a_refused_outcome_is_isolated_and_stored_without_its_details(app: Flask) -> None:
    """The database refuses one outcome's details (here a trigger, standing for any refusal):
    the rest of the batch is written, and that one is stored reduced, never retried for ever."""
    ok, poisoned = running(2)
    runtime = ratchet.runtime
    with tx() as conn:
        contains = "strpos" if runtime.engine.dialect.name == "postgresql" else "instr"
        add_refusing_trigger(
            conn, "refuse_poison", "ratchet_execution", f"{contains}(NEW.error, 'poison') > 0"
        )
    try:
        completer = Completer(runtime.store, runtime.engine, "n1")
        completer.start()
        completer.put(finished(ok, Outcome.SUCCEEDED, result="4"))
        completer.put(finished(poisoned, Outcome.FAILED, error="ValueError: poison", traceback="…"))
        completer.stop()
        assert not completer.is_alive() and completer.written == 2
        assert ratchet.get_job(ok).status == JobStatus.SUCCEEDED  # type: ignore[union-attr]
        refused = ratchet.get_job(poisoned)
        assert refused is not None and refused.status == JobStatus.FAILED
        assert (refused.error or "").startswith("the error could not be stored (")
    finally:
        with tx() as conn:
            drop_refusing_trigger(conn, "refuse_poison", "ratchet_execution")


def test_a_maintenance_task_failing_on_what_it_read_runs_again_next_time(
    app: Flask, caplog: pytest.LogCaptureFixture
) -> None:
    """Any error, not only the database's: a damaged row must not end the thread that recovers
    orphans and archives ended jobs."""
    calls: list[int] = []

    def damaged(store: object, engine: object) -> None:
        calls.append(1)
        raise ValueError("badly formed hexadecimal UUID string")

    task = PeriodicTask("damaged", 0.01, damaged)
    maintenance = Maintenance(ratchet.runtime.store, db.engine, "node-a", [task], threading.Event())
    due = {"damaged": 0.0}
    maintenance.run_due(due, time.monotonic())
    time.sleep(0.02)  # the lease lasts 90% of the interval
    maintenance.run_due(due, time.monotonic())
    assert len(calls) == 2
    failures = [r for r in caplog.records if "maintenance task damaged failed" in r.message]
    assert len(failures) == 2 and failures[0].exc_info is not None
