"""PostgreSQL: a batch of outcomes in one statement (see :mod:`.executions` for the semantics).

Hot rows are deleted (terminal) or requeued (retry, release) only where ``status = RUNNING AND
picked_by = :node``; everything else (cold rows, freed keys, executions, log lines, DLQ alerts) is
written only for the jobs that fence let through.

The batch travels as one JSON document (``json_to_recordset``): encoding it is one call into
the C JSON encoder, where binding a dozen arrays costs tens of microseconds per job in the
driver. Keys that are null are left out (a missing key reads as NULL).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from ..ids import uuid7
from ..states import Action, JobStatus, sources, target
from .executions import error_hash
from .terminal import failure_fingerprint
from .types import Finished, Outcome

_RUNNING = next(iter(sources(Action.SUCCEED)))
_BACK = target(Action.RESCHEDULE, JobStatus.RUNNING)
_ENDING = frozenset({Outcome.SUCCEEDED, Outcome.FAILED})

COMPLETE = f"""
WITH input AS (
    SELECT * FROM json_to_recordset(CAST(:batch AS json)) AS t(
        job_id uuid, outcome text, result text, error text, traceback text, delay float8,
        execution_id uuid, attempt int, started_at float8, duration_ms float8,
        queue_wait_ms float8, task text, error_hash text, alert_id uuid, queue text,
        fingerprint text)
), ended AS (
    -- The ids come as a constant array: the planner sees how many there are and hashes the
    -- lookup, whichever index it drives the fence with (statistics of the fence columns go
    -- stale under load, and a plan joining every RUNNING row of the node to the input is
    -- quadratic).
    DELETE FROM ratchet_job_queue q
    WHERE q.job_id = ANY(CAST(:ended_ids AS uuid[]))
      AND q.status = '{_RUNNING}' AND q.picked_by = :node
    RETURNING q.job_id, q.attempts, q.progress
), again AS (
    UPDATE ratchet_job_queue q
    SET status = '{_BACK}', scheduled_time = now() + make_interval(secs => i.delay),
        attempts = q.attempts - CASE WHEN i.outcome = '{Outcome.RELEASE}' THEN 1 ELSE 0 END,
        last_error = coalesce(i.error, q.last_error), picked_by = NULL, picked_at = NULL,
        -- A worker that knew the task had it: refusals before it no longer count.
        refused_since = NULL, refused_by = NULL,
        version = q.version + 1, updated_at = now()
    FROM input i
    WHERE q.job_id = ANY(CAST(:again_ids AS uuid[]))
      AND i.job_id = q.job_id AND q.status = '{_RUNNING}' AND q.picked_by = :node
    RETURNING q.job_id
), cold AS (
    -- SUCCEEDED and FAILED are also the names of the statuses these outcomes lead to.
    UPDATE ratchet_job j
    SET terminal_status = i.outcome, result = i.result, terminal_error = i.error,
        fingerprint = i.fingerprint, attempts = e.attempts, progress = e.progress,
        finished_at = now()
    FROM ended e JOIN input i ON i.job_id = e.job_id
    WHERE j.job_id = e.job_id
), freed AS (
    DELETE FROM ratchet_business_key b USING ended e WHERE b.job_id = e.job_id
), applied AS (
    SELECT job_id FROM ended UNION ALL SELECT job_id FROM again
), history AS (
    INSERT INTO ratchet_execution (execution_id, job_id, attempt, node_id, status, started_at,
        finished_at, duration_ms, queue_wait_ms, error, traceback, queue)
    SELECT i.execution_id, i.job_id, i.attempt, :node,
        CASE WHEN i.outcome = '{Outcome.SUCCEEDED}' THEN 'SUCCEEDED' ELSE 'FAILED' END,
        to_timestamp(i.started_at), to_timestamp(i.started_at + i.duration_ms / 1000),
        i.duration_ms, i.queue_wait_ms, i.error, i.traceback, i.queue
    FROM input i JOIN applied a ON a.job_id = i.job_id
    WHERE i.outcome <> '{Outcome.RELEASE}' AND i.started_at IS NOT NULL
), lines AS (
    INSERT INTO ratchet_job_log (job_id, attempt, logged_at, level, message)
    SELECT l.job_id, l.attempt, to_timestamp(l.logged_at), l.level, l.message
    FROM json_to_recordset(CAST(:logs AS json))
        AS l(job_id uuid, attempt int, logged_at float8, level text, message text)
    JOIN applied a ON a.job_id = l.job_id
), alerts AS (
    INSERT INTO ratchet_dlq_alert (alert_id, job_id, task, error_hash, error, hour,
        occurrences, created_at, last_seen_at)
    SELECT i.alert_id, i.job_id, i.task, i.error_hash, coalesce(i.error, ''),
        date_trunc('hour', now()), 1, now(), now()
    FROM input i JOIN ended e ON e.job_id = i.job_id
    WHERE i.outcome = '{Outcome.FAILED}'
    ON CONFLICT (job_id, error_hash, hour)
    DO UPDATE SET occurrences = ratchet_dlq_alert.occurrences + 1,
                  last_seen_at = excluded.last_seen_at
)
SELECT job_id FROM applied
"""
COMPLETE_STMT = sa.text(COMPLETE)


def complete_params(node_id: str, items: Sequence[Finished]) -> dict[str, Any]:
    """``COMPLETE``'s parameters: the node, the batch and its log lines as JSON, and the ids
    of the jobs that end and of those that go back to PENDING."""
    rows = [_row(item) for item in items]
    ending = [
        row["job_id"] for row, item in zip(rows, items, strict=True) if item.outcome in _ENDING
    ]
    again = [
        row["job_id"] for row, item in zip(rows, items, strict=True) if item.outcome not in _ENDING
    ]
    return {
        "node": node_id,
        "batch": json.dumps(rows),
        # Array literals built by hand: a UUID's text form needs no quoting.
        "ended_ids": "{" + ",".join(ending) + "}",
        "again_ids": "{" + ",".join(again) + "}",
        "logs": json.dumps(
            [
                {
                    "job_id": str(item.job_id),
                    "attempt": item.attempt,
                    "logged_at": line.logged_at.timestamp(),
                    "level": line.level,
                    "message": line.message,
                }
                for item in items
                for line in item.logs
            ]
        ),
    }


def _row(item: Finished) -> dict[str, Any]:
    row: dict[str, Any] = {
        "job_id": str(item.job_id),
        "outcome": str(item.outcome),
        "delay": item.delay,
        "execution_id": str(uuid7()),
        "attempt": item.attempt,
        "task": item.task,
        "queue": item.queue,
    }
    if item.started_at is not None:
        row["started_at"] = item.started_at.timestamp()
        row["duration_ms"] = item.duration_ms
        row["queue_wait_ms"] = item.queue_wait_ms
    if item.result is not None:
        row["result"] = item.result
    if item.error is not None:
        row["error"] = item.error
        row["traceback"] = item.traceback
    if item.outcome == Outcome.FAILED:
        row["fingerprint"] = failure_fingerprint(JobStatus.FAILED, item.error)
        row["error_hash"] = error_hash(item.task, item.error)
        row["alert_id"] = str(uuid7())
    return row
