"""Fixtures: every integration test runs on a fresh SQLite file, on real PostgreSQL and on real
MariaDB.

PostgreSQL comes from ``RATCHET_TEST_DATABASE_URL`` and MariaDB from
``RATCHET_TEST_MARIADB_URL`` (default: the local servers). Each run creates its own database on
each server (``ratchet_test_<pid>``), migrates it once, empties it before each test and drops it
at the end. If a server cannot be reached the tests fail: they never skip.
"""

from __future__ import annotations

import gc
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa
from flask import Flask

from flask_ratchet import migrate, schema
from tests.apps import create_app, db, dispose_made
from tests.replica import DATABASE, ReplicaError, ReplicaPair, running_replica

PG_SERVER = os.environ.get(
    "RATCHET_TEST_DATABASE_URL", "postgresql+psycopg://root@127.0.0.1:5432/test"
)
#: ``ssl_disabled``: PyMySQL otherwise builds a TLS context for every connection it opens (about
#: 20 ms of CPU each, for thousands of connections a run: the tests', their workers' and every
#: subprocess's), to offer TLS the local test server does not need.
MARIADB_SERVER = os.environ.get(
    "RATCHET_TEST_MARIADB_URL",
    "mariadb+pymysql://root@127.0.0.1:3306/test?charset=utf8mb4&ssl_disabled=true",
)
#: One database per test process on each server, so that runs sharing a server (CI and a
#: developer, the processes of a parallel run) never collide.
RUN_DATABASE = f"ratchet_test_{os.getpid()}"
#: The databases every integration test runs on.
DATABASES = ["sqlite", "postgresql", "mariadb"]


def pytest_collection_finish(session: pytest.Session) -> None:
    """Move what the test process holds once its tests are collected (modules, test items)
    out of the garbage collector's sight, as a worker does (``gc.freeze``): the collections that
    thousands of apps and engines set off no longer walk it. A tenth of a console test's CPU."""
    gc.freeze()


@contextmanager
def database_of_this_run(server_url: str, what: str, variable: str) -> Iterator[str]:
    """A migrated database of the test run's own on ``server_url`` (PostgreSQL or MariaDB,
    ``what``), made with the server's defaults (ratchet's tables name their own options),
    dropped at the end. A server that cannot be reached fails the run, naming ``variable``."""
    server = sa.make_url(server_url)
    pg = server.get_backend_name() == "postgresql"
    admin = (
        sa.create_engine(server, isolation_level="AUTOCOMMIT") if pg else sa.create_engine(server)
    )
    drop = f"DROP DATABASE IF EXISTS {RUN_DATABASE}" + (" WITH (FORCE)" if pg else "")
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(drop)
            conn.exec_driver_sql(f"CREATE DATABASE {RUN_DATABASE}")
    except sa.exc.OperationalError as exc:
        pytest.fail(
            f"{what} is unreachable at {server.render_as_string(hide_password=True)}: {exc}\n"
            f"The suite needs a real {what}; set {variable} to one.",
            pytrace=False,
        )
    url = server.set(database=RUN_DATABASE).render_as_string(hide_password=False)
    engine = sa.create_engine(url)
    migrate.upgrade(engine)
    db.metadata.create_all(engine)  # the test app's own tables
    engine.dispose()
    yield url
    cleaner = _CLEANERS.pop(url, None)
    if cleaner is not None:
        cleaner.dispose()
    with admin.connect() as conn:
        conn.exec_driver_sql(drop)
    admin.dispose()


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A migrated PostgreSQL database of the test run's own."""
    with database_of_this_run(PG_SERVER, "PostgreSQL", "RATCHET_TEST_DATABASE_URL") as url:
        yield url


@pytest.fixture(scope="session")
def mariadb_url() -> Iterator[str]:
    """A migrated MariaDB database of the test run's own."""
    with database_of_this_run(MARIADB_SERVER, "MariaDB", "RATCHET_TEST_MARIADB_URL") as url:
        yield url


@pytest.fixture(scope="session")
def replica_pair() -> Iterator[ReplicaPair]:
    """A PostgreSQL primary of the run's own with ratchet's tables in its database
    :data:`~tests.replica.DATABASE`, and its streaming replica (:mod:`tests.replica`: 2.5 to
    4.5 s to start, once per run, for the tests that ask for it)."""
    try:
        with running_replica() as pair:
            engine = sa.create_engine(pair.primary_url(DATABASE))
            migrate.upgrade(engine)
            db.metadata.create_all(engine)  # the test app's own tables
            engine.dispose()
            yield pair
    except ReplicaError as exc:
        pytest.fail(str(exc), pytrace=False)


