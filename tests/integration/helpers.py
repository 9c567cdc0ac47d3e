"""Small helpers the integration tests share: raw counts and driving jobs to a status."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from flask import current_app

from flask_ratchet.ids import uuid7
from flask_ratchet.schema import execution, job, job_queue, node
from flask_ratchet.states import JobStatus
from flask_ratchet.store.types import Finished, Outcome
from tests.apps import add, ratchet


def stored_id(job_id: uuid.UUID, dialect: str | sa.Engine) -> Any:
    """``job_id`` as a raw statement binds it on ``dialect`` (a name, or an engine's)."""
    name = dialect if isinstance(dialect, str) else dialect.dialect.name
    if name == "postgresql":
        return job_id
    return job_id.bytes if name in ("mysql", "mariadb") else job_id.hex


def count(table: str, url: str | None = None) -> int:
    """Rows in ``table``, read on a fresh connection (so only committed rows count)."""
    engine = sa.create_engine(url or current_app.config["SQLALCHEMY_DATABASE_URI"])
    try:
        with engine.connect() as conn:
            quoted = engine.dialect.identifier_preparer.quote(table)
            return int(conn.exec_driver_sql(f"SELECT count(*) FROM {quoted}").scalar_one())
    finally:
        engine.dispose()


def lock_waits(engine: sa.Engine) -> int:
    """Sessions of this PostgreSQL database waiting for a lock (a fresh connection each time:
    ``pg_stat_activity`` is read once per transaction)."""
    with engine.connect() as conn:
        return int(
            conn.exec_driver_sql(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            ).scalar_one()
        )


def rows_written() -> dict[str, int]:
    """Counts of every table a submission writes."""
    return {
        t: count(t)
        for t in ("ratchet_job", "ratchet_job_queue", "ratchet_job_tag", "ratchet_business_key")
    }


def job_in(status: JobStatus, *, business_key: str | None = None) -> uuid.UUID:
    """Submit a job and drive it to ``status`` through the real operations."""
    builder = ratchet.enqueue(add, 1, 2)
    if business_key:
        builder.with_business_key(business_key)
    job_id = builder.submit().id
    if status == JobStatus.PENDING:
        return job_id
    if status == JobStatus.PAUSED:
        assert ratchet.pause_job(job_id)
        return job_id
    if status == JobStatus.CANCELED:
        assert ratchet.cancel_job(job_id)
        return job_id
    claimed = ratchet.claim_due(1000, "node-a")
    assert [c.job_id for c in claimed] == [job_id], "make running/ended jobs before pending ones"
    if status in (JobStatus.SUCCEEDED, JobStatus.FAILED):
        finish(job_id, status)
    return job_id


def dead_letters(errors: Sequence[str], task: Any = add, node: str = "node-a") -> list[uuid.UUID]:
    """Jobs of ``task`` (a task function or its name), one per error, failed for good with it
    through the worker's claim and completion write; their ids, in the order of ``errors``.
    Make them before any other due job: every due job is claimed."""
    handles = ratchet.enqueue_many(ratchet.enqueue(task, 1, 2) for _ in errors)
    ids = [h.id for h in handles]
    claimed = {c.job_id: c for c in ratchet.claim_due(len(ids) + 1000, node)}
    assert set(claimed) == set(ids), "make dead letters before other due jobs"
    outcomes = [
        Finished(i, Outcome.FAILED, claimed[i].task, claimed[i].attempt, error=error)
        for i, error in zip(ids, errors, strict=True)
    ]
    runtime = ratchet.runtime
    with runtime.store.begin(runtime.engine) as conn:
        assert runtime.store.executions.complete_many(conn, node, outcomes) == set(ids)
    return ids


def finish(job_id: uuid.UUID, status: JobStatus, node: str = "node-a", error: str = "boom") -> bool:
    """End a RUNNING job as the worker does (its outcome through the completer's write, fenced
    by ``node``; a failure with ``error``); whether it was written."""
    runtime = ratchet.runtime
    with runtime.engine.connect() as conn:
        row = conn.execute(
            sa.select(job.c.task, job.c.follow_up, job.c.batch_id, job_queue.c.attempts)
            .join(job_queue, job_queue.c.job_id == job.c.job_id)
            .where(job.c.job_id == job_id)
        ).first()
    if row is None:
        return False
    failed = status == JobStatus.FAILED
    outcome = Finished(
        job_id,
        Outcome.FAILED if failed else Outcome.SUCCEEDED,
        row.task,
        row.attempts,
        error=error if failed else None,
        follow_up=row.follow_up,
        batch_id=row.batch_id,
    )
    with runtime.store.begin(runtime.engine) as conn:
        return job_id in runtime.store.executions.complete_many(conn, node, [outcome])


def add_refusing_trigger(
    conn: sa.Connection,
    name: str,
    table: str,
    condition: str,
    on: str = "INSERT",
    message: str = "refused by a test trigger",
) -> None:
    """A trigger refusing (an ``IntegrityError``) every row of ``table`` that ``on`` (INSERT or
    UPDATE) would write where ``condition`` (SQL over ``NEW``) holds, on each database."""
    dialect = conn.dialect.name
    if dialect == "sqlite":
        conn.exec_driver_sql(
            f"CREATE TRIGGER {name} BEFORE {on} ON {table} WHEN {condition} "
            f"BEGIN SELECT RAISE(ABORT, '{message}'); END"
        )
    elif dialect == "postgresql":
        conn.exec_driver_sql(
            f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ "
            f"BEGIN IF {condition} THEN RAISE EXCEPTION '{message}' "
            "USING ERRCODE = 'check_violation'; END IF; RETURN NEW; END $$"
        )
        conn.exec_driver_sql(
            f"CREATE TRIGGER {name} BEFORE {on} ON {table} FOR EACH ROW EXECUTE FUNCTION {name}()"
        )
    else:  # MariaDB: 1048 (a NOT NULL column refused) is one of the driver's IntegrityErrors
        conn.exec_driver_sql(
            f"CREATE TRIGGER {name} BEFORE {on} ON {table} FOR EACH ROW BEGIN "
            f"IF {condition} THEN SIGNAL SQLSTATE '23000' "
            f"SET MYSQL_ERRNO = 1048, MESSAGE_TEXT = '{message}'; END IF; END"
        )


def drop_refusing_trigger(conn: sa.Connection, name: str, table: str) -> None:
    """Drop a trigger :func:`add_refusing_trigger` made."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"DROP TRIGGER {name} ON {table}")
        conn.exec_driver_sql(f"DROP FUNCTION {name}()")
    else:
        conn.exec_driver_sql(f"DROP TRIGGER {name}")


@contextmanager
def refusing(url: str, table: str, condition: str, on: str = "INSERT") -> Iterator[None]:
    """While inside, the database refuses (an ``IntegrityError``) every row of ``table`` that
    ``on`` (INSERT or UPDATE) would write where ``condition`` (SQL over ``NEW``) holds: a
    trigger, standing for any constraint a later statement of an operation may break."""
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        add_refusing_trigger(conn, "ratchet_test_refuse", table, condition, on)
    try:
        yield
    finally:
        with engine.begin() as conn:
            drop_refusing_trigger(conn, "ratchet_test_refuse", table)
        engine.dispose()


def each_database_that_holds(
    damage: list[tuple[str, object, tuple[str, ...]]],
) -> list[Any]:
    """``(database, column, value)`` parameters for each ``(column, value, databases)`` of
    ``damage``, only on the databases whose column type can hold the value (PostgreSQL keeps no
    text in a number column): a case a database cannot store is not a test there, not a skip."""
    return [
        pytest.param(database, column, value, id=f"{database}-{column}-{value!r}")
        for column, value, databases in damage
        for database in databases
    ]


def add_execution(
    conn: sa.Connection,
    job_id: uuid.UUID,
    started: datetime,
    status: str,
    node_id: str = "n",
    **columns: Any,
) -> None:
    """An execution row of ``job_id``'s first attempt, written by hand (``columns``: the rest)."""
    conn.execute(
        sa.insert(execution).values(
            execution_id=uuid7(),
            job_id=job_id,
            attempt=1,
            node_id=node_id,
            status=status,
            started_at=started,
            **columns,
        )
    )


@contextmanager
def heard(signal: Any) -> Iterator[list[dict[str, Any]]]:
    """The data of every ``signal`` (an event of ``flask_ratchet.events``) sent inside."""
    got: list[dict[str, Any]] = []

    def receive(_app: Any, **data: Any) -> None:
        got.append(data)

    signal.connect(receive)
    try:
        yield got
    finally:
        signal.disconnect(receive)


def add_node(
    node_id: str, heartbeat_age: timedelta = timedelta(0), info: str | None = None
) -> None:
    """A worker's node row, its last heartbeat ``heartbeat_age`` ago, publishing ``info``."""
    now = datetime.now(UTC)
    with ratchet.transaction() as conn:
        conn.execute(
            sa.insert(node).values(
                node_id=node_id,
                host="h",
                pid=1,
                version="t",
                concurrency=4,
                started_at=now - timedelta(hours=1),
                last_heartbeat=now - heartbeat_age,
                info=info,
            )
        )
