"""The alarms every console page shows in its header: what needs an operator now.

- **No live worker** while at least one job is due: nothing will run it.
- **The oldest due job** has waited longer than ``RATCHET_ALARM_DUE_AFTER``.
- **Paused queues**: no worker claims their jobs until they are resumed.
- **Dead letters growing**: jobs that failed for good in the last
  ``RATCHET_ALARM_DEAD_LETTER_WINDOW``.

Read on every page view and every refresh of the header, so each read is an index probe or a
capped count, whatever the tables hold: the oldest due job is one probe of the claim index per
priority level; a live node one probe of ``last_heartbeat``; paused queues at most
:data:`MAX_PAUSED` + 1 rows of ``ratchet_queue``; recent dead letters a range of the
``(terminal_status, finished_at)`` index, counted up to :data:`DEAD_LETTER_CAP`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from flask_ratchet.columns import const
from flask_ratchet.schema import job, job_queue, node, queue_state
from flask_ratchet.states import JobStatus
from flask_ratchet.store import health

from .jobs import Count
from .nodes import live

#: The dead-letter alarm counts this many jobs at most (``1,000+`` past it).
DEAD_LETTER_CAP = 1_000
#: The paused-queue alarm names this many queues at most (by name), and says if there are more.
MAX_PAUSED = 10


@dataclass(frozen=True, slots=True)
class DueJob:
    """The oldest due PENDING job: which one, in which queue, waiting how long (seconds)."""

    job_id: uuid.UUID
    queue: str
    waited: float


@dataclass(frozen=True, slots=True)
class Alarms:
    """What the header shows. An alarm that does not hold is ``False``, ``None`` or empty."""

    #: At least one job is due and no node's heartbeat is recent enough for it to be live.
    no_live_worker: bool
    #: The oldest due job, when it has waited longer than :attr:`due_after`.
    overdue: DueJob | None
    #: Seconds a due job may wait before :attr:`overdue` is raised (``RATCHET_ALARM_DUE_AFTER``).
    due_after: float
    #: Seconds since its last heartbeat within which a node counts as live.
    live_after: float
    #: Paused queues, by name: at most :data:`MAX_PAUSED`.
    paused: list[str]
    #: More queues are paused than :attr:`paused` names.
    more_paused: bool
    #: Jobs that failed for good within :attr:`dead_letter_window` (capped at
    #: :data:`DEAD_LETTER_CAP`); zero raises nothing.
    dead_letters: Count
    #: Seconds :attr:`dead_letters` looks back (``RATCHET_ALARM_DEAD_LETTER_WINDOW``).
    dead_letter_window: float

    @property
    def raised(self) -> bool:
        """Whether any alarm holds."""
        return bool(self.no_live_worker or self.overdue or self.paused or self.dead_letters.value)


def alarms(
    conn: Connection,
    now: datetime,
    live_after: float,
    due_after: float,
    dead_letter_window: float,
) -> Alarms:
    """Every alarm as of ``now`` (the database's time).

    ``live_after``: seconds since its last heartbeat within which a node counts as live;
    ``due_after``: seconds the oldest due job may wait before it raises an alarm;
    ``dead_letter_window``: seconds back in which a job that failed for good raises one.
    """
    oldest = oldest_due(conn, now)
    paused, more_paused = paused_queues(conn)
    return Alarms(
        # A node is looked for only when a job is due: with none due, no worker is no alarm.
        no_live_worker=oldest is not None and not any_live_node(conn, now, live_after),
        overdue=oldest if oldest is not None and oldest.waited > due_after else None,
        due_after=due_after,
        live_after=live_after,
        paused=paused,
        more_paused=more_paused,
        dead_letters=recent_dead_letters(conn, now - timedelta(seconds=dead_letter_window)),
        dead_letter_window=dead_letter_window,
    )


def oldest_due(conn: Connection, now: datetime) -> DueJob | None:
    """The PENDING job due longest, with how long it has waited (one index probe per priority
    level: :func:`flask_ratchet.store.health.oldest_due`)."""
    row = health.oldest_due(conn, now)
    if row is None:
        return None
    return DueJob(row.job_id, row.queue, max(0.0, (now - row.scheduled_time).total_seconds()))


def any_live_node(conn: Connection, now: datetime, live_after: float) -> bool:
    """Whether some node is live (:func:`.nodes.live`; one index probe)."""
    found = conn.execute(sa.select(node.c.node_id).where(live(now, live_after)).limit(1)).first()
    return found is not None


def paused_queues(conn: Connection) -> tuple[list[str], bool]:
    """The paused queues by name, at most :data:`MAX_PAUSED`, and whether there are more."""
    names = list(
        conn.execute(
            sa.select(queue_state.c.name)
            .where(queue_state.c.paused)
            .order_by(queue_state.c.name)
            .limit(MAX_PAUSED + 1)
        ).scalars()
    )
    return names[:MAX_PAUSED], len(names) > MAX_PAUSED


def recent_dead_letters(conn: Connection, since: datetime) -> Count:
    """FAILED jobs with no hot row (the dead-letter page's) that ended at ``since`` or later,
    counted up to :data:`DEAD_LETTER_CAP`.

    A range of the partial index ``(terminal_status, finished_at)``, with a primary-key probe
    of the hot table per row: a job retried or paused since it failed is live again.
    """
    recent = (
        sa.select(sa.literal(1))
        .where(
            job.c.terminal_status == const(JobStatus.FAILED),
            job.c.finished_at >= since,
            ~sa.exists().where(job_queue.c.job_id == job.c.job_id),
        )
        .limit(DEAD_LETTER_CAP + 1)
        .subquery()
    )
    n = int(conn.execute(sa.select(sa.func.count()).select_from(recent)).scalar_one())
    return Count(n) if n <= DEAD_LETTER_CAP else Count(DEAD_LETTER_CAP, exact=False)
