"""Alembic migrations build exactly schema.py and never touch the host's migration history."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from flask_ratchet import migrate, schema
from tests.conftest import PG_SERVER


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[sa.Engine]:
    """An engine on a database with no tables at all."""
    if request.param == "sqlite":
        engine = sa.create_engine(f"sqlite:///{tmp_path / 'empty.db'}")
        yield engine
        engine.dispose()
        return
    name = f"ratchet_migration_test_{os.getpid()}"
    admin = sa.create_engine(PG_SERVER, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    engine = sa.create_engine(sa.make_url(PG_SERVER).set(database=name))
    yield engine
    engine.dispose()
    with admin.connect() as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    admin.dispose()


def diff(engine: sa.Engine) -> list[object]:
    with engine.connect() as conn:
        ctx = MigrationContext.configure(
            conn, opts={"compare_type": True, "include_object": migrate.include_object}
        )
        return list(compare_metadata(ctx, schema.metadata))


def ratchet_tables(engine: sa.Engine) -> set[str]:
    return {t for t in sa.inspect(engine).get_table_names() if t.startswith("ratchet_")}


def test_upgrade_head_builds_exactly_schema_py(empty_engine: sa.Engine) -> None:
    assert migrate.current(empty_engine) is None
    migrate.upgrade(empty_engine)
    assert migrate.current(empty_engine) == migrate.head() == migrate.HEAD
    assert diff(empty_engine) == []
    assert ratchet_tables(empty_engine) == set(schema.metadata.tables) | {schema.VERSION_TABLE}
    indexes = {ix["name"] for ix in sa.inspect(empty_engine).get_indexes("ratchet_job_queue")}
    assert "ix_ratchet_job_queue_claim" in indexes


def test_the_hosts_alembic_history_is_untouched(empty_engine: sa.Engine) -> None:
    with empty_engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
        conn.exec_driver_sql("INSERT INTO alembic_version VALUES ('host_rev_1')")
        conn.exec_driver_sql("CREATE TABLE host_things (id INTEGER PRIMARY KEY)")
    migrate.upgrade(empty_engine)
    migrate.downgrade(empty_engine, "base")
    migrate.upgrade(empty_engine)
    with empty_engine.connect() as conn:
        rows = conn.exec_driver_sql("SELECT version_num FROM alembic_version").all()
    assert [r[0] for r in rows] == ["host_rev_1"]
    assert "host_things" in sa.inspect(empty_engine).get_table_names()
    assert diff(empty_engine) == []  # the host's tables are not ratchet's business


def test_downgrade_base_removes_only_ratchet_tables(empty_engine: sa.Engine) -> None:
    with empty_engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE host_things (id INTEGER PRIMARY KEY)")
    migrate.upgrade(empty_engine)
    migrate.downgrade(empty_engine, "base")
    assert ratchet_tables(empty_engine) == {schema.VERSION_TABLE}
    assert migrate.current(empty_engine) is None
    assert "host_things" in sa.inspect(empty_engine).get_table_names()
