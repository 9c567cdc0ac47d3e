"""Resource rates in the store, on every database: at most ``count`` starts in any period (a
sliding window), deferral until the window has room, with and without a concurrency limit, and
the ways a rate is given (``configure_resource``, ``RATCHET_RESOURCES``, ``rate_limit=``)."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa
from flask import Flask

from flask_ratchet.config import RatchetConfig
from flask_ratchet.errors import ConfigError, InvalidOption
from flask_ratchet.resources import DEFAULT_RETRY_DELAY, Rate, ResourceLimit
from flask_ratchet.schema import resource_start
from flask_ratchet.store.types import Permit
from tests.apps import ratchet
from tests.integration.helpers import count
from tests.integration.test_resources import acquire, release, running, tx


def starts() -> int:
    return count("ratchet_resource_start")


def test_a_rate_counts_starts_and_defers_until_the_oldest_leaves_the_window(app: Flask) -> None:
    limit = ratchet.configure_resource("api", rate=(3, timedelta(minutes=1)))
    assert limit == ResourceLimit("api", None, DEFAULT_RETRY_DELAY, Rate(3, 60.0))
    first, second, third, fourth = running(4)
    assert [acquire(j).permit for j in (first, second, third)] == [Permit.COUNTED] * 3
    assert starts() == 3
    over = acquire(fourth)
    assert over.permit is Permit.FULL
    assert 55 < over.retry_delay <= 60  # until the first start is a minute old
    assert over.reason == "resource 'api' had its 3/m starts"
    assert starts() == 3  # the refused start is not counted
    # A start that left the window frees a place, and is deleted on the way.
    with tx() as conn:
        oldest = conn.execute(sa.select(sa.func.min(resource_start.c.started_at))).scalar_one()
        conn.execute(
            sa.update(resource_start)
            .where(resource_start.c.started_at == oldest)
            .values(started_at=oldest - timedelta(minutes=2))
        )
    assert acquire(fourth).permit is Permit.COUNTED
    assert starts() == 3
    assert release(fourth) is False  # a rate alone holds no permit to give back


def test_a_rate_beside_a_concurrency_limit_needs_both(app: Flask) -> None:
    ratchet.configure_resource("api", 1, 2, rate="2/h")
    a, b, c = running(3)
    assert acquire(a).permit is Permit.GRANTED
    full = acquire(b)
    assert (full.permit, full.retry_delay) == (Permit.FULL, 2.0)  # no permit: retry_delay
    assert release(a) is True
    assert acquire(b).permit is Permit.GRANTED
    assert release(b) is True
    by_rate = acquire(c)
    assert by_rate.permit is Permit.FULL and 3590 < by_rate.retry_delay <= 3600
    assert starts() == 2


def test_a_job_no_longer_running_here_takes_no_start(app: Flask) -> None:
    ratchet.configure_resource("api", rate="5/s")
    (job_id,) = running(1)
    assert acquire(job_id, node="node-b").permit is Permit.GONE
    assert starts() == 0


@pytest.mark.parametrize(
    ("given", "rate"),
    [
        ("10/s", Rate(10, 1.0)),
        ("100/m", Rate(100, 60.0)),
        ("5/90s", Rate(5, 90.0)),
        ((7, timedelta(hours=1)), Rate(7, 3600.0)),
        ((7, 0.5), Rate(7, 0.5)),
        ((5, timedelta(days=30)), Rate(5, 2_592_000.0)),
    ],
)
def test_the_forms_of_a_rate(app: Flask, given: object, rate: Rate) -> None:
    assert ratchet.configure_resource("api", rate=given).rate == rate  # type: ignore[arg-type]
    with tx() as conn:
        assert ratchet.runtime.store.resources.get_resource_limit(conn, "api") == ResourceLimit(
            "api", None, DEFAULT_RETRY_DELAY, rate
        )
    assert str(rate) == (given if isinstance(given, str) else str(rate))
    assert ratchet.configure_resource("api", rate=str(rate)).rate == rate  # read back as shown


@pytest.mark.parametrize(
    "given", ["0/s", "10/d", "ten/s", "10/0s", (1, 0), (1, 0.0001), (True, 1), [1]]
)
def test_a_bad_rate_is_refused_and_nothing_is_written(app: Flask, given: object) -> None:
    with pytest.raises(InvalidOption, match="rate of resource 'api' must be"):
        ratchet.configure_resource("api", rate=given)  # type: ignore[arg-type]
    assert count("ratchet_resource_limit") == 0


def test_a_limit_needs_a_maximum_or_a_rate(app: Flask) -> None:
    with pytest.raises(InvalidOption, match="needs max_concurrent, rate or both"):
        ratchet.configure_resource("api")
    assert count("ratchet_resource_limit") == 0


def test_ratchet_resources_takes_a_rate() -> None:
    config = RatchetConfig.from_mapping({"RATCHET_RESOURCES": {"api": {"rate": "10/s"}}})
    assert config.resources["api"] == ResourceLimit("api", None, DEFAULT_RETRY_DELAY, Rate(10, 1))
    with pytest.raises(ConfigError, match="'max_concurrent', 'rate' or both"):
        RatchetConfig.from_mapping({"RATCHET_RESOURCES": {"api": {"retry_delay": 1}}})
    with pytest.raises(ConfigError, match="rate of resource 'api' must be"):
        RatchetConfig.from_mapping({"RATCHET_RESOURCES": {"api": {"rate": "fast"}}})


def test_a_rate_limited_task_names_a_resource_after_itself(app: Flask) -> None:
    @ratchet.task(name="rated.ping", rate_limit="2/s")
    def ping() -> None: ...

    job = ping.builder().submit()
    assert ratchet.get_job(job.id).resource == "rated.ping"  # type: ignore[union-attr]
    task = ratchet.runtime.registry.get("rated.ping")
    assert task is not None
    assert task.rate == Rate(2, 1.0)
    with pytest.raises(InvalidOption, match="resource= or rate_limit=, not both"):

        @ratchet.task(name="rated.both", resource="api", rate_limit="2/s")
        def both() -> None: ...

    with pytest.raises(InvalidOption, match="rate of resource"):

        @ratchet.task(name="rated.bad", rate_limit="2 per second")
        def bad() -> None: ...
