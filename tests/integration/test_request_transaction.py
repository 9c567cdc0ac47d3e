"""Enqueue inside a Flask request joins the request's db.session transaction."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import sqlalchemy as sa
from flask import Flask

from flask_ratchet import DuplicateBusinessKey, JobStatus, PayloadError, Priority, events, schema
from tests.apps import Order, add, create_app, db, ratchet
from tests.flow_tasks import batch_item
from tests.integration.helpers import count, job_in, refusing, rows_written

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

    @app.post("/orders/refused/<case>")
    def refused(case: str) -> str:
        db.session.add(Order(item="book"))
        try:
            REFUSALS[case].attempt()
        except (sa.exc.IntegrityError, DuplicateBusinessKey) as exc:
            outcome = type(exc).__name__
        else:
            outcome = "accepted"
        db.session.commit()  # the app's own row, whatever ratchet refused
        return outcome

    @app.post("/orders/replace/<job_id>")
    def replace(job_id: str) -> str:
        db.session.add(Order(item="book"))
        try:
            ratchet.replace(job_id, 0, add, 5, 6)
        except DuplicateBusinessKey as exc:
            outcome = type(exc).__name__
        else:
            outcome = "accepted"
        ratchet.enqueue_now(add, 7, 8)  # a later submission announces itself, and only itself
        db.session.commit()
        return outcome

    yield app
    with app.app_context():
        db.engine.dispose()


def in_app(app: Flask, fn: Callable[[], T]) -> T:
    with app.app_context():
        return fn()


@dataclass(frozen=True)
class Refusal:
    """A submission whose later statement the database refuses: ``condition`` on ``table``."""

    table: str
    condition: str
    attempt: Callable[[], Any]
    on: str = "INSERT"


REFUSALS = {
    # The job and its hot row are written, then its second tag is refused.
    "a tag": Refusal(
        "ratchet_job_tag",
        "NEW.tag = 'refused'",
        lambda: ratchet.enqueue(add, 1, 2).with_tags("order", "refused").submit(),
    ),
    # PostgreSQL writes these with COPY; the first job's rows are in when the second's hot row
    # is refused.
    "the second job of a bulk submission": Refusal(
        "ratchet_job_queue",
        "NEW.priority = 0",
        lambda: ratchet.enqueue_many(
            [
                ratchet.enqueue(add, 1, 1).with_tags("bulk"),
                ratchet.enqueue(add, 2, 2).with_priority(Priority.LOWEST),
            ]
        ),
    ),
    # With idempotency keys: the statement path.
    "the second keyed job of a bulk submission": Refusal(
        "ratchet_job_queue",
        "NEW.priority = 0",
        lambda: ratchet.enqueue_many(
            [
                ratchet.enqueue(add, 1, 1).with_idempotency_key("k-1"),
                ratchet.enqueue(add, 2, 2).with_idempotency_key("k-2").with_priority(0),
            ]
        ),
    ),
    # The parent, its children and its follow-up are in when the batch row is refused.
    "a batch's row": Refusal(
        "ratchet_batch",
        "NEW.name = 'refused'",
        lambda: (
            ratchet.enqueue_batch("refused")
            .add(add, 1, 2)
            .add(add, 3, 4)
            .on_success(add, 5, 6)
            .submit()
        ),
    ),
    # Every step is in when the later step's link is refused.
    "a chain's later step": Refusal(
        "ratchet_workflow_condition",
        "NEW.kind = 'THEN'",
        lambda: ratchet.enqueue(add, 1, 2).then(add, 3, 4).submit(),
    ),
    # The parent, its batch row and two chunks of children are in when the third is refused.
    "a streamed chunk": Refusal(
        "ratchet_job",
        """NEW.payload = '{"args":[1200],"kwargs":{}}'""",
        lambda: (
            ratchet.streaming_batch("streamed")
            .from_iterable(range(1500))
            .process(batch_item)
            .with_chunk_size(500)
            .start()
        ),
    ),
    "a recurring master": Refusal(
        "ratchet_recurring",
        "NEW.name = 'refused'",
        lambda: (
            ratchet.schedule_recurring("0 0 * * * ?", "UTC", add, 1, 2)
            .with_name("refused")
            .submit()
        ),
    ),
}


def every_table() -> dict[str, int]:
    """Committed rows in every ratchet table."""
    return {table: count(table) for table in schema.metadata.tables}


@contextmanager
def announced(app: Flask) -> Iterator[list[str]]:
    """The names of the signals sent, and ``wake`` for each wake-up, while inside."""
    heard: list[str] = []

    def receiver(name: str) -> Callable[..., None]:
        return lambda sender, **data: heard.append(name)

    receivers = {signal: receiver(name) for name, signal in events.SIGNALS.items()}
    wake_listeners = app.extensions["ratchet"].wake_listeners
    wake = lambda: heard.append("wake")  # noqa: E731
    for signal, fn in receivers.items():
        signal.connect(fn)
    wake_listeners.append(wake)
    try:
        yield heard
    finally:
        wake_listeners.remove(wake)
        for signal, fn in receivers.items():
            signal.disconnect(fn)


def test_commit_in_the_handler_makes_the_job_visible(routes: Flask) -> None:
    response = routes.test_client().post("/orders/commit")
    assert response.status_code == 200
    assert in_app(routes, lambda: count("order")) == 1
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
    assert in_app(routes, lambda: count("order")) == 0
    assert in_app(routes, rows_written) == dict.fromkeys(in_app(routes, rows_written), 0)
    # the key was never reserved, so it is free
    fresh = in_app(routes, lambda: ratchet.enqueue(add, 1, 1).with_business_key("o-1").submit())
    assert fresh.created


def test_a_refused_duplicate_leaves_the_request_transaction_usable(routes: Flask) -> None:
    assert routes.test_client().post("/orders/duplicate").status_code == 200
    assert in_app(routes, lambda: count("order")) == 1
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
    assert count("order") == 1
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


@pytest.mark.parametrize("case", list(REFUSALS))
def test_a_refused_later_statement_takes_back_only_what_ratchet_wrote(
    routes: Flask, database_url: str, case: str
) -> None:
    """The view catches the refusal and commits: its own row is there, no row of the refused
    submission is, and nothing was announced for it."""
    refusal = REFUSALS[case]
    before = in_app(routes, every_table)
    with (
        refusing(database_url, refusal.table, refusal.condition, refusal.on),
        announced(routes) as heard,
    ):
        response = routes.test_client().post(f"/orders/refused/{case}")
    assert response.text == "IntegrityError"
    assert in_app(routes, lambda: count("order")) == 1
    assert in_app(routes, every_table) == before
    assert heard == []


def test_a_refused_replacement_leaves_the_old_job_as_it_was(routes: Flask) -> None:
    """A business key taken since the old job failed refuses its replacement after the old
    job's cancel was written: the cancel is taken back, and never announced."""
    with routes.app_context():
        old = job_in(JobStatus.FAILED, business_key="k")
        ratchet.enqueue(add, 3, 4).with_business_key("k").submit()  # holds the key now
        assert ratchet.pause_job(old)
        before = every_table()
    with announced(routes) as heard:
        response = routes.test_client().post(f"/orders/replace/{old}")
    assert response.text == "DuplicateBusinessKey"
    with routes.app_context():
        job = ratchet.get_job(old)
        assert job is not None and job.status == JobStatus.PAUSED
        assert job.superseded_by is None
        assert count("order") == 1
        added = {"ratchet_job": 1, "ratchet_job_queue": 1}  # the later submission's
        assert every_table() == {t: n + added.get(t, 0) for t, n in before.items()}
    assert heard == ["wake"]


def test_a_streamed_batch_refuses_bad_params_before_its_first_write(
    app: Flask, database_url: str
) -> None:
    """Every insert is refused here: a refusal that comes before the first statement is the
    PayloadError, one after it would be the database's."""
    with (
        refusing(database_url, "ratchet_job", "1 = 1"),
        pytest.raises(PayloadError, match="params"),
    ):
        (
            ratchet.streaming_batch("bad-params")
            .from_iterable(range(3))
            .process(batch_item)
            .with_options(params={"ids": {1, 2}})  # a set: not JSON
            .start()
        )
    assert rows_written() == dict.fromkeys(rows_written(), 0)


def test_a_business_key_given_twice_is_refused_before_the_first_write(
    app: Flask, database_url: str
) -> None:
    twice = [ratchet.enqueue(add, i, i).with_business_key("twice") for i in range(2)]
    with refusing(database_url, "ratchet_job", "1 = 1"), pytest.raises(DuplicateBusinessKey):
        ratchet.enqueue_many(twice)
    assert rows_written() == dict.fromkeys(rows_written(), 0)
