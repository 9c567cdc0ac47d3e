"""What workers write while and after running jobs: outcomes, executions, logs, DLQ alerts.

Every write is fenced by ``status = 'RUNNING' AND picked_by = :node``: a job that was recovered
by orphan recovery, canceled, or released elsewhere is no longer this node's, the write matches no
row, and nothing about it changes. :meth:`Executions.complete_many` reports which jobs it
actually changed so the worker knows which outcomes were discarded, and sets off what the end
of each linked job sets off (:meth:`~flask_ratchet.store.flows.Flows.ended`) in the same
transaction.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..columns import aware
from ..context import LogLine
from ..ids import uuid7
from ..refusals import dead_letter_reason, read_refusals, with_refusal, write_refusals
from ..schema import business_key, dlq_alert, execution, job_log, job_queue
from ..states import Action, JobStatus, sources, target
from .dialect import Dialect
from .flows import Flows
from .terminal import end_cold_rows
from .types import ClaimedJob, Ended, Evaluator, Finished, Outcome, Refused, no_predicates

#: The status each terminal outcome ends a job in.
_ENDS_IN = {Outcome.SUCCEEDED: JobStatus.SUCCEEDED, Outcome.FAILED: JobStatus.FAILED}


def error_hash(task: str, error: str | None) -> str:
    """The DLQ alert key: the same task failing with the same message is one alert an hour."""
    return hashlib.sha256(f"{task}\n{error or ''}".encode()).hexdigest()[:32]


class Executions:
    """Completion and everything recorded with it: executions, log lines, DLQ alerts, progress."""

    def __init__(self, dialect: Dialect, flows: Flows) -> None:
        self.dialect = dialect
        self.flows = flows

    def complete_many(
        self,
        conn: Connection,
        node_id: str,
        items: Sequence[Finished],
        evaluate: Evaluator = no_predicates,
        *,
        isolate: bool = False,
    ) -> set[uuid.UUID]:
        """Write outcomes of jobs ``node_id`` holds and set off what the end of the linked
        ones sets off (``evaluate``: the WHEN predicates' values; ``isolate``: see
        :meth:`~flask_ratchet.store.flows.Flows.ended`). Return the ids it actually changed."""
        if not items:
            return set()
        # Batch rows first, then job rows: the lock order every batch writer follows.
        self.flows.batches.lock(conn, [i.batch_id for i in items if i.batch_id is not None])
        applied = self.dialect.own_completion(conn, node_id, items)
        if applied is None:
            applied = self._complete(conn, node_id, items)
        ended = [
            Ended(
                i.job_id,
                _ENDS_IN[i.outcome],
                result=i.result,
                run_ms=i.duration_ms,
                wait_ms=i.queue_wait_ms,
                batch_id=i.batch_id,
            )
            for i in items
            if i.follow_up and i.outcome.terminal and i.job_id in applied
        ]
        self.flows.ended(conn, ended, evaluate, isolate=isolate)
        return applied

    def refuse(
        self, conn: Connection, node_id: str, claimed: ClaimedJob, reason: str, grace: float
    ) -> Refused:
        """Hand back a job ``node_id`` holds and cannot run because it does not know its task:
        PENDING again, its attempt not spent, the refusal recorded on its hot row. If the job
        was first refused ``grace`` seconds ago or more, nothing is written and the answer
        carries the reason to fail it for good with (through the normal completion)."""
        q = job_queue
        mine = (q.c.job_id == claimed.job_id, q.c.picked_by == node_id)
        (source,) = sources(Action.RELEASE)
        row = conn.execute(
            sa.select(q.c.refused_since, q.c.refused_by, self.dialect.now_sql()).where(
                *mine, q.c.status == source
            )
        ).first()
        if row is None:
            return Refused(handed_back=False)
        since, text, now = row
        now = aware(now)
        refusals = with_refusal(read_refusals(text), node_id, reason)
        if since is not None and (now - since).total_seconds() >= grace:
            why = dead_letter_reason(claimed.task, refusals, since, grace)
            return Refused(handed_back=False, dead_letter=why)
        # A first refusal in the future was not written by ratchet: the grace counts from now.
        first = since if since is not None and since <= now else now
        back = self.dialect.updated(
            conn,
            sa.update(q)
            .where(*mine, q.c.status == source)
            .values(
                status=target(Action.RELEASE, source),
                attempts=q.c.attempts - 1,
                picked_by=None,
                picked_at=None,
                refused_since=first,
                refused_by=write_refusals(refusals),
                version=q.c.version + 1,
                updated_at=self.dialect.now_sql(),
            ),
            q.c.job_id,
        )
        return Refused(handed_back=bool(back))

    def _complete(
        self, conn: Connection, node_id: str, items: Sequence[Finished]
    ) -> set[uuid.UUID]:
        """The shared SQL of :meth:`complete_many`: a statement per kind of write."""
        ended = self._end(conn, node_id, [i for i in items if i.outcome.terminal])
        again = self._requeue(conn, node_id, [i for i in items if not i.outcome.terminal])
        applied = set(ended) | again
        done = [i for i in items if i.job_id in applied]
        if ended:
            # One statement for the batch, not a round through the engine per job.
            end_cold_rows(
                self.dialect,
                conn,
                [
                    {
                        "b_job_id": item.job_id,
                        "b_status": target(item.outcome.action, JobStatus.RUNNING),
                        "b_result": item.result,
                        "b_error": item.error,
                        "b_attempts": ended[item.job_id][0],
                        "b_progress": ended[item.job_id][1],
                    }
                    for item in done
                    if item.job_id in ended
                ],
            )
            conn.execute(sa.delete(business_key).where(business_key.c.job_id.in_(list(ended))))
        self._record(conn, node_id, done)
        return applied

    def _end(
        self, conn: Connection, node_id: str, items: Sequence[Finished]
    ) -> dict[uuid.UUID, tuple[int, str | None]]:
        if not items:
            return {}
        rows = conn.execute(
            sa.delete(job_queue)
            .where(
                job_queue.c.job_id.in_([i.job_id for i in items]),
                job_queue.c.status.in_(sources(Action.SUCCEED) | sources(Action.FAIL)),
                job_queue.c.picked_by == node_id,
            )
            .returning(job_queue.c.job_id, job_queue.c.attempts, job_queue.c.progress)
        )
        return {r.job_id: (r.attempts, r.progress) for r in rows}

    def _requeue(self, conn: Connection, node_id: str, items: Sequence[Finished]) -> set[uuid.UUID]:
        applied: set[uuid.UUID] = set()
        for item in items:
            back = target(item.outcome.action, JobStatus.RUNNING)
            again = self.dialect.updated(
                conn,
                sa.update(job_queue)
                .where(
                    job_queue.c.job_id == item.job_id,
                    job_queue.c.status.in_(sources(item.outcome.action)),
                    job_queue.c.picked_by == node_id,
                )
                .values(
                    status=back,
                    scheduled_time=self.dialect.later_sql(item.delay),
                    # A release hands the attempt back: the job did not really run.
                    attempts=job_queue.c.attempts - (1 if item.outcome == Outcome.RELEASE else 0),
                    last_error=sa.func.coalesce(
                        sa.literal(item.error, sa.Text), job_queue.c.last_error
                    ),
                    picked_by=None,
                    picked_at=None,
                    # A worker that knew the task had it: refusals before it no longer count.
                    refused_since=None,
                    refused_by=None,
                    version=job_queue.c.version + 1,
                    updated_at=self.dialect.now_sql(),
                ),
                job_queue.c.job_id,
            )
            applied.update(row.job_id for row in again)
        return applied

    def _record(self, conn: Connection, node_id: str, done: Sequence[Finished]) -> None:
        """Executions, log lines and DLQ alerts of the outcomes that were applied."""
        runs = [i for i in done if i.execution_status and i.started_at is not None]
        if runs:
            conn.execute(
                sa.insert(execution),
                [
                    {
                        "execution_id": uuid7(),
                        "job_id": i.job_id,
                        "attempt": i.attempt,
                        "node_id": node_id,
                        "status": i.execution_status,
                        "started_at": i.started_at,
                        "finished_at": i.started_at + timedelta(milliseconds=i.duration_ms or 0)
                        if i.started_at
                        else None,
                        "duration_ms": i.duration_ms,
                        "queue_wait_ms": i.queue_wait_ms,
                        "error": i.error,
                        "traceback": i.traceback,
                        "queue": i.queue,
                    }
                    for i in runs
                ],
            )
        self.add_logs(conn, [(i.job_id, i.attempt, i.logs) for i in done])
        for item in done:
            if item.outcome == Outcome.FAILED:
                self._alert(conn, item)

    def add_logs(
        self, conn: Connection, attempts: Sequence[tuple[uuid.UUID, int, Sequence[LogLine]]]
    ) -> None:
        """Store log lines, each of a job's attempt: at the attempt's end with its outcome, and
        while it runs (the worker writes a running attempt's lines every few seconds)."""
        lines = [
            {
                "job_id": job_id,
                "attempt": attempt,
                "logged_at": line.logged_at,
                "level": line.level,
                "message": line.message,
            }
            for job_id, attempt, logged in attempts
            for line in logged
        ]
        if lines:
            conn.execute(sa.insert(job_log), lines)

    def _alert(self, conn: Connection, item: Finished) -> None:
        dead_letter_alert(self.dialect, conn, item.job_id, item.task, item.error)

    def logs(self, conn: Connection, job_id: uuid.UUID, limit: int) -> list[Any]:
        """See :func:`job_logs`."""
        return job_logs(conn, job_id, limit)

    def still_running(
        self, conn: Connection, node_id: str, job_ids: Sequence[uuid.UUID]
    ) -> set[uuid.UUID]:
        """Of ``job_ids``, those this node still holds RUNNING (the rest were canceled or taken)."""
        if not job_ids:
            return set()
        rows = conn.execute(
            sa.select(job_queue.c.job_id).where(
                job_queue.c.job_id.in_(list(job_ids)),
                job_queue.c.status == JobStatus.RUNNING,
                job_queue.c.picked_by == node_id,
            )
        )
        return set(rows.scalars())

    def mark_started(
        self, conn: Connection, node_id: str, starts: Sequence[tuple[uuid.UUID, datetime]]
    ) -> None:
        """Record when each of this node's attempts started (``(job_id, started_at)`` pairs),
        in one statement run for many rows. A job no longer this node's RUNNING one (ended,
        canceled, recovered) is left alone. The caller commits.
        """
        if not starts:
            return
        stmt = (
            sa.update(job_queue)
            .where(
                job_queue.c.job_id == sa.bindparam("b_job_id"),
                job_queue.c.status == JobStatus.RUNNING,
                job_queue.c.picked_by == node_id,
            )
            .values(started_at=sa.bindparam("b_started_at"))
        )
        rows = [{"b_job_id": job_id, "b_started_at": at} for job_id, at in starts]
        conn.execute(stmt, rows)

    def report_progress(
        self, conn: Connection, node_id: str, job_id: uuid.UUID, progress: str
    ) -> bool:
        """Store a running job's progress (JSON); False if the job is no longer this node's."""
        result = conn.execute(
            sa.update(job_queue)
            .where(
                job_queue.c.job_id == job_id,
                job_queue.c.status == JobStatus.RUNNING,
                job_queue.c.picked_by == node_id,
            )
            .values(progress=progress)
        )
        return bool(result.rowcount == 1)


def job_logs(conn: Connection, job_id: uuid.UUID, limit: int) -> list[Any]:
    """The first ``limit`` log lines of one job, oldest first, as stored (not masked)."""
    return list(
        conn.execute(
            sa.select(job_log)
            .where(job_log.c.job_id == job_id)
            # By attempt and time: a running attempt's lines are written every few seconds,
            # and a write of its last ones with the outcome may commit before the one before.
            .order_by(job_log.c.attempt, job_log.c.logged_at, job_log.c.log_id)
            .limit(limit)
        )
    )


def dead_letter_alert(
    dialect: Dialect, conn: Connection, job_id: uuid.UUID, task: str, error: str | None
) -> None:
    """Count a job failed for good in its dead-letter alert (one per job, error and hour)."""
    conn.execute(
        dialect.upsert(
            dlq_alert,
            ("job_id", "error_hash", "hour"),
            {
                "alert_id": uuid7(),
                "job_id": job_id,
                "task": task,
                "error_hash": error_hash(task, error),
                "error": error or "",
                "hour": dialect.hour_sql(),
                "occurrences": 1,
                "created_at": dialect.now_sql(),
                "last_seen_at": dialect.now_sql(),
            },
            lambda new: {
                "occurrences": dlq_alert.c.occurrences + 1,
                "last_seen_at": new.last_seen_at,
            },
        )
    )
