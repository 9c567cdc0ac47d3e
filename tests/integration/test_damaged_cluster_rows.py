"""Rows of the cluster's shared tables (resource limits, nodes, their published breakers)
written straight into the database, holding what ratchet never writes: the console's pages
answer 200 showing the stored value escaped, on SQLite and PostgreSQL where the column can hold
it."""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from flask import Flask
from markupsafe import escape

from flask_ratchet import JobStatus
from flask_ratchet.breaker import Breakers, BreakerSettings, BreakerState
from flask_ratchet.columns import UtcDateTime
from flask_ratchet.console.reads.resources import live_node_ids
from flask_ratchet.maintenance.heartbeat import Heartbeat
from flask_ratchet.store.cluster import BREAKER_RESET
from flask_ratchet.store.types import NodeInfo
from tests.apps import add, create_app, db, ratchet
from tests.integration.helpers import count, each_database_that_holds

READ = {"X-Role": "read"}
EVERYWHERE = ("sqlite", "postgresql", "mariadb")
#: What SQLite keeps in a number column as it is given (PostgreSQL refuses it).
TEXT = "<b>lots"


@pytest.fixture
def app(database_url: str) -> Iterator[Flask]:
    """The test app, with a heartbeat interval long enough that a node row written by a test
    stays live however slowly the test runs."""
    app = create_app(database_url, RATCHET_HEARTBEAT_INTERVAL=600)
    with app.app_context():
        app.extensions["ratchet"].ensure_schema()
        yield app
        db.session.remove()
        db.engine.dispose()


def insert(table: str, **values: object) -> None:
    """Insert a row as a hand would: no checks, and no conversion by the column's type."""
    names = ", ".join(values)
    marks = ", ".join(f":{name}" for name in values)
    with db.engine.begin() as conn:
        conn.execute(sa.text(f"INSERT INTO {table} ({names}) VALUES ({marks})"), values)


def page(app: Flask, url: str) -> str:
    with app.app_context():
        answer = app.test_client().get(url, headers=READ)
    assert answer.status_code == 200, (url, answer.text[-2000:])
    return answer.text


# -- resource limits -----------------------------------------------------------------------------

#: (column of ratchet_resource_limit, what it holds, the databases that can store it).
LIMIT_DAMAGE: list[tuple[str, object, tuple[str, ...]]] = [
    ("max_concurrent", TEXT, ("sqlite",)),
    ("max_concurrent", b"\x00\xff", ("sqlite",)),
    ("max_concurrent", 1e300, ("sqlite",)),
    ("max_concurrent", 0, EVERYWHERE),
    ("max_concurrent", -5, EVERYWHERE),
    ("retry_delay", TEXT, ("sqlite",)),
    ("retry_delay", b"\x00", ("sqlite",)),
    ("retry_delay", math.nan, ("postgresql",)),  # SQLite stores NaN as NULL: refused here
    ("retry_delay", math.inf, ("sqlite", "postgresql")),  # MariaDB holds no infinity
    ("retry_delay", -1.0, EVERYWHERE),
    ("retry_delay", 1e300, EVERYWHERE),
]


@pytest.mark.parametrize(
    ("database_url", "column", "value"),
    each_database_that_holds(LIMIT_DAMAGE),
    indirect=["database_url"],
)
def test_resource_pages_show_a_damaged_limit_as_stored(
    app: Flask, column: str, value: object
) -> None:
    limit: dict[str, object] = {"max_concurrent": 3, "retry_delay": 2.0} | {column: value}
    with db.engine.begin() as conn:
        now = conn.execute(sa.select(sa.func.current_timestamp())).scalar_one()
    insert("ratchet_resource_limit", resource_name="api", updated_at=now, **limit)
    insert(
        "ratchet_resource_limit",
        resource_name="db",
        max_concurrent=2,
        retry_delay=1.0,
        updated_at=now,
    )
    listed = page(app, "/ratchet/resources")
    one = page(app, "/ratchet/resources/limit?name=api")
    for text in (listed, one):
        assert str(escape(str(value))) in text
        assert TEXT not in text  # escaped, never markup
        assert f"column &#39;{column}&#39; is unreadable" in text
    assert "0 / 2" in listed  # the other resource as usual
    assert "deferred by 5 s" in one


# -- nodes and the breakers they publish ---------------------------------------------------------

HUGE = "1" + "0" * 400  # a JSON integer past a float's range
BREAKER = '{"state": "CLOSED", "calls": 4, "failures": 1, "failure_rate": 0.25}'


def published(entry: str) -> str:
    """A node's ``info`` publishing ``entry`` as the breaker of service ``svc``."""
    return '{"breakers": {"svc": ' + entry + "}}"


#: (column of ratchet_node, what it holds, the databases that can store it).
NODE_DAMAGE: list[tuple[str, object, tuple[str, ...]]] = [
    ("pid", TEXT, ("sqlite",)),
    ("pid", b"\x00\xff", ("sqlite",)),
    ("pid", 1e300, ("sqlite",)),
    ("concurrency", TEXT, ("sqlite",)),
    ("info", published('{"state": "CLOSED", "calls": ' + HUGE + "}"), EVERYWHERE),
    ("info", published('{"state": "OPEN", "open_for_left": ' + HUGE + "}"), EVERYWHERE),
    ("info", published('{"state": "OPEN", "open_for_left": 1e400}'), EVERYWHERE),
    ("info", published('{"state": "HALF_OPEN", "times_opened": -' + HUGE + "}"), EVERYWHERE),
    ("info", published(BREAKER + ', "<b>x": {"state": "<b>"}'), EVERYWHERE),
    ("info", '{"breakers": ' + "[" * 100_000, EVERYWHERE),
    ("info", b"\x80\xff", ("sqlite",)),
    ("info", 5, ("sqlite",)),
]


