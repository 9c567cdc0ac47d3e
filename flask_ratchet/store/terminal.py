"""A job reaching a terminal status (SUCCEEDED, FAILED, CANCELED): the guarded delete of its hot
row is the compare-and-swap; only the jobs it let through get their cold row written, their
business key freed and the fact recorded. What the end sets off next (batch counts, dependents,
callbacks) is :meth:`flask_ratchet.store.flows.Flows.ended`'s, which every caller of these calls.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .. import facts
from ..facts import Event
from ..fingerprints import fingerprint
from ..schema import business_key, job, job_queue
from ..states import TERMINAL, Action, JobStatus, sources, target
from .dialect import Dialect, chunks
from .types import Ended

#: A terminal outcome on the cold row (``b_*`` parameters, one set per job: executemany), once
#: the guarded delete of the hot row has let it through.
END_COLD_ROW = (
    sa.update(job)
    .where(job.c.job_id == sa.bindparam("b_job_id"))
    .values(
        terminal_status=sa.bindparam("b_status"),
        result=sa.bindparam("b_result"),
        terminal_error=sa.bindparam("b_error"),
        fingerprint=sa.bindparam("b_fingerprint"),
        attempts=sa.bindparam("b_attempts"),
        progress=sa.bindparam("b_progress"),
    )
)


def failure_fingerprint(status: JobStatus | str, error: str | None) -> str | None:
    """What a job ending in ``status`` with ``error`` stores as its fingerprint: a FAILED job's
    dead-letter group (:func:`flask_ratchet.fingerprints.fingerprint`), else NULL. Every
    rendering of a terminal write takes it from here, computed once in Python."""
    return fingerprint(error) if status == JobStatus.FAILED else None


def end_cold_rows(dialect: Dialect, conn: Connection, rows: Sequence[dict[str, Any]]) -> None:
    """Write terminal outcomes to their cold rows (:data:`END_COLD_ROW`'s parameters but the
    fingerprint, which is added here: a dict per job): in one statement per chunk where the
    dialect has one (MariaDB's driver sends an executemany of an UPDATE as a statement per
    row), else as one executemany."""
    if not rows:
        return
    rows = [
        {**row, "b_fingerprint": failure_fingerprint(row["b_status"], row["b_error"])}
        for row in rows
    ]
    if not dialect.own_cold_ends(conn, rows):
        conn.execute(END_COLD_ROW.values(finished_at=dialect.now_sql()), rows)


#: The fact each terminal status is recorded as, and what it adds to the job's id and task.
_FACTS = {
    JobStatus.SUCCEEDED: (facts.JOB_COMPLETED, "result"),
    JobStatus.FAILED: (facts.JOB_DEAD_LETTERED, "error"),
    JobStatus.CANCELED: (facts.JOB_CANCELED, None),
}


def finish(
    dialect: Dialect,
    conn: Connection,
    job_id: uuid.UUID,
    status: JobStatus,
    *,
    attempts: int,
    error: str | None = None,
    result: str | None = None,
) -> Ended | None:
    """Write a terminal outcome to the cold row, free the business key and record the fact.
    Return the end to follow up, if the job was written with follow-ups.

    Call only after the guarded delete of the hot row succeeded: that delete is the swap.
    """
    assert status in TERMINAL
    (ended,) = dialect.updated(
        conn,
        sa.update(job)
        .where(job.c.job_id == job_id)
        .values(
            terminal_status=status,
            terminal_error=error,
            fingerprint=failure_fingerprint(status, error),
            result=result,
            attempts=attempts,
            finished_at=dialect.now_sql(),
        ),
        job.c.task,
        job.c.follow_up,
    )
    conn.execute(sa.delete(business_key).where(business_key.c.job_id == job_id))
    kind, detail = _FACTS[status]
    data: dict[str, Any] = {"job_id": job_id, "task": ended.task}
    if detail == "result":
        data["result"] = result
    elif detail == "error":
        data["error"] = error
    else:
        data["cascade"] = False
    facts.record(conn, [Event(kind, data)])
    # Only linked jobs have anything to set off.
    return Ended(job_id, status, result=result) if ended.follow_up else None


def end_live(
    dialect: Dialect,
    conn: Connection,
    job_id: uuid.UUID,
    action: Action,
    *,
    error: str | None = None,
    result: str | None = None,
) -> JobStatus | None:
    """Apply a terminal ``action`` to a live job, whoever holds it: the guarded delete of its
    hot row (the swap), then its cold row. Return the new status, or None if the job was not in
    a status ``action`` allows (nothing changed). Recording and follow-ups are the caller's."""
    return end_live_many(dialect, conn, [job_id], action, error=error, result=result).get(job_id)


def end_live_many(
    dialect: Dialect,
    conn: Connection,
    job_ids: Sequence[uuid.UUID],
    action: Action,
    *,
    error: str | None = None,
    result: str | None = None,
) -> dict[uuid.UUID, JobStatus]:
    """:func:`end_live` for several jobs in three statements; return the new status of each
    job the guard let through."""
    ended: dict[uuid.UUID, JobStatus] = {}
    for part in chunks(job_ids):
        gone = conn.execute(
            sa.delete(job_queue)
            .where(job_queue.c.job_id.in_(list(part)), job_queue.c.status.in_(sources(action)))
            .returning(
                job_queue.c.job_id,
                job_queue.c.status,
                job_queue.c.attempts,
                job_queue.c.progress,
            )
        ).all()
        if not gone:
            continue
        now = {r.job_id: target(action, JobStatus(r.status)) for r in gone}
        end_cold_rows(
            dialect,
            conn,
            [
                {
                    "b_job_id": r.job_id,
                    "b_status": now[r.job_id],
                    "b_result": result,
                    "b_error": error,
                    "b_attempts": r.attempts,
                    "b_progress": r.progress,
                }
                for r in gone
            ],
        )
        conn.execute(sa.delete(business_key).where(business_key.c.job_id.in_(list(now))))
        ended |= now
    return ended
