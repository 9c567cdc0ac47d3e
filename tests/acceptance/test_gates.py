"""The execution gates as users run them: resource limits across ``flask ratchet worker``
processes, and a circuit breaker that opens, defers, half-opens and closes."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask

from flask_ratchet import JobStatus
from flask_ratchet.job import Job
from tests.acceptance.conftest import PATIENT, SHARED, Workers, most_at_once, wait_until
from tests.apps import call_flaky_service, db, hold_probe_api, ratchet
from tests.integration.helpers import stored_id


def job(job_id: uuid.UUID) -> Job:
    found = ratchet.get_job(job_id)
    assert found is not None
    return found


def rows(sql: str, **params: Any) -> list[Any]:
    with db.engine.connect() as conn:
        return list(conn.execute(sa.text(sql), params).all())


def executions(job_id: uuid.UUID) -> list[str]:
    key = stored_id(job_id, db.engine)
    return [
        r.status
        for r in rows(
            "SELECT status FROM ratchet_execution WHERE job_id = :id ORDER BY attempt", id=key
        )
    ]


def succeeded(ids: list[uuid.UUID]) -> bool:
    return all(job(i).status == JobStatus.SUCCEEDED for i in ids)


@pytest.mark.slow
def test_a_resource_limit_holds_across_workers_and_waiting_spends_no_attempt(
    app: Flask, workers: Workers, dialect: str
) -> None:
    processes, concurrency, jobs = (4, 8, 40) if dialect == "postgresql" else (2, 4, 16)
    config: dict[str, Any] = {
        # Written by every worker as it starts, before its first claim.
        "RATCHET_RESOURCES": {"probe-api": {"max_concurrent": 2, "retry_delay": 0.1}},
    }
    config |= {"sqlite": PATIENT, "postgresql": SHARED}.get(dialect, {})
    ids = [
        h.id
        for h in ratchet.enqueue_many(ratchet.enqueue(hold_probe_api, 0.15) for _ in range(jobs))
    ]
    procs = [workers.start("--concurrency", str(concurrency), **config) for _ in range(processes)]
    wait_until(lambda: succeeded(ids), what="every job to succeed")

    held = rows("SELECT job_id, started, ended FROM hold")
    assert sorted(r.job_id for r in held) == sorted(str(i) for i in ids)  # each ran once
    # Never more than two at once, and two at once did happen: the limit was contended.
    assert most_at_once([(r.started, r.ended) for r in held]) == 2
    # Waiting for a permit spent no attempt and left no execution row.
    assert [job(i).attempts for i in ids] == [1] * jobs
    assert all(executions(i) == ["SUCCEEDED"] for i in ids)
    deferrals = sum(workers.output(p).count("permits of 'probe-api' are in use") for p in procs)
    assert deferrals > 0
    assert rows("SELECT count(*) FROM ratchet_resource_permit")[0][0] == 0  # all given back


@pytest.mark.slow
def test_a_rate_holds_across_workers(app: Flask, workers: Workers, dialect: str) -> None:
    # 60 jobs, at most 10 starts in any second across 3 workers: about 6 s, not 1 (no limit)
    # and not 60 (a start per second).
    config: dict[str, Any] = {"RATCHET_RESOURCES": {"rated-api": {"rate": "10/s"}}}
    config |= {"sqlite": PATIENT, "postgresql": SHARED}.get(dialect, {})
    batch = [ratchet.enqueue(hold_probe_api, 0).with_resource("rated-api") for _ in range(60)]
    ids = [h.id for h in ratchet.enqueue_many(batch)]
    procs = [workers.start("--concurrency", "8", **config) for _ in range(3)]
    wait_until(lambda: succeeded(ids), what="every job to succeed")

    starts = sorted(r.started for r in rows("SELECT started FROM hold"))
    assert len(starts) == 60
    assert [job(i).attempts for i in ids] == [1] * 60  # waiting for the window spent none
    # Each job's code notes when it starts, a moment after its start is counted (a moment
    # that varies from job to job, by a third of a second on a loaded machine): the eleventh
    # start after any one is nearly a second later (0.5 s leaves the variation room; with no
    # rate they are milliseconds apart).
    gaps = [later - first for first, later in zip(starts, starts[10:], strict=False)]
    assert min(gaps) > 0.5, gaps
    took = starts[-1] - starts[0]
    assert 4.5 < took < 30, took
    deferred = sum(workers.output(p).count("had its 10/s starts") for p in procs)
    assert deferred > 0


def test_a_circuit_breaker_opens_defers_half_opens_and_closes(
    app: Flask, workers: Workers, tmp_path: Path
) -> None:
    flag = tmp_path / "service"
    flag.write_text("down")
    service = "tests.apps:call_flaky_service"  # a task's service is its name by default
    breaker = {
        "window": 4,
        "failure_rate": 0.5,
        "open_for": 2,
        "half_open_calls": 1,
        "min_calls": 4,
    }
    first = [
        h.id
        for h in ratchet.enqueue_many(
            ratchet.enqueue(call_flaky_service, str(flag)) for _ in range(4)
        )
    ]
    # One thread: the trial call ends before the next job asks the breaker.
    proc = workers.start("--concurrency", "1", RATCHET_CIRCUIT_BREAKERS={service: breaker})
    wait_until(
        lambda: f"circuit breaker of '{service}' opened" in workers.output(proc),
        what="four failed calls to open the breaker",
    )
    flag.write_text("up")  # the service is back, but the breaker does not know yet
    later = [ratchet.enqueue_now(call_flaky_service, str(flag)).id for _ in range(3)]
    wait_until(lambda: succeeded(first + later), what="every job to succeed")

    output = workers.output(proc)
    assert output.index("opened") < output.index("half-open") < output.index("closed")
    assert output.count("opened") == 1
    assert output.count(f"the circuit breaker of '{service}' is OPEN") >= len(first + later)
    calls: dict[str, list[bool]] = {}
    for r in rows("SELECT job_id, up FROM service_call ORDER BY id"):
        calls.setdefault(r.job_id, []).append(bool(r.up))
    for job_id in first:
        # One failed call opened the breaker; the retry waited it out and ran once, after.
        assert calls[str(job_id)] == [False, True]
        assert job(job_id).attempts == 2
        assert executions(job_id) == ["FAILED", "SUCCEEDED"]
    for job_id in later:
        # Deferred while open, without an attempt or an execution; run once it closed.
        assert calls[str(job_id)] == [True]
        assert job(job_id).attempts == 1
        assert executions(job_id) == ["SUCCEEDED"]
