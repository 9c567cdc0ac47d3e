"""Alembic migrations build exactly schema.py and never touch the host's migration history."""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from flask_ratchet import migrate, schema, schema_ddl
from tests import preloaded


def diff(engine: sa.Engine) -> list[object]:
    with engine.connect() as conn:
        ctx = MigrationContext.configure(
            conn, opts={"compare_type": True, "include_object": migrate.include_object}
        )
        return list(compare_metadata(ctx, schema_ddl.metadata_for(conn.dialect)))


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


# -- the host app's own migrations -----------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("migrate_first", [True, False], ids=["migrate-first", "ratchet-first"])
def test_flask_migrate_never_writes_a_migration_touching_ratchet_tables(
    empty_engine: sa.Engine, tmp_path: Path, migrate_first: bool
) -> None:
    """The real ``flask db init`` and ``flask db migrate`` of an app holding ratchet's tables:
    the migration creates the app's own table and names none of ratchet's."""
    migrate.upgrade(empty_engine)  # as `flask ratchet db upgrade` leaves the database
    env = os.environ | {
        "HOST_DATABASE_URL": empty_engine.url.render_as_string(hide_password=False),
        "HOST_MIGRATE_FIRST": "1" if migrate_first else "0",
    }
    folder = tmp_path / "migrations"

    def flask_db(*args: str) -> None:
        done = preloaded.run(
            ["-m", "flask", "--app", "tests.host_app:create_app()", "db", *args],
            cwd=ROOT,
            env=env,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr

    flask_db("init", "-d", str(folder))
    flask_db("migrate", "-d", str(folder), "-m", "invoices")
    (script,) = (folder / "versions").glob("*.py")
    text = script.read_text()
    assert "op.create_table('invoice'" in text, text
    assert "ratchet" not in text, text
    assert ratchet_tables(empty_engine) == set(schema.metadata.tables) | {schema.VERSION_TABLE}


def host_diff(engine: sa.Engine, **hooks: object) -> list[str]:
    """What the host's autogenerate sees, against tests.host_app's models, as readable lines."""
    from tests.host_app import db as host_db

    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts=dict(hooks))
        return [str(change) for change in compare_metadata(ctx, host_db.metadata)]


@pytest.mark.parametrize(
    "hooks",
    [{"include_name": migrate.host_include_name}, {"include_object": migrate.host_include_object}],
    ids=["include_name", "include_object"],
)
def test_the_hooks_for_a_hand_written_env_hide_ratchet_tables(
    empty_engine: sa.Engine, hooks: dict[str, object]
) -> None:
    migrate.upgrade(empty_engine)
    assert any("ratchet_job" in line for line in host_diff(empty_engine))  # what they prevent
    seen = host_diff(empty_engine, **hooks)
    assert any("invoice" in line for line in seen), seen
    assert not any("ratchet" in line for line in seen), seen


def test_the_apps_own_include_name_still_applies(tmp_path: Path) -> None:
    from flask import Flask
    from flask_migrate import Migrate
    from flask_sqlalchemy import SQLAlchemy

    from flask_ratchet import Ratchet

    def own(name: str | None, type_: str, parent_names: object) -> bool:
        return name != "legacy"

    app = Flask(__name__)
    app.config["SQLALCHEMY_DATABASE_URI"] = f"sqlite:///{tmp_path / 'app.db'}"
    host_db = SQLAlchemy(app)
    Ratchet(app)
    Migrate(app, host_db, include_name=own)
    with app.app_context(), app.app_context():  # installed once, however many contexts
        include = app.extensions["migrate"].configure_args["include_name"]
    assert include("invoice", "table", {}) and not include("legacy", "table", {})
    assert not include("ratchet_job", "table", {})
    assert not include(schema.VERSION_TABLE, "table", {})
    assert not include("ix_ratchet_job_queue_claim", "index", {"table_name": "ratchet_job_queue"})
    assert include("ix_invoice_number", "index", {"table_name": "invoice"})
    with app.app_context():
        assert app.extensions["migrate"].configure_args["include_name"] is include


