"""PostgreSQL (psycopg 3): the production store.

Time is always the server's ``now()``. The claim is one statement and one round trip:

1. for each priority level, the oldest due PENDING rows, read in index order from
   ``ix_ratchet_job_queue_claim`` and locked with ``FOR UPDATE SKIP LOCKED`` (so concurrent
   claimers take disjoint rows and never wait on each other);
2. of those, the ``limit`` best by effective priority
   (``priority + floor(wait_minutes / boost)``, then due time, then id);
3. ``UPDATE … RETURNING`` them as RUNNING, joined to the cold row for what the worker needs.

Within a level, due order *is* effective-priority order, so the global best ``limit`` rows are
always among the per-level candidates: the claim reads at most ``5 * limit`` index entries, however
deep the backlog is.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql.elements import ColumnElement

from ..options import Priority
from ..schema import UtcDateTime
from ..states import Action, sources, target
from .base import ClaimedJob, NewJob
from .sql import SqlJobStore

_LEVELS = ",".join(str(int(p)) for p in Priority)

_CLAIM = """
WITH candidate AS (
    SELECT c.job_id, c.priority, c.scheduled_time
    FROM unnest(ARRAY[{levels}]::smallint[]) AS level(p)
    CROSS JOIN LATERAL (
        SELECT q.job_id, q.priority, q.scheduled_time
        FROM ratchet_job_queue q
        WHERE q.status = :pending AND q.priority = level.p AND q.scheduled_time <= now()
        ORDER BY q.scheduled_time, q.job_id
        LIMIT :limit
        FOR UPDATE SKIP LOCKED
    ) c
), picked AS (
    SELECT job_id FROM candidate
    ORDER BY {effective} DESC, scheduled_time, job_id
    LIMIT :limit
)
UPDATE ratchet_job_queue q
SET status = :running, picked_by = :node, picked_at = now(), attempts = q.attempts + 1,
    version = q.version + 1, updated_at = now()
FROM picked, ratchet_job j
WHERE q.job_id = picked.job_id AND j.job_id = q.job_id
RETURNING q.job_id, j.task, j.payload, j.params, q.priority, q.attempts, q.max_retries,
          j.backoff, j.backoff_base, j.timeout, j.resource_name, q.scheduled_time, q.picked_at
"""

_BOOSTED = "priority + floor(extract(epoch FROM now() - scheduled_time) / (60 * :boost))"


def _claim_sql(boosted: bool) -> sa.TextualSelect:
    sql = _CLAIM.format(levels=_LEVELS, effective=_BOOSTED if boosted else "priority")
    return sa.text(sql).columns(
        job_id=sa.Uuid(), scheduled_time=UtcDateTime(), picked_at=UtcDateTime()
    )


_CLAIM_PLAIN = _claim_sql(boosted=False)
_CLAIM_BOOSTED = _claim_sql(boosted=True)


class PostgresStore(SqlJobStore):
    """The store for ``postgresql+psycopg://`` URLs."""

    dialect_insert = staticmethod(postgresql.insert)

    @contextmanager
    def begin(self, engine: Engine) -> Iterator[Connection]:
        with engine.begin() as conn:
            yield conn

    def now(self, conn: Connection) -> datetime:
        return conn.execute(sa.select(self.now_sql())).scalar_one()

    def now_sql(self) -> ColumnElement[datetime]:
        return sa.func.now(type_=UtcDateTime())

    def _insert_times(self) -> dict[str, ColumnElement[datetime]]:
        delay = sa.func.make_interval(0, 0, 0, 0, 0, 0, sa.bindparam("p_delay", type_=sa.Float))
        return {
            "created": self.now_sql(),
            "due": sa.func.coalesce(
                sa.bindparam("p_run_at", type_=UtcDateTime()), self.now_sql() + delay
            ),
        }

    def _time_params(self, new: NewJob, now: datetime) -> dict[str, Any]:
        return {"p_delay": new.delay, "p_run_at": new.run_at}

    def claim_due(
        self, conn: Connection, limit: int, node_id: str, boost_minutes: int
    ) -> list[ClaimedJob]:
        (source,) = sources(Action.CLAIM)
        params: dict[str, Any] = {
            "limit": limit,
            "node": node_id,
            "pending": source,
            "running": target(Action.CLAIM, source),
        }
        stmt = _CLAIM_PLAIN
        if boost_minutes:
            stmt, params["boost"] = _CLAIM_BOOSTED, boost_minutes
        rows = conn.execute(stmt, params).all()
        claimed = [
            ClaimedJob(
                job_id=r.job_id,
                task=r.task,
                payload=r.payload,
                params=r.params,
                priority=r.priority,
                attempt=r.attempts,
                max_retries=r.max_retries,
                backoff=r.backoff,
                backoff_base=r.backoff_base,
                timeout=r.timeout,
                resource=r.resource_name,
                scheduled_time=r.scheduled_time,
                picked_at=r.picked_at,
            )
            for r in rows
        ]
        claimed.sort(key=lambda c: (-c.priority, c.scheduled_time, c.job_id))
        return claimed
