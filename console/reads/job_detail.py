"""One job's page beyond its :class:`~flask_ratchet.job.Job` snapshot: executions, log lines,
progress, neighbours, DLQ alerts (:func:`job_extras`), and its status history (:func:`job_history`).

The history is put together from what is already recorded; nothing is written for it, so the
hot path stays as it is. It is the job's submission,
each attempt's start and end (``ratchet_execution``), the operators' actions on it
(``ratchet_audit``: on the job alone, on selected jobs, or on a filter that changed it), the
decision that released or skipped it (``ratchet_workflow_condition``), and how it ended. Changes
made through the API outside the console (``ratchet.pause_job`` in an app, say) show only by
their effects.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from flask_ratchet import payload
from flask_ratchet.flows import Decision, waits_for_parent
from flask_ratchet.job import Job
from flask_ratchet.payload import Unreadable
from flask_ratchet.schema import audit, dlq_alert, execution, job, job_queue
from flask_ratchet.store.executions import job_logs

from .batches import WaitsOn
from .jobs import JOBS_WITH_HOT_ROW

#: Operators' actions read per job page, oldest first from the job's creation.
AUDIT_LIMIT = 200
_SAME_MOMENT = timedelta(seconds=5)


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One step of a job's life: when, the status it led to (if one), and what happened."""

    at: datetime
    status: str | None
    what: str
    detail: str | None = None


def job_history(
    conn: Connection, found: Job, executions: list[Any], waits_on: WaitsOn | None
) -> list[HistoryEntry]:
    """``found``'s history, oldest first (``executions`` as the job page already read them, and
    ``waits_on`` its condition, from :func:`~.console_flows.job_flow`)."""
    out = [HistoryEntry(found.created_at, "PENDING", "submitted")]
    if waits_for_parent(found.scheduled_at):
        out.append(HistoryEntry(found.created_at, None, "waiting for the job it depends on"))
    elif found.scheduled_at > found.created_at and not found.is_terminal:
        out.append(
            HistoryEntry(found.created_at, None, f"due at {found.scheduled_at:%Y-%m-%d %H:%M:%S}")
        )
    out += _decision(waits_on)
    for e in executions:
        out.append(HistoryEntry(e.started_at, "RUNNING", f"attempt {e.attempt} started", e.node_id))
        if e.finished_at is not None:
            out.append(
                HistoryEntry(
                    e.finished_at, e.status, f"attempt {e.attempt} {e.status.lower()}", e.error
                )
            )
    actions = _operator_actions(conn, found)
    out += actions
    if found.is_terminal and found.finished_at is not None:
        end = HistoryEntry(found.finished_at, str(found.status), f"ended {found.status}")
        # An operator's cancel is the end itself (its audit row may be stamped a moment later).
        if not any(a.status == end.status and abs(a.at - end.at) < _SAME_MOMENT for a in actions):
            out.append(end)
    # Stable: entries of the same instant keep the order they were added in.
    return sorted(out, key=lambda entry: entry.at)


def _decision(row: WaitsOn | None) -> list[HistoryEntry]:
    if row is None or row.decided_at is None:
        return []
    by_decision: dict[str | None, str] = {
        Decision.TRIGGERED: f"released: {row.kind} held",
        Decision.SKIPPED: f"skipped: {row.kind} did not hold",
        Decision.ERROR: "skipped: routing failed",
    }
    what = by_decision.get(row.decision, str(row.decision))
    return [HistoryEntry(row.decided_at, None, what, row.error)]


def _operator_actions(conn: Connection, found: Job) -> list[HistoryEntry]:
    text = str(found.id)
    rows = conn.execute(
        sa.select(audit)
        .where(
            audit.c.at >= found.created_at,
            audit.c.action.in_(("retry", "cancel", "pause", "resume")),
            sa.or_(
                sa.and_(audit.c.scope == "job", audit.c.target == text),
                # Selected jobs and filters list the ids as JSON text: a cheap pre-filter,
                # confirmed below.
                sa.and_(audit.c.scope.in_(("selected", "filter")), audit.c.target.contains(text)),
            ),
        )
        .order_by(audit.c.at)
        .limit(AUDIT_LIMIT)
    )
    out = []
    for row in rows:
        if row.scope == "job":
            done = row.changed > 0
            what = f"{row.action} by {row.actor}" + ("" if done else " (refused)")
        elif text in _ids(row.scope, row.target):
            # A filter action lists the jobs it changed; a selection, the jobs it was asked for.
            done = row.scope == "filter"
            what = f"{row.action} by {row.actor}, " + (
                "on a filter" if done else f"{row.changed} of {row.requested} selected jobs"
            )
        else:
            continue
        out.append(HistoryEntry(row.at, _AFTER.get(row.action) if done else None, what))
    return out


#: The status an operator's action leads to (resume: the one the job was paused from).
_AFTER = {"retry": "PENDING", "cancel": "CANCELED", "pause": "PAUSED"}


def _ids(scope: str, target: str) -> list[str]:
    try:
        data = json.loads(target)
    except (ValueError, RecursionError):
        return []
    ids = data.get("changed", []) if scope == "filter" and isinstance(data, dict) else data
    return [str(i) for i in ids] if isinstance(ids, list) else []


@dataclass(frozen=True, slots=True)
class JobExtras:
    """What the job page shows beyond :class:`~flask_ratchet.job.Job`."""

    executions: list[Any]
    logs: list[Any]
    logs_truncated: bool
    #: The last progress reported; :class:`~flask_ratchet.payload.Unreadable` if not a JSON object.
    progress: dict[str, Any] | Unreadable | None
    supersedes: list[uuid.UUID]
    dependents: list[uuid.UUID]
    alerts: list[Any]
    #: When the running attempt's thread took it (its hot row's ``started_at``; see
    #: :mod:`flask_ratchet.substates`): None while it waits for a thread, or when not running.
    started_at: datetime | None = None


def job_extras(conn: Connection, job_id: uuid.UUID, log_limit: int = 500) -> JobExtras:
    """Executions, log lines, progress, neighbours and DLQ alerts of one job."""
    executions = conn.execute(
        sa.select(execution)
        .where(execution.c.job_id == job_id)
        .order_by(execution.c.started_at, execution.c.attempt)
        .limit(200)
    ).all()
    logs = job_logs(conn, job_id, log_limit + 1)
    hot = conn.execute(
        sa.select(
            sa.func.coalesce(job_queue.c.progress, job.c.progress).label("progress"),
            job_queue.c.started_at,
        )
        .select_from(JOBS_WITH_HOT_ROW)
        .where(job.c.job_id == job_id)
    ).first()
    progress_text = None if hot is None else hot.progress
    supersedes = conn.execute(
        sa.select(job.c.job_id).where(job.c.superseded_by == job_id).limit(20)
    ).scalars()
    dependents = conn.execute(
        sa.select(job.c.job_id).where(job.c.depends_on == job_id).limit(20)
    ).scalars()
    alerts = conn.execute(
        sa.select(dlq_alert)
        .where(dlq_alert.c.job_id == job_id)
        .order_by(dlq_alert.c.hour.desc())
        .limit(50)
    ).all()
    progress = payload.read_stored("progress", progress_text, dict) if progress_text else None
    return JobExtras(
        executions=list(executions),
        logs=list(logs[:log_limit]),
        logs_truncated=len(logs) > log_limit,
        progress=progress,
        supersedes=list(supersedes),
        dependents=list(dependents),
        alerts=list(alerts),
        started_at=None if hot is None else hot.started_at,
    )