def test_0007_gives_existing_jobs_the_default_queue(empty_engine: sa.Engine) -> None:
    """Jobs written before queues existed (here: downgraded to 0006 and upgraded again) are in
    the default queue, and the schema is exactly schema.py's once more."""
    migrate.upgrade(empty_engine, "0006")
    job_id = uuid.UUID("0190f0a0-0000-7000-8000-000000000001")
    at = datetime(2026, 1, 1, tzinfo=UTC)
    with empty_engine.begin() as conn:
        # Only the columns 0006 has: the statement names nothing else.
        conn.execute(
            sa.insert(schema.job).values(
                job_id=job_id, task="t", job_type="SINGLE", priority=2, payload="{}",
                max_retries=0, backoff="NONE", backoff_base=1, created_at=at, first_due_at=at,
                attempts=0,
            )
        )  # fmt: skip
        conn.execute(
            sa.insert(schema.job_queue).values(
                job_id=job_id, status="PENDING", scheduled_time=at, priority=2, attempts=0,
                max_retries=0, version=0, updated_at=at,
            )
        )  # fmt: skip
    migrate.upgrade(empty_engine)
    assert diff(empty_engine) == []
    with empty_engine.connect() as conn:
        cold = conn.execute(sa.select(schema.job.c.queue)).scalars().all()
        hot = conn.execute(sa.select(schema.job_queue.c.queue)).scalars().all()
    assert cold == hot == ["default"]
    indexes = {ix["name"] for ix in sa.inspect(empty_engine).get_indexes("ratchet_job_queue")}
    assert "ix_ratchet_job_queue_queue_claim" in indexes
    migrate.downgrade(empty_engine, "0006")
    columns = {c["name"] for c in sa.inspect(empty_engine).get_columns("ratchet_job")}
    assert "queue" not in columns and "ratchet_queue" not in ratchet_tables(empty_engine)


@pytest.mark.parametrize("empty_engine", ["mariadb"], indirect=True)
def test_a_revision_interrupted_halfway_on_mariadb_runs_again(empty_engine: sa.Engine) -> None:
    """MariaDB commits each DDL statement: a revision stopped after some of its steps (here
    0007, after its first column) left them in place, and the next upgrade finishes it."""
    migrate.upgrade(empty_engine, "0006")
    with empty_engine.begin() as conn:
        conn.exec_driver_sql(
            "ALTER TABLE ratchet_job ADD COLUMN queue VARCHAR(64) NOT NULL DEFAULT 'default'"
        )
        conn.exec_driver_sql(
            "CREATE INDEX ix_ratchet_job_named_queue ON ratchet_job (queue, job_id)"
        )
    assert migrate.current(empty_engine) == "0006"
    migrate.upgrade(empty_engine)
    assert migrate.current(empty_engine) == migrate.HEAD
    assert diff(empty_engine) == []


