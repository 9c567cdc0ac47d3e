"""Reads off the primary (``RATCHET_READ_URL``) against a real streaming replica: a primary and
its hot standby of their own, started on loopback ports (:mod:`tests.replica`). The console's
pages and its metrics read the replica; actions, their guards and everything else the primary.
Replay is paused on the replica to tell the two apart."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from flask import Flask

from flask_ratchet import JobStatus
from flask_ratchet.database import reading
from flask_ratchet.runtime import Runtime
from flask_ratchet.testing import run_jobs
from tests.acceptance.conftest import wait_until
from tests.apps import add, create_app, db, ratchet, refuse
from tests.conftest import truncate_all
from tests.integration.test_console import Console
from tests.replica import ReplicaPair, wait_for_replay


@pytest.fixture
def pair(replica_pair: ReplicaPair) -> ReplicaPair:
    """The run's primary and replica (started once, for every test that asks)."""
    return replica_pair


@pytest.fixture
def replica_admin(pair: ReplicaPair) -> Iterator[sa.Engine]:
    """An engine on the replica that pauses and resumes its replay; replay resumed after the
    test, whatever it did."""
    engine = sa.create_engine(pair.replica_url(), isolation_level="AUTOCOMMIT")
    yield engine
    with engine.connect() as conn:
        conn.exec_driver_sql("SELECT pg_wal_replay_resume()")
    engine.dispose()


@pytest.fixture
def app(pair: ReplicaPair, replica_admin: sa.Engine) -> Iterator[Flask]:
    primary = pair.primary_url()
    truncate_all(primary)
    wait_for_replay(primary, pair.replica_url())
    made = create_app(primary, RATCHET_READ_URL=pair.replica_url())
    with made.app_context():
        yield made
        db.session.remove()
        db.engine.dispose()
        runtime: Runtime = made.extensions["ratchet"]
        assert runtime.replica is not None
        runtime.replica.dispose()


