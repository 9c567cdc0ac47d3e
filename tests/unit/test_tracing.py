"""The names tracing gives the statements ratchet sends past SQLAlchemy's engine events: what they
write, in order, never a value."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from flask_ratchet import schema
from flask_ratchet.store.postgres_completion import COMPLETE
from flask_ratchet.tracing import error_type, summarize

CLAIM = """
WITH candidate AS (
    SELECT q.job_id FROM ratchet_job_queue q
    WHERE q.status = :pending  -- an UPDATE of nothing, in a comment
    ORDER BY q.scheduled_time LIMIT :limit
    FOR UPDATE SKIP LOCKED
)
UPDATE ratchet_job_queue q SET status = :running FROM candidate, ratchet_job j
WHERE q.job_id = candidate.job_id RETURNING q.job_id, j.task
"""


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        (CLAIM, ("UPDATE ratchet_job_queue", "UPDATE", "ratchet_job_queue")),
        ("BEGIN IMMEDIATE", ("BEGIN", "BEGIN", None)),
        ("SAVEPOINT ratchet_write", ("SAVEPOINT", "SAVEPOINT", None)),
        ("ROLLBACK TO SAVEPOINT ratchet_write", ("ROLLBACK", "ROLLBACK", None)),
        ("SELECT now()", ("SELECT", "SELECT", None)),
        (
            "COPY ratchet_job_tag (job_id, tag) FROM STDIN (FORMAT BINARY)",
            ("COPY ratchet_job_tag", "COPY", "ratchet_job_tag"),
        ),
        (
            "INSERT INTO ratchet_lock (name) VALUES (:name) "
            "ON CONFLICT (name) DO UPDATE SET owner = :owner",
            ("INSERT ratchet_lock", "INSERT", "ratchet_lock"),
        ),
    ],
)
def test_a_statement_is_named_by_what_it_writes(
    sql: str, expected: tuple[str, str, str | None]
) -> None:
    assert summarize(sql) == expected


def test_a_statement_writing_several_tables_names_each_once_in_order() -> None:
    summary, operation, collection = summarize(COMPLETE)
    assert summary.split(" ")[:6] == [
        "DELETE", "ratchet_job_queue", "UPDATE", "ratchet_job_queue", "UPDATE", "ratchet_job",
    ]  # fmt: skip
    assert "INSERT ratchet_execution" in summary and "INSERT ratchet_job_log" in summary
    assert operation == "DELETE" and collection is None  # more than one table


@pytest.mark.parametrize("dialect", [sqlite, postgresql])
def test_a_compiled_insert_is_named_by_its_table(dialect: Any) -> None:
    """One job's insert as the driver's cursor gets it (``ON CONFLICT … DO NOTHING``,
    ``RETURNING``)."""
    stmt = (
        dialect.insert(schema.job)
        .values(job_id=sa.bindparam("job_id"), task=sa.bindparam("task"))
        .on_conflict_do_nothing(index_elements=["idempotency_key"])
        .returning(schema.job.c.job_id)
    )
    compiled = str(stmt.compile(dialect=dialect.dialect()))
    assert compiled.startswith("INSERT INTO ratchet_job ")
    assert summarize(compiled) == ("INSERT ratchet_job", "INSERT", "ratchet_job")


def test_an_error_type_is_its_class_qualified_by_module_unless_builtin() -> None:
    assert error_type(ConnectionError("x")) == "ConnectionError"
    assert error_type(sa.exc.IntegrityError("s", {}, ValueError())) == (
        "sqlalchemy.exc.IntegrityError"
    )
