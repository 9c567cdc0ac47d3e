"""Connections that go half-open: a proxy between ratchet and the database stops forwarding
and keeps its sockets open (``tests/proxy.py``). The kernel acknowledges everything and answers
keepalives, so what finds it out is ratchet's own deadline: the listener's check (a round trip
after a quiet spell, answered in time or the connection is replaced), and a claim's bound."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from flask import Flask

from flask_ratchet.store import Store
from flask_ratchet.wakeups import channels as channels_module
from flask_ratchet.wakeups import hub as hub_module
from flask_ratchet.wakeups.channels import PgChannels, conninfo
from flask_ratchet.wakeups.hub import Hub
from flask_ratchet.worker import deadline as deadline_module
from flask_ratchet.worker.deadline import ClaimDeadline
from tests.acceptance.conftest import wait_until
from tests.apps import db, ratchet, record_run
from tests.proxy import Proxy, proxy_to


@pytest.fixture
def pg_proxy(pg_url: str) -> Iterator[Proxy]:
    with proxy_to(pg_url) as proxy:
        yield proxy


def test_a_listener_that_stopped_delivering_is_replaced(
    pg_url: str, pg_proxy: Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Quick checks, for the test: the bounds are what they are for, not when.
    monkeypatch.setattr(hub_module, "CHECK_AFTER", 0.5)
    monkeypatch.setattr(hub_module, "CHECK_TIMEOUT", 2.0)  # a loaded machine answers in time
    woken = threading.Semaphore(0)
    stop = threading.Event()
    hub = Hub(PgChannels(sa.make_url(pg_proxy.url(pg_url))))
    hub.attach(woken.release, stop)
    try:
        wait_until(lambda: hub.listening, what="the hub to listen")
        assert woken.acquire(timeout=10)  # each (re)connection wakes the worker
        assert pg_proxy.opened(b"LISTEN") == 1

        # Half-open: nothing comes through any more, and nothing says so.
        assert pg_proxy.blackhole(b"LISTEN") == 1
        wait_until(lambda: hub.reconnects >= 1, timeout=60, what="the listener's check to fail")
        wait_until(lambda: pg_proxy.opened(b"LISTEN") >= 2, timeout=60, what="a new listener")
        wait_until(lambda: hub.listening, timeout=60, what="the new listener to listen")

        # The new connection hears: a NOTIFY sent directly to the database wakes the worker.
        while woken.acquire(blocking=False):
            pass
        with psycopg.connect(conninfo(sa.make_url(pg_url)), autocommit=True) as conn:
            conn.execute("NOTIFY ratchet_wakeup")
        assert woken.acquire(timeout=30)
    finally:
        stop.set()


def test_a_listen_that_goes_unanswered_fails_in_bounded_time(
    pg_url: str, pg_proxy: Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection that goes half-open after its start-up, as it sends its LISTEN, fails the
    subscription within its bound (the hub then connects again), never holding its thread."""
    monkeypatch.setattr(channels_module, "SUBSCRIBE_TIMEOUT", 1.0)
    pg_proxy.trap = b"LISTEN"
    channels = PgChannels(sa.make_url(pg_proxy.url(pg_url)))
    began = time.monotonic()
    failure = in_thread(lambda: channels.subscription("ratchet_wakeup", "ratchet_ended"))
    assert isinstance(failure, psycopg.OperationalError)
    assert "did not answer LISTEN within 1s" in str(failure)
    assert time.monotonic() - began < 30
    assert pg_proxy.opened(b"LISTEN ratchet_wakeup; LISTEN ratchet_ended") == 1

    pg_proxy.trap = None  # the path works again: the next subscription listens
    subscription = channels.subscription("ratchet_wakeup")
    try:
        with psycopg.connect(conninfo(sa.make_url(pg_url)), autocommit=True) as conn:
            conn.execute("NOTIFY ratchet_wakeup")
        assert subscription.heard(30) == {"ratchet_wakeup"}
    finally:
        subscription.close()


