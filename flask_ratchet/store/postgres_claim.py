"""PostgreSQL's claim: one statement and one round trip.

Time is always the server's ``now()``. The claim:

1. for each priority level, the oldest due PENDING rows of queues not paused, read in index
   order from ``ix_ratchet_job_queue_claim`` and locked with ``FOR UPDATE SKIP LOCKED`` (so
   concurrent claimers take disjoint rows and never wait on each other); for a worker that
   names its queues, the same per queue and level from ``ix_ratchet_job_queue_queue_claim``, at
   most the queue's quota each (so a backlog in other queues is never read);
2. of those, the ``limit`` best by effective priority
   (``priority + floor(wait_minutes / boost)``, then due time, then id), and at most a queue's
   quota from each queue;
3. ``UPDATE … RETURNING`` them as RUNNING, joined to the cold row for what the worker needs.

Within a level, due order *is* effective-priority order, so the global best ``limit`` rows are
always among the per-level candidates: the claim reads at most ``5 * limit`` index entries, however
deep the backlog is.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import UTC
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..columns import EARLIEST, LATEST
from ..options import Priority
from ..states import Action, sources, target
from .driver import driver_statement
from .types import ClaimedJob

_LEVELS = ",".join(str(int(p)) for p in Priority)

# The claim of a worker that takes every queue, while no queue is paused as far as it knows
# (else it names the others: see store/jobs.py): per priority level. A queue paused since is
# left out of the pick, not the scan: a condition the planner cannot estimate inside the scan
# would turn its index walk into a sort of every pending row.
_EVERY_QUEUE = """
WITH candidate AS (
    SELECT c.job_id, c.queue, c.priority, c.scheduled_time
    FROM unnest(ARRAY[{levels}]::smallint[]) AS level(p)
    CROSS JOIN LATERAL (
        SELECT q.job_id, q.queue, q.priority, q.scheduled_time
        FROM ratchet_job_queue q
        WHERE q.status = :pending AND q.priority = level.p AND q.scheduled_time <= now(){exclude}
        ORDER BY q.scheduled_time, q.job_id
        LIMIT :limit
        FOR UPDATE SKIP LOCKED
    ) c
), picked AS (
    SELECT job_id FROM candidate
    WHERE queue <> ALL(ARRAY(SELECT name FROM ratchet_queue WHERE paused))
    ORDER BY {effective} DESC, scheduled_time, job_id
    LIMIT :limit
)"""

# The claim of a worker that names its queues: per queue and level, from the per-queue index,
# at most the queue's quota from each queue (a worker's per-queue thread limit), then the best.
_NAMED_QUEUES = """
WITH wanted AS (
    SELECT w.name, w.quota
    FROM unnest(CAST(:queues AS text[]), CAST(:quotas AS int[])) AS w(name, quota)
    WHERE w.name <> ALL(ARRAY(SELECT name FROM ratchet_queue WHERE paused))
), candidate AS (
    SELECT c.job_id, c.queue, c.priority, c.scheduled_time, wanted.quota
    FROM wanted
    CROSS JOIN unnest(ARRAY[{levels}]::smallint[]) AS level(p)
    CROSS JOIN LATERAL (
        SELECT q.job_id, q.queue, q.priority, q.scheduled_time
        FROM ratchet_job_queue q
        WHERE q.status = :pending AND q.queue = wanted.name AND q.priority = level.p
          AND q.scheduled_time <= now(){exclude}
        ORDER BY q.scheduled_time, q.job_id
        -- Not the quota: a limit the planner cannot see makes it expect a tenth of the table,
        -- and a plan that costly is compiled (JIT) before it runs. The pick applies quotas.
        LIMIT :limit
        FOR UPDATE SKIP LOCKED
    ) c
), ranked AS (
    SELECT job_id, scheduled_time, effective, quota,
        row_number() OVER (PARTITION BY queue ORDER BY effective DESC, scheduled_time, job_id)
            AS nth
    FROM (SELECT candidate.*, {effective} AS effective FROM candidate) e
), picked AS (
    SELECT job_id FROM ranked WHERE nth <= quota
    ORDER BY effective DESC, scheduled_time, job_id
    LIMIT :limit
)"""

_MARK_CLAIMED = """
UPDATE ratchet_job_queue q
SET status = :running, picked_by = :node, picked_at = now(), attempts = q.attempts + 1,
    version = q.version + 1, updated_at = now()
