"""A request that ends with jobs it enqueued in ``db.session`` and never committed is warned
about, once, naming the tasks and the count, on every database: those jobs are rolled back with
the session and never run."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from flask import Flask, abort, request

from flask_ratchet.testing import run_jobs
from tests.apps import add, charge, create_app, db, ratchet
from tests.integration.helpers import count

WARNING = "a request ended without committing db.session"


@pytest.fixture
def web(database_url: str) -> Iterator[Flask]:
    app = create_app(database_url)

    @app.post("/enqueue")
    def enqueue() -> str:
        for _ in range(int(request.form.get("adds", 1))):
            add.enqueue(1, 2)
        if request.form.get("charge"):
            ratchet.enqueue_now(charge, 7)
        ending = request.form.get("end", "")
        if ending == "commit":
            db.session.commit()
        elif ending == "rollback":
            db.session.rollback()
        elif ending == "raise":
            raise RuntimeError("the view failed after enqueueing")
        elif ending == "abort":
            abort(409)
        return "done"

    @app.post("/commit-then-enqueue")
    def commit_then_enqueue() -> str:
        add.enqueue(1, 2)
        db.session.commit()
        ratchet.enqueue_now(charge, 8)  # after the commit: held again, and lost
        return "done"

    @app.post("/savepoint")
    def savepoint() -> str:
        nested = db.session.begin_nested()
        add.enqueue(1, 2)
        nested.rollback()
        return "done"

    @app.post("/own-transaction")
    def own_transaction() -> str:
        with ratchet.transaction():
            add.enqueue(1, 2)
        return "done"

    with app.app_context():
        app.extensions["ratchet"].ensure_schema()
    yield app


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "flask_ratchet" and r.levelno == logging.WARNING and WARNING in r.getMessage()
    ]


def test_a_request_that_never_commits_is_warned_about_once_naming_the_jobs(
    web: Flask, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="flask_ratchet")
    answer = web.test_client().post("/enqueue", data={"adds": 2, "charge": 1})
    assert answer.status_code == 200
    (message,) = warnings(caplog)
    assert "held 3 ratchet jobs it submitted: billing.charge, tests.apps:add (2)" in message
    assert "call db.session.commit() after enqueueing" in message
    with web.app_context():
        assert count("ratchet_job") == 0  # the warning tells the truth: nothing was written


@pytest.mark.parametrize("end", ["commit", "rollback", "raise"])
def test_no_warning_when_the_request_committed_rolled_back_or_failed(
    web: Flask, caplog: pytest.LogCaptureFixture, end: str
) -> None:
    caplog.set_level(logging.WARNING, logger="flask_ratchet")
    answer = web.test_client().post("/enqueue", data={"end": end})
    assert answer.status_code == (500 if end == "raise" else 200)
    assert warnings(caplog) == []
    with web.app_context():
        assert count("ratchet_job") == (1 if end == "commit" else 0)
        if end == "commit":
            assert [j.result for j in run_jobs(web)] == [3]


def test_an_error_response_that_keeps_the_jobs_uncommitted_is_warned_about(
    web: Flask, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="flask_ratchet")
    assert web.test_client().post("/enqueue", data={"end": "abort"}).status_code == 409
    (message,) = warnings(caplog)
    assert "held 1 ratchet job it submitted: tests.apps:add." in message
    assert "db.session.rollback() to drop them on purpose" in message


def test_only_what_is_still_uncommitted_is_named(
    web: Flask, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="flask_ratchet")
    client = web.test_client()
    assert client.post("/commit-then-enqueue").status_code == 200
    (message,) = warnings(caplog)
    assert "held 1 ratchet job it submitted: billing.charge." in message
    caplog.clear()
    assert client.post("/savepoint").status_code == 200  # rolled back to the savepoint
    assert client.post("/own-transaction").status_code == 200  # committed by ratchet itself
    assert warnings(caplog) == []
    with web.app_context():
        assert count("ratchet_job") == 2


def test_requests_sharing_a_session_warn_about_the_same_jobs_once(
    web: Flask, caplog: pytest.LogCaptureFixture
) -> None:
    # As under the testing kit's fixtures or pytest-flask: one app context, so one db.session,
    # kept by the test across several requests.
    caplog.set_level(logging.WARNING, logger="flask_ratchet")
    client = web.test_client()
    with web.app_context():
        assert client.post("/enqueue").status_code == 200
        assert client.post("/enqueue", data={"adds": 0}).status_code == 200
        assert len(warnings(caplog)) == 1
        db.session.rollback()
