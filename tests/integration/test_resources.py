"""Resource limits and permits in the store, on SQLite and PostgreSQL: limits, permits up to the
limit (also under concurrent requests), fencing, and clean-up by orphan recovery and reclaim."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask

from flask_ratchet import JobStatus
from flask_ratchet.config import RatchetConfig
from flask_ratchet.errors import ConfigError
from flask_ratchet.resources import DEFAULT_RETRY_DELAY, ResourceLimit
from flask_ratchet.schema import resource_permit
from flask_ratchet.store.types import Acquisition, NodeInfo, Permit
from tests.apps import add, ratchet
from tests.integration.helpers import count, each_database_that_holds, finish
from tests.integration.test_flows import work


@contextmanager
def tx() -> Iterator[sa.Connection]:
    runtime = ratchet.runtime
    with runtime.store.begin(runtime.engine) as conn:
        yield conn


def running(n: int, node: str = "node-a", resource: str = "api") -> list[uuid.UUID]:
    """``n`` jobs of ``resource``, claimed by ``node``."""
    ids = [ratchet.enqueue(add, i, i).with_resource(resource).submit().id for i in range(n)]
    claimed = [c.job_id for c in ratchet.claim_due(n, node)]
    assert sorted(claimed) == sorted(ids)
    return ids


def acquire(job_id: uuid.UUID, node: str = "node-a", resource: str = "api") -> Acquisition:
    with tx() as conn:
        return ratchet.runtime.store.resources.acquire_permit(conn, job_id, resource, node)


def release(job_id: uuid.UUID, node: str = "node-a") -> bool:
    with tx() as conn:
        return ratchet.runtime.store.resources.release_permit(conn, job_id, node)


def holders() -> set[tuple[uuid.UUID, str]]:
    with ratchet.runtime.engine.connect() as conn:
        rows = conn.execute(sa.select(resource_permit.c.job_id, resource_permit.c.node_id))
        return {(r.job_id, r.node_id) for r in rows}


def backdate_permits(seconds: float) -> None:
    with tx() as conn:
        conn.execute(
            sa.update(resource_permit).values(
                acquired_at=datetime.now(UTC) - timedelta(seconds=seconds)
            )
        )


# -- limits --------------------------------------------------------------------------------------


def test_configure_resource_writes_and_changes_the_limit(app: Flask) -> None:
    assert ratchet.configure_resource("api", 3, timedelta(seconds=2)) == ResourceLimit(
        "api", 3, 2.0
    )
    ratchet.configure_resource("api", max_concurrent=5, retry_delay=0.5)
    ratchet.configure_resource("other", 1)
    with tx() as conn:
        store = ratchet.runtime.store
        assert store.resources.get_resource_limit(conn, "api") == ResourceLimit("api", 5, 0.5)
        assert store.resources.get_resource_limit(conn, "other") == ResourceLimit(
            "other", 1, DEFAULT_RETRY_DELAY
        )
        assert store.resources.get_resource_limit(conn, "unknown") is None
    assert count("ratchet_resource_limit") == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("api", 0, 1.0), "max_concurrent of resource 'api' must be a whole number >= 1"),
        (("api", 2.5, 1.0), "max_concurrent"),
        (("api", True, 1.0), "max_concurrent"),
        (("api", 2, -1.0), "retry_delay of resource 'api' must be a positive number"),
        (("api", 2, 0), "retry_delay"),
        (("api", 2, timedelta(seconds=-3)), "retry_delay"),
        (("api", 2, "5"), "retry_delay"),
        (("", 2, 1.0), "a resource name must be a non-empty string"),
        (("x" * 101, 2, 1.0), "at most 100 characters"),
        ((None, 2, 1.0), "resource name"),
    ],
)
def test_a_bad_limit_is_refused_and_writes_nothing(
    app: Flask, args: tuple[Any, ...], message: str
) -> None:
    ratchet.configure_resource("api", 4, 1.0)
    with pytest.raises(ValueError, match=message):
        ratchet.configure_resource(*args)
    with tx() as conn:
        assert ratchet.runtime.store.resources.get_resource_limit(conn, "api") == ResourceLimit(
            "api", 4, 1.0
        )
    assert count("ratchet_resource_limit") == 1


def test_configure_resource_joins_the_enclosing_transaction(app: Flask) -> None:
    with pytest.raises(RuntimeError, match="changed my mind"), ratchet.transaction():
        ratchet.configure_resource("api", 2)
        raise RuntimeError("changed my mind")
    assert count("ratchet_resource_limit") == 0
    with ratchet.transaction():
        ratchet.configure_resource("api", 2)
    assert count("ratchet_resource_limit") == 1


# -- permits -------------------------------------------------------------------------------------


def test_permits_are_granted_up_to_the_limit_and_not_beyond(app: Flask) -> None:
    ratchet.configure_resource("api", 2, 0.25)
    first, second, third = running(3)
    assert acquire(first) == Acquisition(Permit.GRANTED, in_use=1)
    assert acquire(second) == Acquisition(Permit.GRANTED, in_use=2)
    assert acquire(third) == Acquisition(Permit.FULL, retry_delay=0.25, in_use=2)
    assert holders() == {(first, "node-a"), (second, "node-a")}
    assert release(first)
    assert acquire(third).permit is Permit.GRANTED
    assert holders() == {(second, "node-a"), (third, "node-a")}


def test_permits_count_per_resource(app: Flask) -> None:
    ratchet.configure_resource("api", 1)
    ratchet.configure_resource("db", 1)
    (api_job,) = running(1, resource="api")
    (db_job,) = running(1, resource="db")
    assert acquire(api_job, resource="api").permit is Permit.GRANTED
    assert acquire(db_job, resource="db").permit is Permit.GRANTED
    with tx() as conn:
        assert ratchet.runtime.store.resources.permits_in_use(conn, "api") == 1


def test_raising_the_limit_applies_to_the_next_request(app: Flask) -> None:
    ratchet.configure_resource("api", 1)
    first, second = running(2)
    assert acquire(first).permit is Permit.GRANTED
    assert acquire(second).permit is Permit.FULL
    ratchet.configure_resource("api", 2)
    assert acquire(second).permit is Permit.GRANTED


def test_a_resource_without_a_limit_needs_no_permit(app: Flask) -> None:
    (job_id,) = running(1, resource="unlimited")
    assert acquire(job_id, resource="unlimited") == Acquisition(Permit.UNLIMITED)
    assert count("ratchet_resource_permit") == 0


def test_a_job_that_is_no_longer_running_on_the_node_gets_no_permit(app: Flask) -> None:
    ratchet.configure_resource("api", 5)
    mine, canceled = running(2, node="node-a")
    assert acquire(mine, node="node-b").permit is Permit.GONE  # held by another node
    assert ratchet.cancel_job(canceled)
    assert acquire(canceled).permit is Permit.GONE
    pending = ratchet.enqueue(add, 1, 1).with_resource("api").submit().id
    assert acquire(pending).permit is Permit.GONE  # never claimed
    assert count("ratchet_resource_permit") == 0


def test_a_permit_an_earlier_attempt_still_holds_is_waited_for_not_taken_over(
    app: Flask,
) -> None:
    ratchet.configure_resource("api", 1, retry_delay=5)
    (job_id,) = running(1)
    assert acquire(job_id).permit is Permit.GRANTED
    # The attempt timed out while blocked inside the resource, and the job runs again: the
    # new attempt waits (its attempt not spent) until the old thread gives the permit back,
    # so the resource never has two users at once.
    assert acquire(job_id) == Acquisition(Permit.FULL, retry_delay=5.0, in_use=1)
    assert holders() == {(job_id, "node-a")}
    assert release(job_id)
    assert acquire(job_id).permit is Permit.GRANTED


def test_release_is_fenced_by_the_node(app: Flask) -> None:
    ratchet.configure_resource("api", 1)
    (job_id,) = running(1)
    acquire(job_id)
    assert not release(job_id, node="node-b")
    assert holders() == {(job_id, "node-a")}
    assert release(job_id)
    assert not release(job_id)  # twice is harmless
    assert holders() == set()


def ask_at_once(engine: sa.Engine, jobs: list[uuid.UUID]) -> dict[uuid.UUID, Permit]:
    """Every job asks for a permit at the same moment, on a thread and connection of its own."""
    store = ratchet.runtime.store
    barrier = threading.Barrier(len(jobs))
    answers: dict[uuid.UUID, Permit] = {}

    def ask(job_id: uuid.UUID) -> None:
        barrier.wait()
        with store.begin(engine) as conn:
            answers[job_id] = store.resources.acquire_permit(conn, job_id, "api", "node-a").permit

    threads = [threading.Thread(target=ask, args=(j,)) for j in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return answers


def test_concurrent_requests_never_exceed_the_limit(app: Flask, database_url: str) -> None:
    """The database serialises the requests (FOR UPDATE on PostgreSQL, BEGIN IMMEDIATE on
    SQLite): however many ask at once, two get a permit."""
    ratchet.configure_resource("api", 2)
    jobs = running(12)
    if database_url.startswith("sqlite"):
        engine = sa.create_engine(database_url, connect_args={"timeout": 30})
    else:
        engine = sa.create_engine(database_url, pool_size=len(jobs), max_overflow=0)
    try:
        for _ in range(5):
            answers = ask_at_once(engine, jobs)
            granted = [j for j, p in answers.items() if p is Permit.GRANTED]
            assert len(answers) == len(jobs)
            assert len(granted) == 2, answers
            assert {j for j, _ in holders()} == set(granted)
            for job_id in granted:
                assert release(job_id)
    finally:
        engine.dispose()


# -- clean-up ------------------------------------------------------------------------------------


def heartbeat(node_id: str) -> None:
    with tx() as conn:
        ratchet.runtime.store.cluster.heartbeat(conn, NodeInfo(node_id, "host", 1, "test", 4))


def test_orphan_recovery_releases_permits_of_dead_nodes_only(app: Flask) -> None:
    ratchet.configure_resource("api", 10)
    heartbeat("alive")
    (kept,) = running(1, node="alive")
    (ended,) = running(1, node="alive")
    (dead,) = running(1, node="dead")  # no node row: never beat, or forgotten
    for job_id, node_id in ((kept, "alive"), (ended, "alive"), (dead, "dead")):
        assert acquire(job_id, node=node_id).permit is Permit.GRANTED
    # Ended, but a live node's permit is that node's to give back: its thread may still be
    # inside the resource (a timeout or cancel while it was blocked).
    assert finish(ended, JobStatus.SUCCEEDED, node="alive")
    backdate_permits(3600)
    (fresh,) = running(1, node="dead")
    acquire(fresh, node="dead")  # taken a moment ago: spared, like a job claimed a moment ago
    with tx() as conn:
        ratchet.runtime.store.cluster.recover_orphans(conn, 60)
    assert holders() == {(kept, "alive"), (ended, "alive"), (fresh, "dead")}


def test_a_silent_nodes_permits_are_released(app: Flask) -> None:
    ratchet.configure_resource("api", 10)
    heartbeat("silent")
    (job_id,) = running(1, node="silent")
    acquire(job_id, node="silent")
    backdate_permits(3600)
    with tx() as conn:
        conn.execute(sa.text("UPDATE ratchet_node SET last_heartbeat = :t"), {"t": "2000-01-01"})
    with tx() as conn:
        ratchet.runtime.store.cluster.recover_orphans(conn, 60)
    assert holders() == set()


def test_a_restarting_node_drops_its_own_permits(app: Flask) -> None:
    ratchet.configure_resource("api", 10)
    (mine,) = running(1, node="node-a")
    (theirs,) = running(1, node="node-b")
    acquire(mine, node="node-a")
    acquire(theirs, node="node-b")
    with tx() as conn:
        ratchet.runtime.store.cluster.reclaim_own(conn, "node-a")
    assert holders() == {(theirs, "node-b")}


# -- RATCHET_RESOURCES ---------------------------------------------------------------------------


def test_config_reads_resource_limits() -> None:
    config = RatchetConfig.from_mapping(
        {
            "RATCHET_RESOURCES": {
                "payment-api": {"max_concurrent": 4, "retry_delay": timedelta(seconds=2)},
                "reports": {"max_concurrent": 1},
            }
        }
    )
    assert config.resources == {
        "payment-api": ResourceLimit("payment-api", 4, 2.0),
        "reports": ResourceLimit("reports", 1, DEFAULT_RETRY_DELAY),
    }
    assert RatchetConfig.from_mapping({}).resources == {}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([("api", 2)], "must be a dict"),
        ({"api": 2}, r"RATCHET_RESOURCES\['api'\] must be a dict with 'max_concurrent'"),
        ({"api": {"retry_delay": 1}}, "with 'max_concurrent'"),
        ({"api": {"max_concurrent": 2, "delay": 1}}, "unknown setting 'delay'"),
        ({"api": {"max_concurrent": 0}}, "RATCHET_RESOURCES: max_concurrent of resource 'api'"),
        ({"api": {"max_concurrent": 1, "retry_delay": -1}}, "RATCHET_RESOURCES: retry_delay"),
        ({"": {"max_concurrent": 1}}, "RATCHET_RESOURCES: a resource name"),
    ],
)
def test_bad_resource_config_is_an_error_naming_the_key(value: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        RatchetConfig.from_mapping({"RATCHET_RESOURCES": value})


#: (column of ratchet_resource_limit, what it holds, the dialects that can store it).
DAMAGED_LIMITS: list[tuple[str, object, tuple[str, ...]]] = [
    ("max_concurrent", -3, ("sqlite", "postgresql", "mariadb")),
    ("max_concurrent", 0, ("sqlite", "postgresql", "mariadb")),
    ("max_concurrent", "many", ("sqlite",)),
    ("retry_delay", float("nan"), ("postgresql",)),
    ("retry_delay", float("inf"), ("sqlite", "postgresql")),
    ("retry_delay", -1.0, ("sqlite", "postgresql", "mariadb")),
    ("retry_delay", 1e300, ("sqlite", "postgresql", "mariadb")),
    ("retry_delay", "soon", ("sqlite",)),
]


@pytest.mark.parametrize(
    ("database_url", "column", "value"),
    each_database_that_holds(DAMAGED_LIMITS),
    indirect=["database_url"],
)
def test_an_unreadable_limit_defers_its_jobs_naming_the_column(
    app: Flask, column: str, value: object
) -> None:
    ratchet.configure_resource("api", 2, 0.25)
    with tx() as conn:  # no conversion by the column's type: SQLite keeps text as it is
        conn.execute(sa.text(f"UPDATE ratchet_resource_limit SET {column} = :v"), {"v": value})
    (job_id,) = running(1)
    answer = acquire(job_id)
    assert answer.permit is Permit.UNREADABLE
    assert answer.retry_delay == DEFAULT_RETRY_DELAY
    assert answer.reason is not None and f"{column} of resource 'api'" in answer.reason
    assert holders() == set()
    # A worker defers the job (PENDING again, its attempt not spent) and runs the others.
    other = ratchet.enqueue_now(add, 1, 2).id
    assert finish(job_id, JobStatus.FAILED)  # the claimed one above, out of the way
    deferred = ratchet.enqueue(add, 2, 2).with_resource("api").submit().id
    work(app)
    assert ratchet.get_job(other).status == JobStatus.SUCCEEDED  # type: ignore[union-attr]
    found = ratchet.get_job(deferred)
    assert found is not None and found.status == JobStatus.PENDING and found.attempts == 0
    assert ratchet.queue_health()["counts"]["RUNNING"] == 0
