"""What workers write while and after running jobs: outcomes, executions, logs, DLQ alerts.

Every write is fenced by ``status = 'RUNNING' AND picked_by = :node``: a job that was recovered
by orphan recovery, canceled, or released elsewhere is no longer this node's, the write matches no
row, and nothing about it changes. :meth:`ExecutionStore.complete_many` reports which jobs it
actually ended so the worker knows which outcomes were discarded.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..context import LogLine
from ..ids import uuid7
from ..schema import business_key, dlq_alert, execution, job, job_log, job_queue
from ..states import Action, JobStatus, sources, target
from .dialect import DialectHooks


class Outcome(StrEnum):
    """How an attempt ended, as the worker reports it."""

    SUCCEEDED = "SUCCEEDED"  # terminal
    FAILED = "FAILED"  # terminal: the dead-letter queue
    RETRY = "RETRY"  # failed, due again after ``delay``; the attempt counts
    RELEASE = (
        "RELEASE"  # not finished (drain, deferral): back to PENDING, the attempt does not count
    )

    @property
    def action(self) -> Action:
        return {
            Outcome.SUCCEEDED: Action.SUCCEED,
            Outcome.FAILED: Action.FAIL,
            Outcome.RETRY: Action.RESCHEDULE,
            Outcome.RELEASE: Action.RELEASE,
        }[self]

    @property
    def terminal(self) -> bool:
        return self in (Outcome.SUCCEEDED, Outcome.FAILED)


@dataclass(frozen=True, slots=True)
class Finished:
    """One attempt's outcome, ready to write."""

    job_id: uuid.UUID
    outcome: Outcome
    task: str
    attempt: int
    started_at: datetime | None = None
    duration_ms: float | None = None
    queue_wait_ms: float | None = None
    result: str | None = None
    error: str | None = None
    traceback: str | None = None
    delay: float = 0.0
    logs: Sequence[LogLine] = field(default_factory=tuple)
    #: The job's end sets off more work (see :mod:`.flow`); a batch child's batch.
    follow_up: bool = False
    batch_id: uuid.UUID | None = None

    @property
    def execution_status(self) -> str | None:
        """The execution row's status, or None when the attempt is not recorded (a release)."""
        if self.outcome == Outcome.RELEASE:
            return None
        return "SUCCEEDED" if self.outcome == Outcome.SUCCEEDED else "FAILED"


def error_hash(task: str, error: str | None) -> str:
    """The DLQ alert key: the same task failing with the same message is one alert an hour."""
    return hashlib.sha256(f"{task}\n{error or ''}".encode()).hexdigest()[:32]


#: A terminal outcome on the cold row (``b_*`` parameters, one set per job: executemany), once
#: the guarded delete of the hot row has let it through.
END_COLD_ROW = (
    sa.update(job)
    .where(job.c.job_id == sa.bindparam("b_job_id"))
    .values(
        terminal_status=sa.bindparam("b_status"),
        result=sa.bindparam("b_result"),
        terminal_error=sa.bindparam("b_error"),
        attempts=sa.bindparam("b_attempts"),
        progress=sa.bindparam("b_progress"),
    )
)


class ExecutionStore(DialectHooks):
    """Completion and everything recorded with it. Mixed into the dialect stores."""

    def complete_many(
        self, conn: Connection, node_id: str, items: Sequence[Finished]
    ) -> set[uuid.UUID]:
        """Write outcomes of jobs ``node_id`` holds; return the ids it actually changed."""
        ended = self._end(conn, node_id, [i for i in items if i.outcome.terminal])
        again = self._requeue(conn, node_id, [i for i in items if not i.outcome.terminal])
        applied = set(ended) | again
        done = [i for i in items if i.job_id in applied]
        if ended:
            # One statement for the batch (executemany), not a round through the engine per job.
            conn.execute(
                END_COLD_ROW.values(finished_at=self.now_sql()),
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
            row = conn.execute(
                sa.update(job_queue)
                .where(
                    job_queue.c.job_id == item.job_id,
                    job_queue.c.status.in_(sources(item.outcome.action)),
                    job_queue.c.picked_by == node_id,
                )
                .values(
                    status=back,
                    scheduled_time=self.later_sql(item.delay),
                    # A release hands the attempt back: the job did not really run.
                    attempts=job_queue.c.attempts - (1 if item.outcome == Outcome.RELEASE else 0),
                    last_error=sa.func.coalesce(
                        sa.literal(item.error, sa.Text), job_queue.c.last_error
                    ),
                    picked_by=None,
                    picked_at=None,
                    version=job_queue.c.version + 1,
                    updated_at=self.now_sql(),
                )
                .returning(job_queue.c.job_id)
            ).first()
            if row is not None:
                applied.add(row.job_id)
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
                    }
                    for i in runs
                ],
            )
        lines = [
            {
                "job_id": i.job_id,
                "attempt": i.attempt,
                "logged_at": line.logged_at,
                "level": line.level,
                "message": line.message,
            }
            for i in done
            for line in i.logs
        ]
        if lines:
            conn.execute(sa.insert(job_log), lines)
        for item in done:
            if item.outcome == Outcome.FAILED:
                self._alert(conn, item)

    def _alert(self, conn: Connection, item: Finished) -> None:
        stmt = self.dialect_insert(dlq_alert).values(
            alert_id=uuid7(),
            job_id=item.job_id,
            task=item.task,
            error_hash=error_hash(item.task, item.error),
            error=item.error or "",
            hour=self.hour_sql(),
            occurrences=1,
            created_at=self.now_sql(),
            last_seen_at=self.now_sql(),
        )
        conn.execute(
            stmt.on_conflict_do_update(
                index_elements=["job_id", "error_hash", "hour"],
                set_={
                    "occurrences": dlq_alert.c.occurrences + 1,
                    "last_seen_at": stmt.excluded.last_seen_at,
                },
            )
        )

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
