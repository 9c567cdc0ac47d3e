"""Text and time are stored exactly on every database: keys that differ only in case, accents or
trailing spaces are different keys (MariaDB's default collations would make them equal), every
character round-trips, a payload as large as the configured maximum fits, and times are UTC
whatever zone a session runs in."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from flask import Flask

from flask_ratchet import InvalidOption, JobStatus, PayloadTooLarge
from tests.apps import add, create_app, db, ratchet
from tests.integration.helpers import count

#: Keys MariaDB's default collations (``utf8mb4_general_ci``, and ``utf8mb4_bin``, which pads)
#: hold equal, each pair.
LOOKALIKES = [("Order-1", "order-1"), ("café", "cafe"), ("k", "k ")]


@pytest.mark.parametrize(("one", "other"), LOOKALIKES)
def test_keys_that_differ_in_case_accents_or_trailing_spaces_are_distinct(
    app: Flask, one: str, other: str
) -> None:
    first = ratchet.enqueue(add, 1, 2).with_idempotency_key(one).submit()
    second = ratchet.enqueue(add, 3, 4).with_idempotency_key(other).submit()
    assert first.created and second.created and first.id != second.id
    held = ratchet.enqueue(add, 1, 2).with_business_key(one).submit()
    beside = ratchet.enqueue(add, 3, 4).with_business_key(other).submit()  # not a duplicate
    assert held.id != beside.id
    ratchet.enqueue(add, 5, 6).with_tags(one).submit()
    assert {j.id for j in ratchet.find_jobs(tag=other).items} == set()
    assert ratchet.enqueue(add, 1, 2).with_idempotency_key(one).submit().id == first.id


@pytest.mark.parametrize("database_url", ["mariadb"], indirect=True)
def test_the_mariadb_database_of_this_run_compares_lookalikes_equal(database_url: str) -> None:
    """The MariaDB test database has the server's default collation, as an app's would: the
    test above shows ratchet's tables do not take it."""
    engine = sa.create_engine(database_url)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT 'Order-1' = 'order-1'").scalar() == 1
        table = conn.exec_driver_sql(
            "SELECT table_collation FROM information_schema.tables "
            "WHERE table_schema = DATABASE() AND table_name = 'ratchet_job'"
        ).scalar()
    engine.dispose()
    assert table == "utf8mb4_nopad_bin"


def test_every_character_round_trips(app: Flask) -> None:
    text = "🎉 ünïcødé 中文 𝄞 \u202e"
    handle = ratchet.enqueue(add, text, 1).with_idempotency_key(f"order-{text}").with_tags(text)
    job_id = handle.with_business_key(text).submit().id
    found = ratchet.get_job(job_id)
    assert found is not None and found.args == [text, 1] and text in found.tags
    assert [j.id for j in ratchet.find_jobs(tag=text).items] == [job_id]


@pytest.fixture
def roomy_app(database_url: str) -> Iterator[Flask]:
    app = create_app(database_url, RATCHET_MAX_PAYLOAD_BYTES=4_000_000)
    with app.app_context():
        app.extensions["ratchet"].ensure_schema()
        yield app


def test_a_payload_as_large_as_the_maximum_fits(roomy_app: Flask) -> None:
    big = "x" * 3_900_000  # far past MariaDB's TEXT (64 KB) and MEDIUMTEXT-sized rows
    job_id = ratchet.enqueue(add, big, 1).submit().id
    found = ratchet.get_job(job_id)
    assert found is not None and found.args == [big, 1]
    with pytest.raises(PayloadTooLarge):
        ratchet.enqueue(add, big + "x" * 200_000, 1).submit()


#: Each database's way to give a session a zone far from UTC.
ZONED = {
    "sqlite": {},
    "postgresql": {"connect_args": {"options": "-c timezone=Pacific/Kiritimati"}},
    "mariadb": {"connect_args": {"init_command": "SET time_zone = '+13:00'"}},
}


def test_times_are_utc_whatever_the_sessions_zone(dialect: str, database_url: str) -> None:
    app = create_app(database_url, SQLALCHEMY_ENGINE_OPTIONS=ZONED[dialect])
    with app.app_context():
        ratchet.runtime.ensure_schema()
        at = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)
        later = ratchet.schedule_at(at, add, 1, 2).submit().id
        now = ratchet.enqueue_now(add, 1, 2).id
        with db.engine.connect() as conn:
            server = ratchet.runtime.store.now(conn)
        found = ratchet.get_job(later)
        assert found is not None and found.scheduled_at == at
        created = ratchet.get_job(now)
        assert created is not None
        assert abs(created.created_at - server) < timedelta(seconds=30)
        assert abs(server - datetime.now(UTC)) < timedelta(seconds=30)
        assert [c.job_id for c in ratchet.claim_due(10, "n")] == [now]
        assert ratchet.get_job(later).status == JobStatus.PENDING  # type: ignore[union-attr]


def test_an_oversized_key_is_refused_before_anything_is_written_in_any_sql_mode(
    dialect: str, database_url: str
) -> None:
    """A lax MariaDB (no strict mode) would cut a long value to its column and carry on:
    ratchet refuses it itself, first."""
    options = (
        {"connect_args": {"init_command": "SET sql_mode = ''"}} if dialect == "mariadb" else {}
    )
    app = create_app(database_url, SQLALCHEMY_ENGINE_OPTIONS=options)
    with app.app_context():
        ratchet.runtime.ensure_schema()
        with pytest.raises(InvalidOption, match="at most 255"):
            ratchet.enqueue(add, 1, 2).with_idempotency_key("k" * 256).submit()
        with pytest.raises(InvalidOption, match="at most 255"):
            ratchet.enqueue(add, 1, 2).with_business_key("k" * 256).submit()
        assert count("ratchet_job") == 0
