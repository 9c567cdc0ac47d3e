"""MariaDB's claim: a short transaction whose cost does not grow with the backlog.

1. The paused queues, read without a lock (their jobs are not taken).
2. The candidates: for each priority level (and, for a worker that names its queues, each of
   its queues), the oldest due PENDING rows, at most ``limit`` of each, read in order from the
   claim index (whose first column on MariaDB is ``status``: see
   :func:`flask_ratchet.schema_ddl.index_columns`) and locked with ``FOR UPDATE SKIP LOCKED``, all
   in one ``UNION ALL``. Concurrent claimers take disjoint rows and never wait on each other.
3. The pick, in Python: the ``limit`` best by effective priority
   (``priority + floor(wait_minutes / boost)``, then due time, then id), at most a queue's
   quota from each queue. Within a level due order is effective-priority order, so the best
   ``limit`` rows are always among the candidates, as on PostgreSQL.
4. ``UPDATE … WHERE job_id IN (…)`` marks them RUNNING (MariaDB has no ``UPDATE … RETURNING``),
   and their cold rows are read for what the worker needs. The other candidates' locks end
   with the transaction, a moment later.

Every time is the server's: the candidates carry ``UTC_TIMESTAMP(6)``.
"""

from __future__ import annotations

import functools
import uuid
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..columns import StoredUuid, UtcDateTime
from ..options import Priority
from ..schema import job_queue, queue_state
from ..states import Action, sources, target
from .dialect import CLAIMED_COLD_ROWS
from .types import ClaimedJob

(_PENDING,) = sources(Action.CLAIM)
_RUNNING = target(Action.CLAIM, _PENDING)
_LEVELS = sorted((int(p) for p in Priority), reverse=True)

_PART = """(SELECT q.job_id, q.queue, q.priority, q.scheduled_time, q.attempts, q.max_retries,
        UTC_TIMESTAMP(6) AS now
    FROM ratchet_job_queue q FORCE INDEX ({index})
    WHERE q.status = '{pending}' AND {queue}q.priority = {level}
      AND q.scheduled_time <= UTC_TIMESTAMP(6){unpaused}{exclude}
    ORDER BY q.scheduled_time, q.job_id
    LIMIT :limit
    FOR UPDATE SKIP LOCKED)"""
# Jobs of the tasks the claiming worker refused a moment ago (it does not know them).
_EXCLUDE = """
      AND NOT EXISTS (SELECT 1 FROM ratchet_job x
                      WHERE x.job_id = q.job_id AND x.task IN :refused)"""


@functools.cache
def _candidates(named: int | None, unpaused: bool, excluding: bool) -> sa.TextClause:
    """The candidates' statement for a claim of every queue (``named`` is None) or of
    ``named`` queues (bound as ``queue_<i>``), leaving out the queues bound as ``paused`` and
    the tasks bound as ``refused``."""
    queues = [None] if named is None else [f":queue_{i}" for i in range(named)]
    parts = [
        _PART.format(
            index="ix_ratchet_job_queue_claim" if q is None else "ix_ratchet_job_queue_queue_claim",
            pending=_PENDING.value,
            queue="" if q is None else f"q.queue = {q} AND ",
            level=level,
            unpaused="\n      AND q.queue NOT IN :paused" if unpaused else "",
            exclude=_EXCLUDE if excluding else "",
        )
        for q in queues
        for level in _LEVELS
    ]
    stmt = sa.text("\nUNION ALL\n".join(parts))
    if unpaused:
        stmt = stmt.bindparams(sa.bindparam("paused", expanding=True))
    if excluding:
        stmt = stmt.bindparams(sa.bindparam("refused", expanding=True))
    return stmt.columns(job_id=StoredUuid(), scheduled_time=UtcDateTime(), now=UtcDateTime())  # type: ignore[return-value]


_PAUSED = sa.select(queue_state.c.name).where(queue_state.c.paused)

_MARK = (
    sa.update(job_queue)
    .where(
        job_queue.c.job_id.in_(sa.bindparam("ids", expanding=True)),
        job_queue.c.status == _PENDING,
    )
    .values(
        status=_RUNNING,
        picked_by=sa.bindparam("node"),
        picked_at=sa.bindparam("now", type_=UtcDateTime()),
        attempts=job_queue.c.attempts + 1,
        version=job_queue.c.version + 1,
        updated_at=sa.bindparam("now", type_=UtcDateTime()),
    )
)


def claim(
    conn: Connection,
    limit: int,
    node_id: str,
    boost_minutes: int,
    quotas: Mapping[str, int] | None,
    refused: Collection[str],
) -> list[ClaimedJob]:
    """See :meth:`flask_ratchet.store.dialect.Dialect.claim_due` and the module's docstring."""
    paused = list(conn.execute(_PAUSED).scalars())
    if quotas is not None:
        quotas = {name: n for name, n in quotas.items() if name not in paused and n > 0}
        if not quotas:
            return []
    params: dict[str, Any] = {"limit": limit}
    if paused and quotas is None:
        params["paused"] = paused
    if refused:
        params["refused"] = list(refused)
    for i, name in enumerate(quotas or ()):
        params[f"queue_{i}"] = name
    stmt = _candidates(None if quotas is None else len(quotas), "paused" in params, bool(refused))
    candidates = list(conn.execute(stmt, params))
    picked = _pick(candidates, limit, boost_minutes, quotas)
    if not picked:
        return []
    now: datetime = picked[0].now
    ids = [row.job_id for row in picked]
    conn.execute(_MARK, {"ids": ids, "node": node_id, "now": now})
    cold = {row.job_id: row for row in conn.execute(CLAIMED_COLD_ROWS, {"ids": ids})}
    claimed = [_claimed(hot, cold[hot.job_id], now) for hot in picked if hot.job_id in cold]
    claimed.sort(key=lambda c: (-c.priority, c.scheduled_time, c.job_id))
    return claimed


def _pick(
    candidates: Sequence[Any],
    limit: int,
    boost_minutes: int,
    quotas: Mapping[str, int] | None,
) -> list[Any]:
    """The best ``limit`` candidates, at most ``quotas[queue]`` of each queue."""

    def effective(row: Any) -> int:
        if not boost_minutes:
            return int(row.priority)
        waited = max((row.now - row.scheduled_time).total_seconds(), 0.0) / 60.0
        return int(row.priority) + int(waited // boost_minutes)

    ordered = sorted(
        candidates, key=lambda row: (-effective(row), row.scheduled_time, row.job_id.bytes)
    )
    taken: defaultdict[str, int] = defaultdict(int)
    picked = []
    for row in ordered:
        if quotas is not None:
            if taken[row.queue] >= quotas[row.queue]:
                continue
            taken[row.queue] += 1
        picked.append(row)
        if len(picked) == limit:
            break
    return picked


def _claimed(hot: Any, cold: Any, now: datetime) -> ClaimedJob:
    job_id: uuid.UUID = hot.job_id
    return ClaimedJob(
        job_id=job_id,
        task=cold.task,
        payload=cold.payload,
        params=cold.params,
        priority=hot.priority,
        attempt=hot.attempts + 1,
        max_retries=hot.max_retries,
        backoff=cold.backoff,
        backoff_base=cold.backoff_base,
        timeout=cold.timeout,
        resource=cold.resource_name,
        scheduled_time=hot.scheduled_time,
        picked_at=now,
        depends_on=cold.depends_on,
        follow_up=bool(cold.follow_up),
        batch_id=cold.batch_id,
        queue=hot.queue,
        trace_context=cold.trace_context,
        expires_at=cold.expires_at,
    )
