"""PostgreSQL: a batch of outcomes in one statement (see :mod:`.execution` for the semantics).

Hot rows are deleted (terminal) or requeued (retry, release) only where ``status = RUNNING AND
picked_by = :node``; everything else (cold rows, freed keys, executions, log lines, DLQ alerts) is
written only for the jobs that fence let through.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from ..ids import uuid7
from ..states import Action, JobStatus, sources, target
from .execution import Finished, Outcome, error_hash

_RUNNING = next(iter(sources(Action.SUCCEED)))
_BACK = target(Action.RESCHEDULE, JobStatus.RUNNING)

COMPLETE = f"""
WITH input AS (
    SELECT * FROM unnest(
        CAST(:job_id AS uuid[]), CAST(:outcome AS text[]), CAST(:result AS text[]),
        CAST(:error AS text[]), CAST(:traceback AS text[]), CAST(:delay AS float8[]),
        CAST(:execution_id AS uuid[]), CAST(:attempt AS int[]),
        CAST(:started_at AS timestamptz[]), CAST(:duration_ms AS float8[]),
        CAST(:queue_wait_ms AS float8[]), CAST(:task AS text[]), CAST(:error_hash AS text[]),
        CAST(:alert_id AS uuid[])
    ) AS t(job_id, outcome, result, error, traceback, delay, execution_id, attempt, started_at,
           duration_ms, queue_wait_ms, task, error_hash, alert_id)
), ended AS (
    DELETE FROM ratchet_job_queue q USING input i
    WHERE q.job_id = i.job_id AND i.outcome IN ('{Outcome.SUCCEEDED}', '{Outcome.FAILED}')
      AND q.status = '{_RUNNING}' AND q.picked_by = :node
    RETURNING q.job_id, q.attempts, q.progress
), again AS (
    UPDATE ratchet_job_queue q
    SET status = '{_BACK}', scheduled_time = now() + make_interval(secs => i.delay),
        attempts = q.attempts - CASE WHEN i.outcome = '{Outcome.RELEASE}' THEN 1 ELSE 0 END,
        last_error = coalesce(i.error, q.last_error), picked_by = NULL, picked_at = NULL,
        version = q.version + 1, updated_at = now()
    FROM input i
    WHERE q.job_id = i.job_id AND i.outcome IN ('{Outcome.RETRY}', '{Outcome.RELEASE}')
      AND q.status = '{_RUNNING}' AND q.picked_by = :node
    RETURNING q.job_id
), cold AS (
    -- SUCCEEDED and FAILED are also the names of the statuses these outcomes lead to.
    UPDATE ratchet_job j
    SET terminal_status = i.outcome, result = i.result, terminal_error = i.error,
        attempts = e.attempts, progress = e.progress, finished_at = now()
    FROM ended e JOIN input i ON i.job_id = e.job_id
    WHERE j.job_id = e.job_id
), freed AS (
    DELETE FROM ratchet_business_key b USING ended e WHERE b.job_id = e.job_id
), applied AS (
    SELECT job_id FROM ended UNION ALL SELECT job_id FROM again
), history AS (
    INSERT INTO ratchet_execution (execution_id, job_id, attempt, node_id, status, started_at,
        finished_at, duration_ms, queue_wait_ms, error, traceback)
    SELECT i.execution_id, i.job_id, i.attempt, :node,
        CASE WHEN i.outcome = '{Outcome.SUCCEEDED}' THEN 'SUCCEEDED' ELSE 'FAILED' END,
        i.started_at, i.started_at + make_interval(secs => i.duration_ms / 1000),
        i.duration_ms, i.queue_wait_ms, i.error, i.traceback
    FROM input i JOIN applied a ON a.job_id = i.job_id
    WHERE i.outcome <> '{Outcome.RELEASE}' AND i.started_at IS NOT NULL
), lines AS (
    INSERT INTO ratchet_job_log (job_id, attempt, logged_at, level, message)
    SELECT l.job_id, l.attempt, l.logged_at, l.level, l.message
    FROM unnest(CAST(:log_job AS uuid[]), CAST(:log_attempt AS int[]),
                CAST(:log_at AS timestamptz[]), CAST(:log_level AS text[]),
                CAST(:log_message AS text[])) AS l(job_id, attempt, logged_at, level, message)
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
COMPLETE_STMT = sa.text(COMPLETE).columns(job_id=sa.Uuid())


def complete_params(node_id: str, items: Sequence[Finished]) -> dict[str, Any]:
    """The column arrays ``COMPLETE`` unnests."""
    lines = [(i.job_id, i.attempt, line) for i in items for line in i.logs]
    failed = [i.outcome == Outcome.FAILED for i in items]
    return {
        "node": node_id,
        "job_id": [i.job_id for i in items],
        "outcome": [str(i.outcome) for i in items],
        "result": [i.result for i in items],
        "error": [i.error for i in items],
        "traceback": [i.traceback for i in items],
        "delay": [float(i.delay) for i in items],
        "execution_id": [uuid7() for _ in items],
        "attempt": [i.attempt for i in items],
        "started_at": [i.started_at for i in items],
        "duration_ms": [i.duration_ms for i in items],
        "queue_wait_ms": [i.queue_wait_ms for i in items],
        "task": [i.task for i in items],
        "error_hash": [
            error_hash(i.task, i.error) if f else None for i, f in zip(items, failed, strict=True)
        ],
        "alert_id": [uuid7() if f else None for f in failed],
        "log_job": [job_id for job_id, _, _ in lines],
        "log_attempt": [attempt for _, attempt, _ in lines],
        "log_at": [line.logged_at for _, _, line in lines],
        "log_level": [line.level for _, _, line in lines],
        "log_message": [line.message for _, _, line in lines],
    }