FROM picked, ratchet_job j
WHERE q.job_id = picked.job_id AND j.job_id = q.job_id
-- In the order of ClaimedJob's fields.
-- A due time before year 1 (or -infinity) is due, but psycopg cannot load it: it is read as
-- EARLIEST, or the claim would fail after marking its jobs RUNNING.
RETURNING q.job_id, j.task, j.payload, j.params, q.priority, q.attempts, q.max_retries,
          j.backoff, j.backoff_base, j.timeout, j.resource_name, {scheduled}, q.picked_at,
          j.depends_on, j.follow_up, j.batch_id, q.queue, j.trace_context, {expires}
"""


def _earliest(time: str) -> str:
    return f"GREATEST({time}, TIMESTAMPTZ '{EARLIEST.isoformat()}')"


# Subtracting -infinity fails the statement: a hand-written due time must not stop every claim.
_BOOSTED = (
    f"priority + floor(extract(epoch FROM now() - {_earliest('scheduled_time')}) / (60 * :boost))"
)


# Jobs of the tasks the claiming worker refused a moment ago (it does not know them): only while
# there are some, a look at each candidate's cold row by its primary key. Not an anti-join
# (``NOT EXISTS … AND x.task = ANY(…)``): the planner read that through the (task, job_id) index
# by task alone, every refused job's entry for every candidate: a claim over 10,000 pending jobs
# of a refused task took 1.9 s with fresh statistics and 11 s with statistics taken while the
# table was small, against 19 ms so (``python -m bench.enqueue_claim``).
_EXCLUDE = """
          AND (SELECT x.task FROM ratchet_job x WHERE x.job_id = q.job_id)
              <> ALL(CAST(:refused AS text[]))"""


def _representable(time: str) -> str:
    """``time`` held within what psycopg can load, NULL kept (as ``columns.Representable``)."""
    earliest, latest = (
        f"TIMESTAMPTZ '{EARLIEST.isoformat()}'",
        f"TIMESTAMPTZ '{LATEST.isoformat()}'",
    )
    return (
        f"CASE WHEN {time} < {earliest} THEN {earliest} "
        f"WHEN {time} > {latest} THEN {latest} ELSE {time} END"
    )


def _claim_sql(picking: str, boosted: bool, excluding: bool) -> sa.TextClause:
    effective = _BOOSTED if boosted else "priority"
    exclude = _EXCLUDE if excluding else ""
    return sa.text(
        picking.format(levels=_LEVELS, effective=effective, exclude=exclude)
        + _MARK_CLAIMED.format(
            scheduled=_earliest("q.scheduled_time"), expires=_representable("j.expires_at")
        )
    )


#: The claims, by (names its queues, boosted, excluding refused tasks).
_CLAIMS = {
    (named, boosted, excluding): _claim_sql(
        _NAMED_QUEUES if named else _EVERY_QUEUE, boosted, excluding
    )
    for named in (False, True)
    for boosted in (False, True)
    for excluding in (False, True)
}


def claim(
    conn: Connection,
    limit: int,
    node_id: str,
    boost_minutes: int,
    quotas: Mapping[str, int] | None = None,
    refused: Collection[str] = (),
) -> list[ClaimedJob]:
    """Claim up to ``limit`` due jobs for ``node_id`` in one statement (see the module's
    docstring); best first."""
    (source,) = sources(Action.CLAIM)
    params: dict[str, Any] = {
        "limit": limit,
        "node": node_id,
        "pending": source,
        "running": target(Action.CLAIM, source),
    }
    if quotas is not None:
        params["queues"], params["quotas"] = list(quotas), list(quotas.values())
    if refused:
        params["refused"] = list(refused)
    stmt = _CLAIMS[quotas is not None, bool(boost_minutes), bool(refused)]
    if boost_minutes:
        params["boost"] = boost_minutes
    # On the driver's cursor (see .driver): claiming is most of the poller's work.
    claimed = [_claimed(row) for row in driver_statement(stmt, conn.dialect).execute(conn, params)]
    claimed.sort(key=lambda c: (-c.priority, c.scheduled_time, c.job_id))
    return claimed


def _claimed(row: Sequence[Any]) -> ClaimedJob:
    """A row of the claim's RETURNING list (in ClaimedJob's field order) as a ClaimedJob.

    psycopg gives times in the session's zone; they are taken to UTC, as ``UtcDateTime``
    would (a queue wait across a daylight-saving change would count wall-clock time).
    """
    (job_id, task, payload, params, priority, attempt, max_retries, backoff, backoff_base,
     timeout, resource, scheduled, picked, depends_on, follow_up, batch_id,
     queue, trace_context, expires) = row  # fmt: skip
    return ClaimedJob(
        job_id, task, payload, params, priority, attempt, max_retries, backoff, backoff_base,
        timeout, resource, scheduled.astimezone(UTC), picked.astimezone(UTC), depends_on,
        follow_up, batch_id, queue, trace_context,
        None if expires is None else expires.astimezone(UTC),
    )  # fmt: skip
