"""Circuit breakers in the database: published with each heartbeat, reset through the audit log."""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timedelta

import sqlalchemy as sa
from flask import Flask

from flask_ratchet.breaker import Breakers, BreakerSettings, BreakerState
from flask_ratchet.maintenance.heartbeat import Heartbeat
from flask_ratchet.schema import node
from flask_ratchet.store.cluster import BREAKER_RESET
from flask_ratchet.store.types import NodeInfo
from tests.apps import ratchet

SETTINGS = BreakerSettings(window=4, failure_rate=0.5, open_for=60, half_open_calls=1, min_calls=4)


def published(service: str) -> dict[str, object]:
    runtime = ratchet.runtime
    with runtime.engine.connect() as conn:
        info = conn.execute(sa.select(node.c.info).where(node.c.node_id == "n-breakers")).scalar()
    return json.loads(info)["breakers"][service]  # type: ignore[no-any-return]


def test_breakers_are_published_and_an_operator_reset_reaches_the_worker(app: Flask) -> None:
    breakers = Breakers()
    breaker = breakers.get("stripe", SETTINGS)
    assert breaker is not None
    for _ in range(4):
        assert breaker.allow() is None
        breaker.record(success=False)
    assert breaker.state == BreakerState.OPEN
    runtime = ratchet.runtime
    info = NodeInfo("n-breakers", "host", 1, "test", 2)
    beat = Heartbeat(runtime.store, runtime.engine, info, 60, threading.Event(), breakers=breakers)
    beat.beat()
    assert published("stripe")["state"] == "OPEN"
    assert published("stripe")["times_opened"] == 1
    with runtime.store.begin(runtime.engine) as conn:
        runtime.store.cluster.record_audit(
            conn,
            at=runtime.store.now(conn),
            actor="ops",
            role="admin",
            action=BREAKER_RESET,
            scope="breaker",
            target="stripe",
            requested=1,
            changed=1,
        )
    beat.beat()  # reads the reset: the breaker closes
    assert breaker.state == BreakerState.CLOSED
    beat.beat()
    assert published("stripe")["state"] == "CLOSED"
    breaker.record(success=False)
    beat.beat()  # the same reset is not applied twice
    assert published("stripe")["failures"] == 1


def reset(at: datetime, service: str = "stripe") -> None:
    runtime = ratchet.runtime
    with runtime.store.begin(runtime.engine) as conn:
        runtime.store.cluster.record_audit(
            conn,
            at=at,
            actor="ops",
            role="admin",
            action=BREAKER_RESET,
            scope="breaker",
            target=service,
            requested=1,
            changed=1,
        )


def test_a_reset_that_commits_after_a_later_stamped_one_is_still_applied(app: Flask) -> None:
    """An audit row carries its transaction's start: a reset can commit after another one
    stamped later than it, and must not be missed."""
    breakers = Breakers()
    breaker = breakers.get("stripe", SETTINGS)
    assert breaker is not None
    runtime = ratchet.runtime
    info = NodeInfo("n-breakers", "host", 1, "test", 2)
    beat = Heartbeat(runtime.store, runtime.engine, info, 60, threading.Event(), breakers=breakers)
    beat.beat()
    with runtime.store.begin(runtime.engine) as conn:
        now = runtime.store.now(conn)
    time.sleep(0.5)
    reset(now + timedelta(seconds=0.3), service="other")  # the later-stamped one commits first
    beat.beat()
    for _ in range(4):
        assert breaker.allow() is None
        breaker.record(success=False)
    assert breaker.state == BreakerState.OPEN
    reset(now + timedelta(seconds=0.1))  # stamped earlier, committed later
    beat.beat()
    assert breaker.state == BreakerState.CLOSED
