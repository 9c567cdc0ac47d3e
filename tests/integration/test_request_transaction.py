"""Enqueue inside a Flask request joins the request's db.session transaction."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from flask import Flask

from flask_ratchet import DuplicateBusinessKey
from tests.apps import Order, add, create_app, db, ratchet
from tests.integration.helpers import count, rows_written

T = TypeVar("T")


@pytest.fixture
def routes(database_url: str) -> Iterator[Flask]:
    """An app with no app context pushed: each request gets its own, and its own session."""
    app = create_app(database_url)
    with app.app_context():
        app.extensions["ratchet"].ensure_schema()

    @app.post("/orders/commit")
    def commit() -> str:
        db.session.add(Order(item="book"))
        handle = ratchet.enqueue(add, 1, 2).with_tags("order").with_business_key("o-1").submit()
        assert count("ratchet_job") == 0  # flushed into the request's transaction, not committed
        db.session.commit()
        return str(handle.id)

    @app.post("/orders/raise")
    def fail() -> str:
        db.session.add(Order(item="book"))
        ratchet.enqueue(add, 1, 2).with_tags("order").with_business_key("o-1").submit()
        raise RuntimeError("payment declined")

    @app.post("/orders/rollback")
    def rollback() -> str:
        db.session.add(Order(item="book"))
        ratchet.enqueue(add, 1, 2).with_tags("order").with_business_key("o-1").submit()
        db.session.rollback()
        return "rolled back"

    @app.post("/orders/forget")
    def forget() -> str:
        ratchet.enqueue(add, 1, 2).with_tags("order").with_business_key("o-1").submit()
        return "never committed"

    @app.post("/orders/duplicate")
    def duplicate() -> str:
        db.session.add(Order(item="book"))
        ratchet.enqueue(add, 1, 2).with_business_key("o-2").submit()
        try:
            ratchet.enqueue(add, 3, 4).with_business_key("o-2").submit()
        except DuplicateBusinessKey:
            pass  # the request's transaction is still usable
        db.session.commit()
        return "ok"

    yield app
    with app.app_context():
        db.engine.dispose()


def in_app(app: Flask, fn: Callable[[], T]) -> T:
    with app.app_context():
        return fn()


def test_commit_in_the_handler_makes_the_job_visible(routes: Flask) -> None:
    response = routes.test_client().post("/orders/commit")
    assert response.status_code == 200
    assert in_app(routes, lambda: count('"order"')) == 1
    assert in_app(routes, rows_written) == {
        "ratchet_job": 1,
        "ratchet_job_queue": 1,
        "ratchet_job_tag": 1,
        "ratchet_business_key": 1,
    }
    assert in_app(routes, lambda: ratchet.get_job(response.text)) is not None


@pytest.mark.parametrize(
    ("route", "status"),
    [("/orders/raise", 500), ("/orders/rollback", 200), ("/orders/forget", 200)],
)
def test_no_commit_means_no_job_no_tag_no_key(routes: Flask, route: str, status: int) -> None:
    routes.testing = False  # let the exception become a 500, as in production
    assert routes.test_client().post(route).status_code == status
    assert in_app(routes, lambda: count('"order"')) == 0
    assert in_app(routes, rows_written) == dict.fromkeys(in_app(routes, rows_written), 0)
    # the key was never reserved, so it is free
    fresh = in_app(routes, lambda: ratchet.enqueue(add, 1, 1).with_business_key("o-1").submit())
    assert fresh.created


def test_a_refused_duplicate_leaves_the_request_transaction_usable(routes: Flask) -> None:
    assert routes.test_client().post("/orders/duplicate").status_code == 200
    assert in_app(routes, lambda: count('"order"')) == 1
    assert in_app(routes, lambda: count("ratchet_job")) == 1


def test_outside_a_request_enqueue_commits_on_its_own(app: Flask) -> None:
    ratchet.enqueue_now(add, 1, 2)
    assert count("ratchet_job") == 1
    assert not db.session().in_transaction()


def test_an_open_session_transaction_is_joined(app: Flask) -> None:
    db.session.add(Order(item="pen"))
    db.session.flush()
    ratchet.enqueue_now(add, 1, 2)
    assert count("ratchet_job") == 0
    db.session.rollback()
    assert rows_written() == dict.fromkeys(rows_written(), 0)


def test_a_bulk_enqueue_joins_the_open_session_transaction(app: Flask) -> None:
    """Also on PostgreSQL's COPY path: the rows go into the session's transaction."""
    db.session.add(Order(item="pen"))
    db.session.flush()
    ratchet.enqueue_many(ratchet.enqueue(add, i, i).with_tags("bulk") for i in range(50))
    assert count("ratchet_job") == 0
    db.session.rollback()
    assert rows_written() == dict.fromkeys(rows_written(), 0)
    db.session.add(Order(item="pen"))
    ratchet.enqueue_many(ratchet.enqueue(add, i, i).with_tags("bulk") for i in range(50))
    db.session.commit()
    assert count('"order"') == 1
    assert rows_written() == {
        "ratchet_job": 50,
        "ratchet_job_queue": 50,
        "ratchet_job_tag": 50,
        "ratchet_business_key": 0,
    }


def test_ratchet_transaction_groups_operations(app: Flask) -> None:
    with pytest.raises(RuntimeError), ratchet.transaction():
        ratchet.enqueue_now(add, 1, 2)
        ratchet.enqueue_now(add, 3, 4)
        raise RuntimeError("abort")
    assert count("ratchet_job") == 0
    with ratchet.transaction():
        first = ratchet.enqueue_now(add, 1, 2)
        assert ratchet.cancel_job(first.id)
        ratchet.enqueue_now(add, 3, 4)
    assert count("ratchet_job") == 2 and count("ratchet_job_queue") == 1


def test_first_request_may_write_before_its_first_enqueue(tmp_path: Path) -> None:
    """SQLite auto-create happens before the handler, so it never waits on the handler's lock."""
    app = create_app(f"sqlite:///{tmp_path / 'fresh.db'}")

    @app.post("/signup")
    def signup() -> str:
        db.session.add(Order(item="first"))
        db.session.flush()  # takes SQLite's write lock for this request
        handle = ratchet.enqueue_now(add, 1, 2)
        db.session.commit()
        return str(handle.id)

    response = app.test_client().post("/signup")
    assert response.status_code == 200, response.text
    with app.app_context():
        assert ratchet.get_job(response.text) is not None
        db.engine.dispose()


def test_a_script_holding_the_write_lock_gets_a_clear_error(tmp_path: Path) -> None:
    app = create_app(
        f"sqlite:///{tmp_path / 'fresh.db'}",
        SQLALCHEMY_ENGINE_OPTIONS={"connect_args": {"timeout": 0.2}},
    )
    with app.app_context():
        db.session.add(Order(item="first"))
        db.session.flush()
        with pytest.raises(RuntimeError, match="flask ratchet db upgrade"):
            ratchet.enqueue_now(add, 1, 2)
        db.session.rollback()
        db.engine.dispose()
