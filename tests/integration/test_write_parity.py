"""One owner per write, many renderings: the same submissions and the same outcomes, written by
every rendering ratchet has, leave the same rows in every ``ratchet_*`` table.

Submission: PostgreSQL's statement for one job, its JSON statement for many, its binary
``COPY`` (jobs without keys), the shared Core SQL (SQLite) and MariaDB's multi-row ``INSERT``\\s.
Completion: PostgreSQL's one statement, the shared Core SQL on PostgreSQL (its statement set
aside), SQLite and MariaDB (whose cold rows are written by one joined ``UPDATE``).

Rows are compared whole, but for what differs by nature: generated ids of executions, alerts and
log lines, and times (each "now" of the moment, kept only as "now"; a fixed time as itself).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from flask_ratchet import migrate, schema
from flask_ratchet.options import Backoff, JobOptions, Priority
from flask_ratchet.store import Store, store_for
from flask_ratchet.store.postgres import PostgresDialect
from flask_ratchet.store.postgres_copy import copy_jobs
from flask_ratchet.store.types import Finished, NewJob, Outcome
from tests.conftest import truncate_all

AT = datetime(2031, 5, 4, 3, 2, 1, tzinfo=UTC)
ADD = "tests.apps:add"
NODE = "parity-node"
#: The failure for good: its fingerprint is computed in Python, once for every rendering.
FAILURE = "ValueError: order 17 not found at 10.0.0.1:5432"
#: Columns holding ids made at write time (uuid7), not by the caller.
MADE_IDS = {"execution_id", "alert_id", "audit_id", "log_id"}


def new_jobs() -> list[NewJob]:
    """Three jobs without keys (COPY can write them), two with keys; the same ids each time."""
    ids = [uuid.UUID(int=(0x0190F0A0 << 96) | (0x7000 << 64) | (0x8 << 60) | n) for n in range(5)]
    plain = [
        NewJob(ids[0], ADD, '{"args":[1,2],"kwargs":{}}', None, JobOptions()),
        NewJob(
            ids[1],
            ADD,
            '{"args":["é🎉",2],"kwargs":{}}',
            '{"region":"eu"}',
            JobOptions(
                queue="reports",
                priority=Priority.HIGH,
                max_retries=7,
                backoff=Backoff.FIXED,
                backoff_base=3.0,
                timeout=40.0,
                resource="api",
                tags=("t", "u"),
                params={"region": "eu"},
                expires=3600.0,  # a deadline an hour after it is due: now
            ),
        ),
        NewJob(
            ids[2],
            ADD,
            '{"args":[],"kwargs":{"a":1}}',
            None,
            JobOptions(expires=90.0),
            run_at=AT,  # its deadline: AT + 90 s
        ),
    ]
    keyed = [
        NewJob(
            ids[3],
            ADD,
            '{"args":[3,4],"kwargs":{}}',
            None,
            JobOptions(tags=("k",)),
            idempotency_key="idem-1",
        ),
        NewJob(
            ids[4],
            ADD,
            '{"args":[5,6],"kwargs":{}}',
            None,
            JobOptions(),
            business_key="order-1",
            follow_up=True,
            callbacks='{"success":["x"]}',
            expires_at=AT + timedelta(days=1),  # a deadline given as a time
        ),
    ]
    return plain + keyed


def outcomes(task_attempts: dict[uuid.UUID, int]) -> list[Finished]:
    """Successes (one of a job with follow-ups), a failure for good and a retry."""
    ids = sorted(task_attempts)
    started = AT - timedelta(days=3000)

    def finished(job_id: uuid.UUID, outcome: Outcome, **fields: Any) -> Finished:
        return Finished(
            job_id, outcome, ADD, task_attempts[job_id], started_at=started,
            duration_ms=12.5, queue_wait_ms=3.0, **fields,
        )  # fmt: skip

    return [
        finished(ids[0], Outcome.SUCCEEDED, result='{"n":3}'),
        finished(ids[1], Outcome.FAILED, error=FAILURE, traceback="Traceback…"),
        finished(ids[2], Outcome.RETRY, error="OSError: later", delay=3600.0),
        finished(ids[3], Outcome.SUCCEEDED, result="null"),
    ]


Write = Callable[[Store, sa.Connection, list[NewJob]], None]


def one_by_one(store: Store, conn: sa.Connection, jobs: list[NewJob]) -> None:
    for new in jobs:
        store.jobs.insert_jobs(conn, [new])


def all_at_once(store: Store, conn: sa.Connection, jobs: list[NewJob]) -> None:
    store.jobs.insert_jobs(conn, jobs)


def copied_then_keyed(store: Store, conn: sa.Connection, jobs: list[NewJob]) -> None:
    plain = [new for new in jobs if not (new.idempotency_key or new.business_key)]
    copy_jobs(conn, plain)
    store.jobs.insert_jobs(conn, [new for new in jobs if new not in plain])


class CoreCompletion(PostgresDialect):
    """PostgreSQL with its one-statement completion set aside: the shared Core SQL writes."""

    def own_completion(self, conn: Any, node_id: str, items: Any) -> None:
        return None


def dump(engine: sa.Engine) -> dict[str, list[tuple[Any, ...]]]:
    """Every ratchet table's rows, in key order, normalised (see the module's docstring)."""
    found = {}
    with engine.connect() as conn:
        now = store_for(engine).now(conn)
        for table in schema.metadata.sorted_tables:
            columns = [c for c in table.columns if c.name not in MADE_IDS]
            rows = conn.execute(sa.select(*columns).order_by(*table.primary_key.columns))
            found[table.name] = sorted(
                (tuple(_normal(v, now) for v in row) for row in rows), key=repr
            )
    return found


def _normal(value: Any, now: datetime) -> Any:
    if isinstance(value, datetime):
        if abs(value - now) < timedelta(minutes=10):
            return "now"
        if value == value.replace(minute=0, second=0, microsecond=0) and (
            timedelta(0) <= now - value < timedelta(hours=2)
        ):
            return "this hour"  # a DLQ alert's hour: the test may cross an hour's end
        if abs(value - now - timedelta(hours=1)) < timedelta(minutes=10):
            return "in an hour"
    if isinstance(value, float):
        return round(value, 6)
    return value


@pytest.fixture
def engines(pg_url: str, mariadb_url: str, tmp_path: Path) -> Iterator[dict[str, sa.Engine]]:
    lite = sa.create_engine(f"sqlite:///{tmp_path / 'parity.db'}")
    migrate.upgrade(lite)
    made = {
        "postgresql": sa.create_engine(pg_url),
        "mariadb": sa.create_engine(mariadb_url),
        "sqlite": lite,
    }
    yield made
    for engine in made.values():
        engine.dispose()


def write_and_complete(
    engine: sa.Engine, write: Write, store: Store | None = None
) -> dict[str, list[tuple[Any, ...]]]:
    """Empty the database, submit with ``write``, claim everything, write the outcomes (with
    ``store``'s dialect), and dump the tables."""
    if engine.dialect.name == "sqlite":
        with engine.begin() as conn:
            for table in reversed(schema.metadata.sorted_tables):
                conn.execute(sa.delete(table))
    else:
        truncate_all(engine.url.render_as_string(hide_password=False))
    store = store or store_for(engine)
    with store.begin(engine) as conn:
        write(store, conn, new_jobs())
    with store.begin(engine) as conn:
        claimed = store.jobs.claim_due(conn, 10, NODE, 0)
    assert len(claimed) == 4  # all but the one due in 2031
    with store.begin(engine) as conn:
        store.executions.complete_many(conn, NODE, outcomes({c.job_id: c.attempt for c in claimed}))
    return dump(engine)


def test_every_rendering_writes_the_same_rows(engines: dict[str, sa.Engine]) -> None:
    pg = engines["postgresql"]
    written = {
        "PostgreSQL, a statement per job": write_and_complete(pg, one_by_one),
        "PostgreSQL, one statement for many": write_and_complete(pg, all_at_once),
        "PostgreSQL, COPY": write_and_complete(pg, copied_then_keyed),
        "PostgreSQL, Core completion": write_and_complete(pg, all_at_once, Store(CoreCompletion())),
        "SQLite, Core": write_and_complete(engines["sqlite"], all_at_once),
        "SQLite, a statement per job": write_and_complete(engines["sqlite"], one_by_one),
        "MariaDB, multi-row INSERTs": write_and_complete(engines["mariadb"], all_at_once),
        "MariaDB, a statement per job": write_and_complete(engines["mariadb"], one_by_one),
    }
    reference = written["PostgreSQL, a statement per job"]
    assert reference["ratchet_job"] and reference["ratchet_execution"]  # something was written
    expiry = [c.name for c in schema.job.columns].index("expires_at")
    deadlines = sorted((row[expiry] for row in reference["ratchet_job"]), key=repr)
    assert deadlines == sorted(
        [None, None, "in an hour", AT + timedelta(seconds=90), AT + timedelta(days=1)], key=repr
    )
    fingerprint = [c.name for c in schema.job.columns].index("fingerprint")
    stored = sorted((row[fingerprint] for row in reference["ratchet_job"]), key=repr)
    assert stored == sorted([None] * 4 + ["ValueError: order {n} not found at {ip}"], key=repr)
    for name, tables in written.items():
        for table, rows in reference.items():
            assert tables[table] == rows, (name, table)
