"""PostgreSQL: a submission that makes a job due after a quiet spell sends the wake-up in its
own statement, so a listening worker hears of the job as it commits; the rest of a burst, and a
submission inside a caller's transaction, leave the notice to the process's coalescing sender.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import psycopg
import pytest
from flask import Flask

from flask_ratchet.runtime import Runtime
from flask_ratchet.wakeups import notices
from flask_ratchet.wakeups.channels import WAKEUP, conninfo
from tests.apps import add, create_app, db, ratchet


@pytest.fixture
def pg_app(pg_url: str) -> Iterator[Flask]:
    from tests.conftest import truncate_all

    truncate_all(pg_url)
    app = create_app(pg_url)
    with app.app_context():
        yield app
        db.session.remove()
        db.engine.dispose()


@pytest.fixture
def listener(pg_url: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    import sqlalchemy as sa

    with psycopg.connect(conninfo(sa.make_url(pg_url)), autocommit=True) as conn:
        conn.execute(f"LISTEN {WAKEUP}")
        yield conn


def heard(conn: psycopg.Connection[tuple[object, ...]], within: float = 5.0) -> int:
    """The wake-up notices that arrive within ``within`` seconds of the first (0 if none)."""
    return sum(1 for _ in conn.notifies(timeout=within, stop_after=1))


def sent_after_commit(runtime: Runtime) -> int:
    """Notices this process's coalescing sender has sent."""
    found = runtime.wakeups._notifiers.get(WAKEUP)
    return 0 if found is None else found.sent


def test_a_submission_after_a_quiet_spell_notifies_in_its_own_statement(
    pg_app: Flask, listener: psycopg.Connection[tuple[object, ...]]
) -> None:
    runtime: Runtime = pg_app.extensions["ratchet"]
    time.sleep(notices.QUIET)
    ratchet.enqueue_now(add, 1, 2)
    assert heard(listener) == 1
    assert sent_after_commit(runtime) == 0  # the statement sent it, not the sender


def test_the_rest_of_a_burst_goes_to_the_sender(
    pg_app: Flask, listener: psycopg.Connection[tuple[object, ...]]
) -> None:
    runtime: Runtime = pg_app.extensions["ratchet"]
    time.sleep(notices.QUIET)
    ratchet.enqueue_now(add, 1, 2)  # in its statement
    ratchet.enqueue_now(add, 3, 4)  # within the quiet spell: after the commit
    assert heard(listener) == 1
    notifier = runtime.wakeups._notifiers[WAKEUP]
    assert notifier.flush(5.0)
    assert notifier.sent == 1


def test_a_submission_in_a_request_leaves_the_notice_until_after_its_commit(
    pg_app: Flask, listener: psycopg.Connection[tuple[object, ...]]
) -> None:
    runtime: Runtime = pg_app.extensions["ratchet"]
    time.sleep(notices.QUIET)
    with pg_app.test_request_context():
        ratchet.enqueue_now(add, 1, 2)
        # Not yet committed: nothing may be heard (a notice in the statement would wait for
        # the request's commit, holding it in line behind every other notifying commit).
        assert heard(listener, within=0.3) == 0
        db.session.commit()
    assert heard(listener) == 1
    notifier = runtime.wakeups._notifiers[WAKEUP]
    assert notifier.flush(5.0)
    assert notifier.sent == 1


def test_a_job_due_later_sends_no_notice(
    pg_app: Flask, listener: psycopg.Connection[tuple[object, ...]]
) -> None:
    time.sleep(notices.QUIET)
    ratchet.schedule(60, add, 1, 2).submit()
    assert heard(listener, within=0.5) == 0
