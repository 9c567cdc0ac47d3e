"""Wake-ups through Redis (``RATCHET_WAKEUP_URL``), on every database, against real worker
processes: a job enqueued elsewhere is picked up at once although the worker's poll sleeps for
many seconds, and a waiter learns of an end at once; with Redis gone, polling still runs the
jobs."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest
import redis
from flask import Flask

from flask_ratchet import JobStatus
from flask_ratchet.wakeups.channels import RedisChannels
from flask_ratchet.wakeups.end_watches import ChannelEndWatch
from tests.acceptance.conftest import Workers
from tests.apps import add, create_app, ratchet

REDIS = os.environ.get("RATCHET_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
#: Long enough that a pickup within it can only come from a wake-up.
SLEEPY = {
    "RATCHET_POLL_INTERVAL": 20,
    "RATCHET_POLL_MAX_INTERVAL": 20,
    "RATCHET_BURST_INTERVAL": 20,
}


@pytest.fixture
def prefix(database_url: str) -> str:
    """A channel prefix of this test's own, so that runs sharing the Redis never cross."""
    try:
        redis.Redis.from_url(REDIS, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        pytest.fail(f"Redis is unreachable at {REDIS}: {exc}", pytrace=False)
    return f"ratchet-test:{os.getpid()}:{time.monotonic_ns()}"


@pytest.fixture
def app(database_url: str, prefix: str) -> Iterator[Flask]:
    app = create_app(database_url, RATCHET_WAKEUP_URL=REDIS, RATCHET_WAKEUP_PREFIX=prefix)
    with app.app_context():
        ratchet.runtime.ensure_schema()
        yield app


def test_a_sleeping_worker_is_woken_at_once(app: Flask, workers: Workers, prefix: str) -> None:
    proc = workers.start(RATCHET_WAKEUP_URL=REDIS, RATCHET_WAKEUP_PREFIX=prefix, **SLEEPY)
    add.enqueue(0, 0).wait(timeout=60)  # the worker is up, and polls again in 20 s
    time.sleep(1)
    started = time.monotonic()
    done = add.enqueue(2, 3).wait(timeout=60)
    took = time.monotonic() - started
    assert (done.status, done.result) == (JobStatus.SUCCEEDED, 5)
    assert took < 5, (took, workers.output(proc))  # not the 20 s poll


def test_a_waiter_hears_an_end_at_once(app: Flask, workers: Workers, prefix: str) -> None:
    workers.start(RATCHET_WAKEUP_URL=REDIS, RATCHET_WAKEUP_PREFIX=prefix)
    add.enqueue(0, 0).wait(timeout=60)
    watch = ChannelEndWatch(RedisChannels(REDIS, prefix))
    try:
        add.enqueue(1, 1)
        started = time.monotonic()
        watch.wait(20)
        assert time.monotonic() - started < 10  # without the notice: the full 20 s
    finally:
        watch.close()


def test_without_redis_the_poll_still_runs_the_jobs(database_url: str, workers: Workers) -> None:
    nowhere = "redis://127.0.0.1:9/0"  # nothing listens there
    app = create_app(database_url, RATCHET_WAKEUP_URL=nowhere)
    with app.app_context():
        ratchet.runtime.ensure_schema()
        proc = workers.start(RATCHET_WAKEUP_URL=nowhere)
        done = add.enqueue(4, 5).wait(timeout=60)
        assert (done.status, done.result) == (JobStatus.SUCCEEDED, 9)
        assert "wake-up connection lost" in workers.output(proc)
