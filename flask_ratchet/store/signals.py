"""Jobs that await a signal: written WAITING, made due by their signal, ended by its rejection
or by their timeout (see :mod:`flask_ratchet.states`).

A WAITING job's hot row holds its deadline in ``scheduled_time`` (the claim reads PENDING rows
only, so it is never claimed), and its cold row the key, the length of a wait and, once
delivered, the signal's payload. Every change is a guarded compare-and-swap on the hot row's
status: of two deliveries of one key, one changes the jobs and the other finds none waiting.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .. import facts
from ..facts import Event
from ..flows import NOT_YET
from ..schema import job, job_queue
from ..sealing import is_sealed
from ..states import Action, JobStatus, sources, target
from .dialect import Dialect
from .executions import dead_letter_alert
from .flows import Flows
from .terminal import finish
from .types import Ended, NewJob

_WAITING = sorted(sources(Action.SIGNAL))
#: Timed-out waits handled per maintenance pass, oldest deadline first.
TIMEOUT_BATCH = 500


@dataclass(slots=True)
class TimedOut:
    """What a timeout scan did: the jobs waiting again and those that failed for good."""

    waiting_again: list[uuid.UUID] = field(default_factory=list)
    failed: list[uuid.UUID] = field(default_factory=list)


class Signals:
    """WAITING jobs: parked at submission, signaled, rejected, timed out."""

    def __init__(self, dialect: Dialect, flows: Flows) -> None:
        self.dialect = dialect
        self.flows = flows

    def park(self, conn: Connection, waiting: Sequence[NewJob]) -> None:
        """The jobs just written that await a signal: their key and wait on the cold row, and
        PENDING → WAITING (AWAIT), due at the end of their first wait; in the transaction that
        wrote them, so no worker ever sees them PENDING. A chain or workflow step waits from
        its release instead (:meth:`park_released`): its signal counts only once it could run."""
        keyed = [new for new in waiting if new.signal is not None]
        if not keyed:
            return
        conn.execute(
            sa.update(job)
            .where(job.c.job_id == sa.bindparam("b_id"))
            .values(signal_key=sa.bindparam("b_key"), signal_timeout=sa.bindparam("b_wait")),
            [
                {"b_id": new.job_id, "b_key": new.signal[0], "b_wait": new.signal[1]}
                for new in keyed
                if new.signal is not None
            ],
        )
        now = self.dialect.now(conn)
        self._wait(
            conn,
            [
                (new.job_id, new.signal[0], now + timedelta(seconds=new.signal[1]))
                for new in keyed
                if new.signal is not None and not (new.run_at is not None and new.run_at >= NOT_YET)
            ],
        )

    def park_released(self, conn: Connection, job_id: uuid.UUID) -> None:
        """A dependent just released (due now): if it awaits a signal, it waits from now."""
        row = conn.execute(
            sa.select(job.c.signal_key, job.c.signal_timeout).where(
                job.c.job_id == job_id, job.c.signal_key.is_not(None)
            )
        ).first()
        if row is None or not isinstance(row.signal_timeout, int | float):
            return
        now = self.dialect.now(conn)
        self._wait(conn, [(job_id, row.signal_key, now + timedelta(seconds=row.signal_timeout))])

    def _wait(self, conn: Connection, waits: list[tuple[uuid.UUID, str, datetime]]) -> None:
        if not waits:
            return
        conn.execute(
            sa.update(job_queue)
            .where(
                job_queue.c.job_id == sa.bindparam("b_id"),
                # One comparison per source status: an expanding IN cannot run per row.
                sa.or_(*(job_queue.c.status == s for s in sorted(sources(Action.AWAIT)))),
            )
            .values(
                status=target(Action.AWAIT, JobStatus.PENDING),
                scheduled_time=sa.bindparam("b_due"),
            ),
            [{"b_id": job_id, "b_due": due} for job_id, _, due in waits],
        )
        facts.record(
            conn,
            [Event(facts.JOB_SIGNAL_WAITING, {"job_id": i, "key": key}) for i, key, _ in waits],
        )

    def waiting(
        self, conn: Connection, job_id: uuid.UUID | None, key: str | None
    ) -> list[uuid.UUID]:
        """The WAITING jobs with this id, or on this key, locked (until the transaction ends)."""
        stmt = sa.select(job_queue.c.job_id).where(job_queue.c.status.in_(_WAITING))
        if job_id is not None:
            stmt = stmt.where(job_queue.c.job_id == job_id)
        else:
            stmt = stmt.where(
                job_queue.c.job_id.in_(sa.select(job.c.job_id).where(job.c.signal_key == key))
            )
        return list(conn.execute(stmt.order_by(job_queue.c.job_id).with_for_update()).scalars())

    def sealed_among(self, conn: Connection, ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        """Which of these jobs are encrypted (their payload is sealed): their signal payload is
        sealed too."""
        rows = conn.execute(sa.select(job.c.job_id, job.c.payload).where(job.c.job_id.in_(ids)))
        return {r.job_id for r in rows if is_sealed(r.payload)}

    def signal(
        self,
        conn: Connection,
        ids: Sequence[uuid.UUID],
        payloads: dict[uuid.UUID, str | None],
        *,
        each_event: bool = True,
    ) -> list[uuid.UUID]:
        """WAITING → PENDING, due now, for these jobs, with their payloads; the ids it
        changed (a job no longer WAITING is left alone). ``each_event=False``: no
        ``job_signaled`` fact per job (a bulk delivery records one for all)."""
        if not ids:
            return []
        now = self.dialect.now_sql()
        done = [
            row[0]
            for row in self.dialect.updated(
                conn,
                sa.update(job_queue)
                .where(job_queue.c.job_id.in_(list(ids)), job_queue.c.status.in_(_WAITING))
                .values(
                    status=target(Action.SIGNAL, JobStatus.WAITING),
                    scheduled_time=now,
                    version=job_queue.c.version + 1,
                    updated_at=now,
                ),
                job_queue.c.job_id,
            )
        ]
        given = [{"b_id": i, "b_payload": payloads.get(i)} for i in done]
        if given:
            conn.execute(
                sa.update(job)
                .where(job.c.job_id == sa.bindparam("b_id"))
                .values(signal_payload=sa.bindparam("b_payload")),
                given,
            )
            facts.record(conn, [Event(facts.WAKE)])
            if each_event:
                keys = dict(
                    conn.execute(
                        sa.select(job.c.job_id, job.c.signal_key).where(job.c.job_id.in_(done))
                    ).all()
                )
                facts.record(
                    conn,
                    [Event(facts.JOB_SIGNALED, {"job_id": i, "key": keys.get(i)}) for i in done],
                )
        return done

    def reject(self, conn: Connection, ids: Sequence[uuid.UUID], reason: str) -> list[uuid.UUID]:
        """WAITING → FAILED for these jobs, without running them and without a retry, with
        ``reason`` as their error (a dead letter); the ids it ended."""
        return [i for i in ids if self._fail(conn, i, reason, spent=0)]

    def time_out(self, conn: Connection, now: datetime, limit: int = TIMEOUT_BATCH) -> TimedOut:
        """The waits whose deadline passed by ``now``: each counts as a failed attempt, and
        the job waits again while it has a retry left, else ends FAILED (a dead letter)."""
        q, j = job_queue.c, job.c
        due = conn.execute(
            sa.select(
                q.job_id, q.attempts, q.max_retries, q.version, j.signal_key, j.signal_timeout
            )
            .join(job, j.job_id == q.job_id)
            .where(q.status.in_(_WAITING), q.scheduled_time <= now)
            .order_by(q.scheduled_time)
            .limit(limit)
        ).all()
        out = TimedOut()
        for row in due:
            wait = row.signal_timeout if isinstance(row.signal_timeout, int | float) else 0.0
            error = f"signal {row.signal_key!r} not delivered within {wait:g} s"
            if row.attempts + 1 <= row.max_retries and wait > 0:
                again = conn.execute(
                    sa.update(job_queue)
                    .where(q.job_id == row.job_id, q.status.in_(_WAITING), q.version == row.version)
                    .values(
                        status=target(Action.WAIT_AGAIN, JobStatus.WAITING),
                        attempts=q.attempts + 1,
                        scheduled_time=now + timedelta(seconds=wait),
                        last_error=error,
                        version=q.version + 1,
                        updated_at=self.dialect.now_sql(),
                    )
                )
                if again.rowcount == 1:
                    out.waiting_again.append(row.job_id)
                    self._timed_out(conn, row.job_id, row.signal_key, final=False)
            elif self._fail(conn, row.job_id, error, spent=1):
                out.failed.append(row.job_id)
                self._timed_out(conn, row.job_id, row.signal_key, final=True)
        return out

    def _timed_out(self, conn: Connection, job_id: uuid.UUID, key: str, *, final: bool) -> None:
        data = {"job_id": job_id, "key": key, "final": final}
        facts.record(conn, [Event(facts.JOB_SIGNAL_TIMED_OUT, data)])

    def _fail(self, conn: Connection, job_id: uuid.UUID, error: str, *, spent: int) -> bool:
        """End one WAITING job FAILED (REJECT): the guarded delete of its hot row, then its
        cold row, its dead-letter alert and what its end sets off. ``spent``: attempts the
        end itself counts (a timeout is one)."""
        self.flows.batches.lock_of(conn, [job_id])  # the batch row first: the lock order
        gone = conn.execute(
            sa.delete(job_queue)
            .where(
                job_queue.c.job_id == job_id, job_queue.c.status.in_(sorted(sources(Action.REJECT)))
            )
            .returning(job_queue.c.attempts)
        ).first()
        if gone is None:
            return False
        status = target(Action.REJECT, JobStatus.WAITING)
        ended = finish(
            self.dialect, conn, job_id, status, attempts=gone.attempts + spent, error=error
        )
        task = conn.execute(sa.select(job.c.task).where(job.c.job_id == job_id)).scalar_one()
        dead_letter_alert(self.dialect, conn, job_id, task, error)
        if ended is not None:
            self.flows.ended(conn, [ended])
        return True


def signal_payload_of(conn: Connection, job_id: uuid.UUID) -> str | None:
    """The stored payload of a job's delivered signal (JSON, or sealed), or ``None``."""
    text: str | None = conn.execute(
        sa.select(job.c.signal_payload).where(job.c.job_id == job_id)
    ).scalar()
    return text


__all__ = ["Ended", "Signals", "TimedOut", "signal_payload_of"]
