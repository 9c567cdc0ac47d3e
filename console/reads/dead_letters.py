"""The dead-letter page: jobs that failed for good, grouped by task and error, from the DLQ
alerts (kept for ``RATCHET_DLQ_RETENTION_DAYS``, which bounds what this reads)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from flask_ratchet.columns import aware
from flask_ratchet.schema import dlq_alert


@dataclass(frozen=True, slots=True)
class FailureGroup:
    """Jobs of one task that failed for good with one error, from the DLQ alerts."""

    task: str
    error: str
    jobs: int
    occurrences: int
    first_seen: datetime
    last_seen: datetime
    recent_jobs: list[uuid.UUID]


def failure_groups(conn: Connection, limit: int = 100) -> list[FailureGroup]:
    """DLQ alerts grouped by task and error, most recently seen first.

    Alerts are kept for ``RATCHET_DLQ_RETENTION_DAYS``, which bounds what this reads.
    """
    a = dlq_alert.c
    groups = conn.execute(
        sa.select(
            a.task,
            a.error_hash,
            sa.func.max(a.error).label("error"),
            sa.func.count(sa.distinct(a.job_id)).label("jobs"),
            sa.func.sum(a.occurrences).label("occurrences"),
            sa.func.min(a.created_at).label("first_seen"),
            sa.func.max(a.last_seen_at).label("last_seen"),
        )
        .group_by(a.task, a.error_hash)
        .order_by(sa.func.max(a.last_seen_at).desc())
        .limit(limit)
    ).all()
    recent = _recent_failed_jobs(conn, [(g.task, g.error_hash) for g in groups])
    return [
        FailureGroup(
            task=g.task,
            error=g.error,
            jobs=int(g.jobs),
            occurrences=int(g.occurrences or 0),
            first_seen=aware(g.first_seen),
            last_seen=aware(g.last_seen),
            recent_jobs=recent.get((g.task, g.error_hash), []),
        )
        for g in groups
    ]


def _recent_failed_jobs(
    conn: Connection, groups: list[tuple[str, str]], per_group: int = 5
) -> dict[tuple[str, str], list[uuid.UUID]]:
    """The jobs of each (task, error hash) group whose alerts were seen last: one query."""
    if not groups:
        return {}
    a = dlq_alert.c
    per_job = (
        sa.select(a.task, a.error_hash, a.job_id, sa.func.max(a.last_seen_at).label("seen"))
        .where(a.error_hash.in_({h for _, h in groups}))
        .group_by(a.task, a.error_hash, a.job_id)
        .subquery()
    )
    ranked = sa.select(
        per_job,
        sa.func.row_number()
        .over(
            partition_by=(per_job.c.task, per_job.c.error_hash),
            order_by=(per_job.c.seen.desc(), per_job.c.job_id.desc()),
        )
        .label("n"),
    ).subquery()
    rows = conn.execute(
        sa.select(ranked.c.task, ranked.c.error_hash, ranked.c.job_id)
        .where(ranked.c.n <= per_group)
        .order_by(ranked.c.task, ranked.c.error_hash, ranked.c.n)
    )
    out: dict[tuple[str, str], list[uuid.UUID]] = {}
    for task, error_hash, job_id in rows:
        out.setdefault((task, error_hash), []).append(job_id)
    return out


def failure_groups_among(
    conn: Connection, visible: Callable[[list[uuid.UUID]], set[uuid.UUID]], limit: int = 100
) -> list[FailureGroup]:
    """:func:`failure_groups` of the jobs ``visible`` keeps (an operator's, under a job
    policy), grouped here: every alert is read (retention bounds them) and the jobs are
    asked about a thousand at a time."""
    a = dlq_alert.c
    rows = conn.execute(
        sa.select(a.task, a.error_hash, a.error, a.job_id, a.occurrences)
        .add_columns(a.created_at, a.last_seen_at)
        .order_by(a.last_seen_at.desc(), a.job_id.desc())
    ).all()
    ids = list(dict.fromkeys(r.job_id for r in rows))
    shown: set[uuid.UUID] = set()
    for start in range(0, len(ids), 1000):
        shown |= visible(ids[start : start + 1000])
    groups: dict[tuple[str, str], list[Any]] = {}
    for r in rows:
        if r.job_id in shown:
            groups.setdefault((r.task, r.error_hash), []).append(r)
    out = []
    for (task, _), alerts in list(groups.items())[:limit]:  # newest seen first, as rows came
        jobs = list(dict.fromkeys(r.job_id for r in alerts))
        out.append(
            FailureGroup(
                task=task,
                error=max(r.error for r in alerts),
                jobs=len(jobs),
                occurrences=sum(int(r.occurrences or 0) for r in alerts),
                first_seen=aware(min(r.created_at for r in alerts)),
                last_seen=aware(alerts[0].last_seen_at),
                recent_jobs=jobs[:5],
            )
        )
    return out