@pytest.mark.parametrize(
    ("database_url", "column", "value"),
    each_database_that_holds(NODE_DAMAGE),
    indirect=["database_url"],
)
def test_breaker_and_node_pages_show_a_damaged_node_row(
    app: Flask, column: str, value: object
) -> None:
    with db.engine.begin() as conn:
        now = conn.execute(sa.select(sa.func.current_timestamp())).scalar_one()
    row: dict[str, object] = {
        "host": "h",
        "pid": 1,
        "version": "v",
        "concurrency": 2,
        "started_at": now,
        "last_heartbeat": now,
        "info": published(BREAKER),
    }
    insert("ratchet_node", node_id="damaged", **(row | {column: value}))
    insert("ratchet_node", node_id="sound", **row)
    breakers = page(app, "/ratchet/breakers")
    reset = page(app, "/ratchet/breakers/reset?service=svc")
    nodes = page(app, "/ratchet/nodes")
    page(app, "/ratchet/")
    for text in (breakers, reset, nodes):
        assert "<b>" not in text
    assert 'data-service="svc"' in breakers and "sound" in breakers and "sound" in reset
    assert "damaged" in nodes
    if column in ("pid", "concurrency"):
        assert str(escape(str(value))) in nodes
    if column == "pid":
        assert f"pid {escape(str(value))}" in breakers and "damaged" in breakers


# -- orphan recovery -------------------------------------------------------------------------------

#: A heartbeat no worker writes (each is the database's time): past every time ratchet compares
#: it with, on each database.
FUTURE_HEARTBEAT: list[tuple[str, object, tuple[str, ...]]] = [
    ("last_heartbeat", "infinity", ("postgresql",)),
    ("last_heartbeat", "294276-01-01 00:00:00+00", ("postgresql",)),
    ("last_heartbeat", "9999-12-31 00:00:00", ("sqlite", "mariadb")),
    ("last_heartbeat", "<b>soon", ("sqlite",)),  # text sorts after every time SQLite holds
]


@pytest.mark.parametrize(
    ("database_url", "column", "value"),
    each_database_that_holds(FUTURE_HEARTBEAT),
    indirect=["database_url"],
)
def test_a_heartbeat_in_the_future_keeps_no_node_alive(
    app: Flask, column: str, value: object
) -> None:
    """Its RUNNING jobs and permits are taken back like any silent node's, not held for ever."""
    job_id = ratchet.enqueue(add, 1, 2).with_resource("api").submit().id
    assert [c.job_id for c in ratchet.claim_due(1, "ghost")] == [job_id]
    runtime = ratchet.runtime
    with runtime.store.begin(runtime.engine) as conn:
        runtime.store.resources.acquire_permit(conn, job_id, "api", "ghost")
        runtime.store.cluster.heartbeat(conn, NodeInfo("ghost", "h", 1, "v", 1))
        runtime.store.cluster.heartbeat(conn, NodeInfo("alive", "h", 2, "v", 1))
    with db.engine.begin() as conn:
        conn.execute(
            sa.text(f"UPDATE ratchet_node SET {column} = :value WHERE node_id = 'ghost'"),
            {"value": value},
        )
        for table, at in (
            ("ratchet_job_queue", "picked_at"),
            ("ratchet_resource_permit", "acquired_at"),
        ):
            conn.execute(
                sa.update(sa.table(table, sa.column(at, UtcDateTime()))).values(
                    {at: datetime.now(UTC) - timedelta(minutes=5)}
                )
            )
    with db.engine.connect() as conn:  # the console agrees: only "alive" is live
        assert live_node_ids(conn, datetime.now(UTC), 60) == {"alive"}
    with runtime.store.begin(runtime.engine) as conn:
        recovered = runtime.store.cluster.recover_orphans(conn, grace=60)
        assert runtime.store.cluster.delete_dead_nodes(conn, 3600) == 1
    assert recovered.requeued == [job_id]
    assert count("ratchet_resource_permit") == 0
    found = ratchet.get_job(job_id)
    assert found is not None and found.status == JobStatus.PENDING
    assert count("ratchet_node") == 1  # the live node stays


# -- heartbeats ------------------------------------------------------------------------------------


# SQLite only: PostgreSQL's uuid column holds nothing but ids.
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_breaker_reset_with_a_damaged_id_is_applied_and_the_heartbeat_goes_on(
    app: Flask,
) -> None:
    """The heartbeat reads resets from the audit trail: an audit row whose id is not one (a
    hand's text) must not fail the beat, or the node would look dead and lose its jobs."""
    breakers = Breakers()
    breaker = breakers.get(
        "stripe",
        BreakerSettings(window=2, failure_rate=0.5, open_for=60, half_open_calls=1, min_calls=2),
    )
    assert breaker is not None
    for _ in range(2):
        breaker.record(success=False)
    assert breaker.state == BreakerState.OPEN
    runtime = ratchet.runtime
    beat = Heartbeat(
        runtime.store,
        runtime.engine,
        NodeInfo("n", "h", 1, "v", 1),
        60,
        threading.Event(),
        breakers,
    )
    beat.beat()
    with runtime.store.begin(runtime.engine) as conn:
        later = runtime.store.now(conn) + timedelta(seconds=1)
    insert(
        "ratchet_audit",
        audit_id="<b>not an id",
        at=later.replace(tzinfo=None),
        actor="ops",
        role="admin",
        action=BREAKER_RESET,
        scope="breaker",
        target="stripe",
        requested=1,
        changed=1,
    )
    beat.beat()
    beat.beat()
    assert beat.beats == 3
    assert breaker.state == BreakerState.CLOSED