def test_a_listener_that_delivers_is_checked_and_kept(
    pg_url: str, pg_proxy: Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check itself does not cost a working connection: many checks, one connection."""
    monkeypatch.setattr(hub_module, "CHECK_AFTER", 0.05)
    checks = []
    real = PgChannels.subscription

    def counted(self: PgChannels, *channels: str):  # type: ignore[no-untyped-def]
        subscription = real(self, *channels)
        check = subscription.check

        def counting(timeout: float) -> set[str]:
            checks.append(timeout)
            return check(timeout)

        subscription.check = counting  # type: ignore[method-assign]
        return subscription

    monkeypatch.setattr(PgChannels, "subscription", counted)
    stop = threading.Event()
    hub = Hub(PgChannels(sa.make_url(pg_proxy.url(pg_url))))
    hub.attach(lambda: None, stop)
    try:
        wait_until(lambda: len(checks) >= 5, what="several checks")
        assert hub.listening and hub.reconnects == 0
        assert pg_proxy.opened(b"LISTEN") == 1
    finally:
        stop.set()


# -- claims ---------------------------------------------------------------------------------------


def claim(store: Store, claims: sa.Engine, deadline: ClaimDeadline) -> list[Any]:
    """One claim as the worker's poller makes it, bounded by ``deadline``."""
    with deadline, store.single_statement(claims) as conn:
        deadline.watch(conn)
        return store.jobs.claim_due(conn, 10, "node-a", 15)


def in_thread(call: Callable[[], Any], within: float = 60) -> Any:
    """``call()``'s result or exception, from a thread, or a failure if it hangs ``within``."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(call())
        except Exception as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(within)
    assert outcome, f"still waiting after {within}s"
    return outcome[0]


#: The servers: SQLite has no server to end a statement (a claim waits for its lock for the
#: busy timeout) and no network between a worker and its file.
SERVERS = pytest.mark.parametrize("database_url", ["postgresql", "mariadb"], indirect=True)


@SERVERS
def test_the_server_ends_a_claim_that_runs_past_the_claim_timeout(app: Flask, dialect: str) -> None:
    """PostgreSQL's ``statement_timeout``, MariaDB's ``max_statement_time``: a claim held up
    behind a lock (here a whole-table one) ends with the server's error."""
    store = ratchet.runtime.store
    claims = store.claim_engine(db.engine, timeout=2)  # each statement's time on a busy machine
    try:
        with db.engine.connect() as holder:
            if dialect == "postgresql":
                holder.execute(sa.text("LOCK TABLE ratchet_job_queue IN ACCESS EXCLUSIVE MODE"))
            else:
                holder.execute(sa.text("LOCK TABLES ratchet_job_queue WRITE"))
            failed = in_thread(lambda: claim(store, claims, ClaimDeadline(3600)))
            if dialect == "mariadb":
                holder.execute(sa.text("UNLOCK TABLES"))
            holder.rollback()
        assert isinstance(failed, sa.exc.OperationalError), failed
        assert ("statement timeout" if dialect == "postgresql" else "max_statement_time") in str(
            failed
        )
        ratchet.enqueue_now(record_run, 1)
        assert len(claim(store, claims, ClaimDeadline(3600))) == 1  # the engine claims on
    finally:
        claims.dispose()


@SERVERS
def test_a_claim_whose_answer_never_comes_is_cut_by_the_worker(
    app: Flask, dialect: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through a proxy that stops forwarding: the server's limit cannot help (its error never
    arrives), nor can TCP's (the proxy's kernel acknowledges every byte): the claim's deadline,
    which the worker's watchdog enforces, cuts the connection; the next claim uses a new one."""
    monkeypatch.setattr(deadline_module, "MARGIN", 0.5)
    store = ratchet.runtime.store
    url = db.engine.url.render_as_string(hide_password=False)
    with proxy_to(url) as proxy:
        # Two seconds: a claim on a busy machine (five statements on MariaDB) is not cut.
        claims = store.claim_engine(sa.create_engine(proxy.url(url)), timeout=2)
        deadline = ClaimDeadline(2)
        stop = threading.Event()

        def watchdog() -> None:
            while not stop.wait(0.05):
                deadline.enforce(time.monotonic())

        threading.Thread(target=watchdog, daemon=True).start()
        try:
            assert claim(store, claims, deadline) == []  # connected through the proxy
            assert proxy.blackhole() == 1
            failed = in_thread(lambda: claim(store, claims, deadline))
            assert isinstance(failed, sa.exc.OperationalError), failed
            assert deadline.cuts == 1

            job_id = ratchet.enqueue_now(record_run, 1).id
            assert [c.job_id for c in claim(store, claims, deadline)] == [job_id]
            assert proxy.opened() == 2 and deadline.cuts == 1
        finally:
            stop.set()
            claims.dispose()