def pause_replay(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        conn.exec_driver_sql("SELECT pg_wal_replay_pause()")
        # Pausing is asked for, and takes effect at the next record.
        wait_until(
            lambda: (
                conn.exec_driver_sql("SELECT pg_get_wal_replay_pause_state()").scalar_one()
                == "paused"
            ),
            what="replay to pause",
        )


def resume_replay(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        conn.exec_driver_sql("SELECT pg_wal_replay_resume()")


def shown_lag(console: Console) -> float | None:
    """The lag the alarm strip shows (seconds), as its refresh draws it; ``None``: unknown."""
    strip = console.get("/ratchet/alarms").text
    found = re.search(r'data-replica-lag="([0-9.]*)"', strip)
    assert found is not None, strip
    return float(found.group(1)) if found.group(1) else None


def metric(console: Console, sample: str) -> float:
    """The value of one sample (``ratchet_jobs{status="PENDING"}``) in a scrape."""
    text = console.get("/ratchet/metrics").text
    found = re.search(rf"^{re.escape(sample)} ([0-9.e+-]+)$", text, re.M)
    assert found is not None, text
    return float(found.group(1))


def jobs_metric(console: Console, status: str) -> int:
    return int(metric(console, f'ratchet_jobs{{status="{status}"}}'))


def test_pages_and_metrics_read_the_replica_and_actions_the_primary(
    app: Flask, pair: ReplicaPair, replica_admin: sa.Engine
) -> None:
    console = Console(app.test_client())
    before = [add.enqueue(n, n).id for n in range(3)]
    wait_for_replay(pair.primary_url(), pair.replica_url())
    page = console.get("/ratchet/jobs").text
    assert all(str(i) in page for i in before), page[-4000:]
    assert jobs_metric(console, "PENDING") == 3
    wait_until(lambda: "Pages read from a replica, in sync." in console.get("/ratchet/").text)

    pause_replay(replica_admin)
    after = [add.enqueue(n, n).id for n in range(2)]
    doomed = refuse.builder("no").with_queue("doomed").submit().id
    assert [j.status for j in run_jobs(app, queues=["doomed"])] == [JobStatus.FAILED]

    # The pages and the metrics see the replica, which has none of the later jobs.
    page = console.get("/ratchet/jobs").text
    assert all(str(i) in page for i in before)
    assert not any(str(i) in page for i in [*after, doomed])
    assert console.get(f"/ratchet/jobs/{doomed}").status_code == 404
    assert jobs_metric(console, "PENDING") == 3
    assert jobs_metric(console, "FAILED") == 0
    # Behind once the replica has received what it does not replay (the primary's WAL reaches
    # it a moment after the commits).
    wait_until(
        lambda: re.search(
            r"Pages read from a replica, [0-9.]+ s behind\.", console.get("/ratchet/").text
        ),
        what="the overview to say the replica is behind",
    )
    first = shown_lag(console)
    assert first is not None and first > 0
    wait_until(lambda: (shown_lag(console) or 0) > first, what="the shown lag to grow")
    scraped = metric(console, "ratchet_replica_lag_seconds")
    assert scraped > first

    # An action reads and writes the primary: its guard finds the failed job there.
    done = console.post(f"/ratchet/jobs/{doomed}/retry")
    assert done.status_code == 200, done.text
    assert ratchet.get_job(doomed).status == JobStatus.PENDING  # type: ignore[union-attr]
    assert console.get(f"/ratchet/jobs/{doomed}").status_code == 404  # still not replayed

    resume_replay(replica_admin)
    wait_for_replay(pair.primary_url(), pair.replica_url())
    page = console.get("/ratchet/jobs").text
    assert all(str(i) in page for i in [*before, *after, doomed])
    assert "PENDING" in console.get(f"/ratchet/jobs/{doomed}").text
    assert jobs_metric(console, "PENDING") == 6
    wait_until(lambda: metric(console, "ratchet_replica_lag_seconds") == 0, what="in sync")
    wait_until(lambda: "Pages read from a replica, in sync." in console.get("/ratchet/").text)


def test_the_bulk_confirmation_counts_on_the_primary(
    app: Flask, pair: ReplicaPair, replica_admin: sa.Engine
) -> None:
    console = Console(app.test_client())
    pause_replay(replica_admin)
    ids = [add.enqueue(n, n).id for n in range(4)]
    confirm = console.get("/ratchet/jobs/bulk?action=cancel&task=tests.apps:add").text
    # What the action will change: the four jobs the primary holds, none of which the replica has.
    assert "<strong>4</strong> jobs match" in confirm, confirm
    done = console.post(
        "/ratchet/jobs/bulk",
        {"action": "cancel", "task": "tests.apps:add", "bound": str(max(ids)), "count": "4"},
    )
    assert done.status_code == 200, done.text
    assert {ratchet.get_job(i).status for i in ids} == {JobStatus.CANCELED}  # type: ignore[union-attr]
    assert not any(str(i) in console.get("/ratchet/jobs").text for i in ids)


def test_nothing_outside_the_console_reads_the_replica(
    app: Flask, pair: ReplicaPair, replica_admin: sa.Engine
) -> None:
    pause_replay(replica_admin)
    job = add.enqueue(1, 2).id
    # The library's own reads (an app's, a worker's) stay on the primary.
    assert ratchet.get_job(job) is not None
    with reading():  # what a console page's reads do: the replica, which has no such job
        assert ratchet.get_job(job) is None
        with pytest.raises(sa.exc.DBAPIError, match="read-only"):
            add.enqueue(1, 1)  # and a write there is refused, not sent to the primary
    assert ratchet.get_job(job) is not None


def test_a_read_url_of_a_primary_says_it_is_no_replica(pg_url: str) -> None:
    """Pointed at a server that is not in recovery, the pages still read there (read-only)
    and say so."""
    truncate_all(pg_url)
    made = create_app(pg_url, RATCHET_READ_URL=pg_url)
    with made.app_context():
        console = Console(made.test_client())
        assert "a server that is no replica" in console.get("/ratchet/").text
        with reading(), pytest.raises(sa.exc.DBAPIError, match="read-only"):
            add.enqueue(1, 1)
        db.session.remove()
        db.engine.dispose()
        made.extensions["ratchet"].replica.dispose()


@pytest.mark.parametrize("pooled", [False, True])
def test_the_replicas_engine_follows_the_poolers_rules(pg_url: str, pooled: bool) -> None:
    """Behind a transaction pooler the replica's connections prepare no statement (a prepared
    statement lives in one server session); else psycopg's default."""
    options = {
        "RATCHET_TRANSACTION_POOLING": True,
        "SQLALCHEMY_ENGINE_OPTIONS": {"connect_args": {"prepare_threshold": None}},
    }
    made = create_app(pg_url, RATCHET_READ_URL=pg_url, **(options if pooled else {}))
    with made.app_context():
        replica = made.extensions["ratchet"].replica
        with replica.connect() as conn:
            threshold = conn.connection.driver_connection.prepare_threshold
            assert conn.exec_driver_sql("SHOW transaction_read_only").scalar_one() == "on"
        assert (threshold is None) is pooled
        db.session.remove()
        db.engine.dispose()
        replica.dispose()