#: Rows past which a table is truncated rather than deleted from.
_MANY_ROWS = 1000
_CLEANERS: dict[str, sa.Engine] = {}


def truncate_all(url: str) -> None:
    """Empty every ratchet table and the test app's own tables.

    Most tests leave a few rows in a few tables: those rows are deleted, children first (a
    ``TRUNCATE`` makes new files for each table and its indexes, and costs half a second a test
    on PostgreSQL); a table holding many rows is truncated.
    """
    engine = _CLEANERS.get(url)
    if engine is None:
        # One connection kept for the run, checked before each use (a test may restart or
        # cut off the server).
        engine = _CLEANERS[url] = sa.create_engine(url, pool_size=1, pool_pre_ping=True)
    tables = [*reversed(db.metadata.sorted_tables), *reversed(schema.metadata.sorted_tables)]
    quote = engine.dialect.identifier_preparer.quote
    probe = " UNION ALL ".join(
        f"SELECT {i}, (SELECT count(*) FROM (SELECT 1 FROM {quote(t.name)} LIMIT {_MANY_ROWS}) x)"
        for i, t in enumerate(tables)
    )
    with engine.begin() as conn:
        counts = dict(conn.exec_driver_sql(probe).all())
        if not any(counts.values()):
            return
        many = [quote(t.name) for i, t in enumerate(tables) if counts[i] >= _MANY_ROWS]
        few = [quote(t.name) for i, t in enumerate(tables) if 0 < counts[i] < _MANY_ROWS]
        if engine.dialect.name == "postgresql":
            conn.exec_driver_sql("SET LOCAL synchronous_commit = off")  # a test's own rows
            if many:
                conn.exec_driver_sql(f"TRUNCATE {', '.join(many)} CASCADE")
        else:
            conn.exec_driver_sql("SET FOREIGN_KEY_CHECKS = 0")
            for name in many:
                conn.exec_driver_sql(f"TRUNCATE {name}")
        for name in few:
            conn.exec_driver_sql(f"DELETE FROM {name}")
        if engine.dialect.name != "postgresql":
            conn.exec_driver_sql("SET FOREIGN_KEY_CHECKS = 1")


@pytest.fixture(autouse=True)
def _close_apps_connections() -> Iterator[None]:
    """After each test, the connections of the apps it made (see ``tests.apps.made``)."""
    yield
    dispose_made()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated once per test process, which each test copies: a copy costs a
    millisecond, an upgrade through every revision about half a second."""
    path = tmp_path_factory.mktemp("template") / "ratchet.db"
    engine = sa.create_engine(f"sqlite:///{path}")
    migrate.upgrade(engine)
    db.metadata.create_all(engine)  # the test app's own tables
    engine.dispose()
    return path


@pytest.fixture(params=DATABASES)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A clean database: a new SQLite file (a copy of the migrated template), or the emptied
    PostgreSQL or MariaDB test database."""
    if request.param == "sqlite":
        path = tmp_path / "ratchet.db"
        shutil.copyfile(request.getfixturevalue("sqlite_template"), path)
        return f"sqlite:///{path}"
    url: str = request.getfixturevalue("pg_url" if request.param == "postgresql" else "mariadb_url")
    truncate_all(url)
    return url


@pytest.fixture
def app(database_url: str) -> Iterator[Flask]:
    """The test app on a clean database, inside an app context."""
    app = create_app(database_url)
    with app.app_context():
        app.extensions["ratchet"].ensure_schema()  # SQLite: create the tables a test may count
        yield app
        db.session.remove()
        db.engine.dispose()


@pytest.fixture
def dialect(database_url: str) -> str:
    """``sqlite``, ``postgresql`` or ``mariadb``."""
    return sa.make_url(database_url).get_backend_name()


@pytest.fixture(params=DATABASES)
def empty_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[sa.Engine]:
    """An engine on a database with no tables at all."""
    if request.param == "sqlite":
        engine = sa.create_engine(f"sqlite:///{tmp_path / 'empty.db'}")
        yield engine
        engine.dispose()
        return
    name = f"ratchet_migration_test_{os.getpid()}"
    if request.param == "mariadb":
        admin = sa.create_engine(MARIADB_SERVER)
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}")
            conn.exec_driver_sql(f"CREATE DATABASE {name}")
        engine = sa.create_engine(sa.make_url(MARIADB_SERVER).set(database=name))
        yield engine
        engine.dispose()
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}")
        admin.dispose()
        return
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