def test_0015_gives_failed_jobs_their_fingerprints_a_chunk_at_a_time(
    empty_engine: sa.Engine,
) -> None:
    """Jobs that failed before fingerprints existed (more than one chunk of them) get the
    fingerprint a worker would have written; other jobs get none; the schema is schema.py's."""
    migrate.upgrade(empty_engine, "0014")
    at = datetime(2026, 1, 1, tzinfo=UTC)
    base = 0x0190F0A0_0000_7000_8000_000000000000

    def cold(n: int, status: str | None, error: str | None) -> dict[str, object]:
        return dict(
            job_id=uuid.UUID(int=base + n), task="t", job_type="SINGLE", priority=2,
            payload="{}", max_retries=0, backoff="NONE", backoff_base=1, created_at=at,
            first_due_at=at, attempts=1, queue="default", follow_up=False,
            terminal_status=status, terminal_error=error,
        )  # fmt: skip

    failed = [cold(n, "FAILED", f"ValueError: order {n} not found") for n in range(2100)]
    failed.append(cold(2100, "FAILED", None))  # raised without a message
    others = [
        cold(3000, "CANCELED", "ValueError: order 7 not found"),
        cold(3001, "SUCCEEDED", None),
        cold(3002, None, None),
    ]
    columns = [c for c in schema.job.columns if c.name != "fingerprint"]  # 0014 has none
    old_job = sa.table("ratchet_job", *(sa.column(c.name, c.type) for c in columns))
    with empty_engine.begin() as conn:
        conn.execute(
            sa.insert(old_job),
            [{c.name: row.get(c.name) for c in columns} for row in failed + others],
        )
    migrate.upgrade(empty_engine)
    assert diff(empty_engine) == []
    with empty_engine.connect() as conn:
        rows = conn.execute(sa.select(schema.job.c.job_id, schema.job.c.fingerprint))
        found = {job_id: value for job_id, value in rows}
    assert len(found) == 2104
    assert {found[uuid.UUID(int=base + n)] for n in range(2100)} == {
        "ValueError: order {n} not found"
    }
    assert found[uuid.UUID(int=base + 2100)] == "(no message)"
    assert [found[uuid.UUID(int=base + n)] for n in (3000, 3001, 3002)] == [None, None, None]
    migrate.downgrade(empty_engine, "0014")
    columns_left = {c["name"] for c in sa.inspect(empty_engine).get_columns("ratchet_job")}
    assert "fingerprint" not in columns_left


def test_0017_keeps_every_job_and_still_refuses_a_key_or_a_fire_time_twice(
    empty_engine: sa.Engine,
) -> None:
    """Jobs written at 0016 (on SQLite the table is copied into a new one) are all there with
    their hot rows, and the unique indexes, now of the rows where they are set, still refuse
    a second job with a held key or a second child for one fire time; down again, too."""
    migrate.upgrade(empty_engine, "0016")
    at = datetime(2026, 1, 1, tzinfo=UTC)
    base = 0x0190F0A0_0000_7000_8000_000000000000

    def cold(n: int, **extra: object) -> dict[str, object]:
        return dict(
            job_id=uuid.UUID(int=base + n), task="t", job_type="SINGLE", priority=2,
            payload="{}", max_retries=0, backoff="NONE", backoff_base=1, created_at=at,
            first_due_at=at, attempts=0, queue="default", follow_up=False,
            idempotency_key=None, recurring_id=None, fire_time=None,
        ) | extra  # fmt: skip

    def hot(n: int) -> dict[str, object]:
        return dict(
            job_id=uuid.UUID(int=base + n), status="PENDING", queue="default",
            scheduled_time=at, priority=2, attempts=0, max_retries=0, version=0, updated_at=at,
        )  # fmt: skip

    rows = [cold(0, idempotency_key="k"), cold(1, recurring_id="r", fire_time=at)]
    rows += [cold(n) for n in range(2, 50)]
    with empty_engine.begin() as conn:
        conn.execute(sa.insert(schema.job), rows)
        conn.execute(sa.insert(schema.job_queue), [hot(n) for n in range(50)])
    migrate.upgrade(empty_engine)
    assert diff(empty_engine) == []
    with empty_engine.connect() as conn:
        kept = conn.execute(sa.select(schema.job.c.job_id)).scalars().all()
        queued = conn.execute(sa.select(schema.job_queue.c.job_id)).scalars().all()
    assert sorted(kept) == sorted(queued) == [uuid.UUID(int=base + n) for n in range(50)]

    for again in (cold(50, idempotency_key="k"), cold(51, recurring_id="r", fire_time=at)):
        with pytest.raises(sa.exc.IntegrityError), empty_engine.begin() as conn:
            conn.execute(sa.insert(schema.job).values(again))
    with empty_engine.begin() as conn:  # neither set: as many as wanted
        conn.execute(sa.insert(schema.job), [cold(52), cold(53)])

    migrate.downgrade(empty_engine, "0016")
    with pytest.raises(sa.exc.IntegrityError), empty_engine.begin() as conn:
        conn.execute(sa.insert(schema.job).values(cold(54, idempotency_key="k")))
    migrate.upgrade(empty_engine)
    assert diff(empty_engine) == []
