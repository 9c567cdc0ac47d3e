"""Statements run on the driver's cursor behave as ``conn.execute`` would (store/driver.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from flask import Flask

from flask_ratchet import schema
from flask_ratchet.errors import DuplicateBusinessKey
from flask_ratchet.schema import lock
from flask_ratchet.store.driver import DriverStatement
from tests.apps import add, create_app, db, ratchet
from tests.conftest import truncate_all

AT = datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)


#: A whole ``ratchet_lock`` row.
ROW = {"lock_name": "a", "locked_by": "n", "locked_at": AT, "expires_at": AT}


def _insert(engine: sa.Engine) -> DriverStatement:
    return DriverStatement(sa.insert(lock), engine.dialect, lock.c.keys())


def test_values_are_stored_exactly_as_sqlalchemy_stores_them(app: Flask) -> None:
    """Byte for byte: SQLite compares timestamps as text, so a different format would break
    every comparison (the zero microseconds below are where Python's own adapter differs)."""
    engine = app.extensions["ratchet"].engine
    whole = AT.replace(microsecond=0)
    values = {"locked_by": "n", "locked_at": AT, "expires_at": whole + timedelta(days=1)}
    with engine.begin() as conn:
        conn.execute(sa.insert(lock), values | {"lock_name": "by-sqlalchemy"})
        returned = _insert(engine).execute(conn, values | {"lock_name": "by-driver"})
        assert returned == []  # no RETURNING, no rows
    with engine.connect() as conn:
        raw = conn.exec_driver_sql(
            "SELECT locked_by, locked_at, expires_at FROM ratchet_lock ORDER BY lock_name"
        ).all()
        typed = conn.execute(sa.select(lock.c.locked_at, lock.c.expires_at)).all()
    assert raw[0] == raw[1]
    assert [tuple(r) for r in typed] == [(AT, whole + timedelta(days=1))] * 2


def test_a_driver_error_comes_back_as_sqlalchemys_and_nothing_is_written(app: Flask) -> None:
    engine = app.extensions["ratchet"].engine
    values = dict(ROW)
    with engine.begin() as conn:
        _insert(engine).execute(conn, values)
    with pytest.raises(sa.exc.IntegrityError) as caught, engine.begin() as conn:
        _insert(engine).execute(conn, values | {"locked_by": "other"})
    assert isinstance(caught.value.orig, engine.dialect.loaded_dbapi.IntegrityError)


def test_a_missing_parameter_is_refused(app: Flask) -> None:
    engine = app.extensions["ratchet"].engine
    with pytest.raises(sa.exc.ArgumentError, match="expires_at"), engine.begin() as conn:
        _insert(engine).execute(conn, {"lock_name": "a", "locked_by": "n", "locked_at": AT})


def test_a_statement_outside_a_transaction_begins_one_the_caller_commits(app: Flask) -> None:
    engine = app.extensions["ratchet"].engine
    values = dict(ROW)
    with engine.connect() as conn:
        _insert(engine).execute(conn, values)
        assert conn.in_transaction()
        conn.commit()
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(lock)).scalar_one() == 1


def test_claimed_times_are_utc_whatever_the_session_zone(pg_url: str) -> None:
    """psycopg gives times in the session's zone; a claim hands them on in UTC, as
    UtcDateTime does everywhere else (arithmetic across a DST change counts real time)."""
    truncate_all(pg_url)
    zoned = {"connect_args": {"options": "-c timezone=America/New_York"}}
    app = create_app(pg_url, SQLALCHEMY_ENGINE_OPTIONS=zoned)
    with app.app_context():
        ratchet.enqueue_many(ratchet.enqueue(add, i, i) for i in range(3))
        claimed = ratchet.claim_due(5, "zoned-node")
        db.engine.dispose()
    assert len(claimed) == 3
    for job in claimed:
        assert job.scheduled_time.tzinfo is UTC and job.picked_at.tzinfo is UTC
        assert abs(datetime.now(UTC) - job.picked_at) < timedelta(minutes=1)


def test_a_lost_connection_is_invalidated(pg_url: str) -> None:
    truncate_all(pg_url)
    engine = sa.create_engine(pg_url)
    admin = sa.create_engine(pg_url, isolation_level="AUTOCOMMIT")
    values = dict(ROW)
    try:
        with engine.connect() as conn:
            pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
            conn.commit()
            with admin.connect() as other:
                other.exec_driver_sql(f"SELECT pg_terminate_backend({int(pid)})")
            with pytest.raises(sa.exc.OperationalError) as caught:
                _insert(engine).execute(conn, values)
            assert caught.value.connection_invalidated and conn.invalidated
        with engine.begin() as conn:  # the pool hands out a working connection again
            _insert(engine).execute(conn, values)
    finally:
        engine.dispose()
        admin.dispose()


def test_a_submission_of_its_own_gives_its_connection_back_out_of_autocommit(pg_url: str) -> None:
    """PostgreSQL's single statement switches the pooled connection to autocommit for itself
    (store/postgres.py): the app's next transaction on that connection must be one again, after
    a submission that was written and after one that was refused."""
    truncate_all(pg_url)
    app = create_app(pg_url, SQLALCHEMY_ENGINE_OPTIONS={"pool_size": 1, "max_overflow": 0})
    with app.app_context():
        ratchet.enqueue(add, 1, 2).with_business_key("held").submit()
        with pytest.raises(DuplicateBusinessKey):
            ratchet.enqueue(add, 3, 4).with_business_key("held").submit()
        with db.engine.connect() as conn:  # the pool's one connection
            assert conn.connection.driver_connection.autocommit is False  # type: ignore[union-attr]
        with app.test_request_context():  # a request's enqueue is rolled back with it
            ratchet.enqueue_now(add, 5, 6)
            db.session.rollback()
        with db.engine.connect() as conn:
            count = conn.execute(sa.select(sa.func.count()).select_from(schema.job)).scalar_one()
        db.engine.dispose()
    assert count == 1
