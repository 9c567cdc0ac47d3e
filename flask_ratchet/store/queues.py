"""Queues: which are paused, and what each holds.

A queue exists by its jobs' naming it (``ratchet_job.queue``, copied to the hot row for the
claim); ``ratchet_queue`` holds only the state an operator set. Pausing is read by the claim
itself (see :mod:`.postgres` and :mod:`.sqlite`), so it holds from the next claim on, on every
worker, with nothing cached anywhere.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement

from ..columns import const
from ..job import QueueSummary
from ..options import DEFAULT_QUEUE
from ..schema import job, job_queue, queue_state
from ..states import JobStatus
from .dialect import Dialect

_PAUSED = sa.select(queue_state.c.name).where(queue_state.c.paused)
#: How old a read of the paused queues a claim may go by (see :meth:`Queues.paused`).
PAUSED_MAX_AGE = 1.0
_QUEUE = sa.column("queue", sa.String())


def _skip_scan(source: Any, where: ColumnElement[bool]) -> sa.Select[Any]:
    """Every queue name among the rows of ``source`` where ``where`` holds, in order, in one
    statement: a recursive query whose each step is one probe of the index ``source`` is read
    through (the next name after the last), however many rows each queue holds."""
    first = sa.select(sa.func.min(_QUEUE).label("name")).select_from(source).where(where)
    names = first.cte("queue_names", recursive=True)
    after = (
        sa.select(sa.func.min(_QUEUE))
        .select_from(source)
        .where(where, _QUEUE > names.c.name)
        .scalar_subquery()
    )
    names = names.union_all(sa.select(after).where(names.c.name.is_not(None)))
    return sa.select(names.c.name).where(names.c.name.is_not(None))


def _names(
    conn: Connection,
    scan: sa.Select[Any],
    limit: int | None,
    containing: str | None = None,
    after: str | None = None,
) -> list[str]:
    if containing or after is not None:
        # Filtered as the scan yields them (in order), so that a limit stops it at the last
        # name needed.
        found = scan.subquery("found")
        where = []
        if containing:
            where.append(named_like(found.c.name, containing))
        if after is not None:
            where.append(found.c.name > after)
        scan = sa.select(found.c.name).where(*where)
    return list(conn.execute(scan if limit is None else scan.limit(limit)).scalars())


def named_like(name: sa.ColumnElement[str], containing: str) -> sa.ColumnElement[bool]:
    """``name`` holds ``containing``, whatever their case: an escaped LIKE (a ``%`` or ``_``
    in ``containing`` is itself), folded to lower case on every database alike (SQLite and
    MariaDB's LIKE would ignore case, PostgreSQL's would not)."""
    return sa.func.lower(name).contains(containing.lower(), autoescape=True)


@dataclass(frozen=True, slots=True)
class LiveFigures:
    """One queue's live jobs: PENDING (and of them due), RUNNING, PAUSED, and when the oldest
    due one was due (``None``: none is due)."""

    pending: int = 0
    due: int = 0
    running: int = 0
    paused_jobs: int = 0
    oldest_due: datetime | None = None


class Queues:
    """``store.queues``: pausing and resuming queues, and a summary of each."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self._lock = threading.Lock()
        self._paused: tuple[float, frozenset[str]] = (float("-inf"), frozenset())
        # Through the per-queue indexes by name: SQLite, without statistics, would rather walk
        # another index of the same rows end to end.
        self._live = _skip_scan(
            dialect.indexed(job_queue, "ix_ratchet_job_queue_queue_claim"),
            sa.column("status") == const(JobStatus.PENDING),
        )
        self._named = _skip_scan(
            dialect.indexed(job, "ix_ratchet_job_named_queue"),
            # Written out, so that the partial index's predicate is seen to hold.
            _QUEUE != sa.literal_column(f"'{DEFAULT_QUEUE}'"),
        )

    def set_paused(self, conn: Connection, name: str, paused: bool, by: str | None) -> bool:
        """Pause (or resume) queue ``name``; whether its state changed (False: it already was)."""
        now = self.dialect.now_sql()
        written = self.dialect.upserted(
            conn,
            queue_state,
            keys=("name",),
            values={"name": name, "paused": paused, "changed_at": now, "changed_by": by},
            update=lambda new: {
                "paused": new.paused,
                "changed_at": new.changed_at,
                "changed_by": new.changed_by,
            },
            where=lambda new: queue_state.c.paused != new.paused,
        )
        # The row written, not the row count: psycopg reports none for an upsert.
        changed = written is not None
        self.forget_paused()
        return changed

    def paused(self, conn: Connection, max_age: float = 0.0) -> set[str]:
        """The names of the paused queues; a read of at most ``max_age`` seconds ago will do.

        What a claim takes never depends on such a read (the claim reads the paused queues
        itself): only which indexes it walks. Every claim in the process (its worker's, the
        API's) shares the one read, so that claiming costs no second statement.
        """
        with self._lock:
            read_at, names = self._paused
        if max_age > 0 and time.monotonic() - read_at < max_age:
            return set(names)
        names = frozenset(conn.execute(_PAUSED).scalars())
        with self._lock:
            self._paused = (time.monotonic(), names)
        return set(names)

    def forget_paused(self) -> None:
        """Read the paused queues anew next time (a queue was paused or resumed)."""
        with self._lock:
            self._paused = (float("-inf"), frozenset())

    def live(
        self,
        conn: Connection,
        limit: int | None = None,
        containing: str | None = None,
        after: str | None = None,
    ) -> list[str]:
        """The queues that hold PENDING jobs, in order (the first ``limit``; only those whose
        name holds ``containing``, see :func:`named_like`, and comes after ``after``, if
        given): one statement, one probe of the per-queue claim index per queue (a skip scan),
        however many jobs each holds."""
        return _names(conn, self._live, limit, containing, after)

    def named(
        self,
        conn: Connection,
        limit: int | None = None,
        containing: str | None = None,
        after: str | None = None,
    ) -> list[str]:
        """The queues other than the default that any job names, live or ended (until
        retention archives it), in order (the first ``limit``; only those whose name holds
        ``containing`` and comes after ``after``, if given): a skip scan of the cold table's
        partial index of those queues, in one statement."""
        return _names(conn, self._named, limit, containing, after)

    def claimable(
        self,
        conn: Connection,
        named: Collection[str] | None,
    ) -> list[str] | None:
        """The queues a worker taking ``named`` (``None``: every queue) may claim from now:
        ``None`` if that is every queue, as nothing is paused; else the names, paused ones left
        out, so that no claim ever reads through a paused queue's backlog. Goes by a read of
        the paused queues at most :data:`PAUSED_MAX_AGE` old."""
        paused = self.paused(conn, PAUSED_MAX_AGE)
        if named is None:
            return [name for name in self.live(conn) if name not in paused] if paused else None
        return [name for name in named if name not in paused]

    def states(self, conn: Connection) -> dict[str, Any]:
        """Every queue ever paused or resumed, by name: ``paused``, ``changed_at`` and
        ``changed_by`` (who, if known)."""
        stmt = sa.select(
            queue_state.c.name,
            queue_state.c.paused,
            queue_state.c.changed_at,
            queue_state.c.changed_by,
        )
        return {r.name: r for r in conn.execute(stmt)}

    def live_figures(self, conn: Connection, now: datetime) -> dict[str, LiveFigures]:
        """Every queue that holds live jobs, with its :class:`LiveFigures`, in one grouped
        statement over the hot table (which holds only live jobs); ``now`` is the database's
        time."""
        q = job_queue
        pending = q.c.status == JobStatus.PENDING
        due = sa.and_(pending, q.c.scheduled_time <= now)
        rows = conn.execute(
            sa.select(
                q.c.queue,
                # CASE, not FILTER (WHERE …), which MariaDB lacks.
                sa.func.count(sa.case((pending, 1))),
                sa.func.count(sa.case((due, 1))),
                sa.func.count(sa.case((q.c.status == JobStatus.RUNNING, 1))),
                sa.func.count(sa.case((q.c.status == JobStatus.PAUSED, 1))),
                sa.func.min(sa.case((due, q.c.scheduled_time))),
            ).group_by(q.c.queue)
        )
        return {
            name: LiveFigures(n_pending, n_due, running, held, oldest)
            for name, n_pending, n_due, running, held, oldest in rows
        }

    def summaries(self, conn: Connection, now: datetime) -> list[QueueSummary]:
        """Every known queue, by name, as the console's queues page lists them: the default
        queue, every queue ever paused or resumed, and every queue a job names (live, or ended
        until retention archives it); each with its live jobs per status, how many are due,
        how long the oldest due one has waited, and whether it is paused. ``now`` is the
        database's time.

        Reads every live job's queue and status (:meth:`live_figures`); ended jobs are not
        counted, their queues are found by a skip scan (:meth:`named`).
        """
        states = self.states(conn)
        found: dict[str, QueueSummary] = {}
        for name, f in self.live_figures(conn, now).items():
            state = states.get(name)
            found[name] = QueueSummary(
                name=name,
                paused=bool(state and state.paused),
                pending=f.pending,
                due=f.due,
                running=f.running,
                paused_jobs=f.paused_jobs,
                oldest_due_wait=None
                if f.oldest_due is None
                else max(0.0, (now - f.oldest_due).total_seconds()),
            )
        for name in {DEFAULT_QUEUE, *states, *self.named(conn)}:
            if name not in found:
                state = states.get(name)
                found[name] = QueueSummary(name=name, paused=bool(state and state.paused))
        return [found[name] for name in sorted(found)]
