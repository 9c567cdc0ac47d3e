"""The console's workflow pages: the list of workflow roots, and a root's timeline.

A *workflow* here is a chain or a tree of branches: its *root* is the job every other step
hangs from (no parent of its own, not a batch's parent: a batch has its own pages), and its
*steps* are the root and every job below it in ``ratchet_workflow_condition``. Bounded like the
other lists (:mod:`.batches`):

- the roots are found walking the ``parent_id`` index of ``ratchet_workflow_condition``, newest
  parent first, a *window* of at most :data:`ROOT_WINDOW` condition rows per page (a step that
  is itself a parent is read there and left out): a page may come back short, with a cursor
  that carries on after the window;
- a page's steps are counted in one grouped statement for all its roots (a recursive walk down
  the conditions, at most :data:`~.batches.MAX_DEPTH` levels), never one query per root;
- a root's timeline shows at most :data:`~.batches.MAX_NODES` steps, each with its first
  attempt's start (one grouped read of their executions).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from flask_ratchet.flows import Decision, JobType
from flask_ratchet.paging import Page, cursor_id
from flask_ratchet.paging import cursor as cursor_of
from flask_ratchet.payload import Unreadable
from flask_ratchet.schema import execution, job, job_queue, workflow_condition
from flask_ratchet.states import JobStatus

from .batches import MAX_DEPTH, MAX_NODES
from .jobs import live_or_cold

#: The workflow list looks at this many condition rows (newest parent first) per page at most.
ROOT_WINDOW = 10_000
#: A workflow's state, as the list and a root's page show it.
RUNNING, COMPLETE, FAILURES = "running", "complete", "complete with failures"


@dataclass(frozen=True, slots=True)
class WorkflowRow:
    """One workflow root with its steps counted: ``ended`` of ``steps`` have ended, ``failed``
    of them failed, or were canceled otherwise than as a branch not taken (``skipped``)."""

    id: uuid.UUID
    task: str
    status: JobStatus | Unreadable
    created_at: datetime
    steps: int
    ended: int
    failed: int
    skipped: int
    #: When the last step ended, once every step has.
    finished_at: datetime | None

    @property
    def state(self) -> str:
        """running (a step has not ended), complete, or complete with failures."""
        if self.ended < self.steps:
            return RUNNING
        return FAILURES if self.failed else COMPLETE


@dataclass(frozen=True, slots=True)
class Step:
    """One step of a root's timeline: when its first attempt started and when it ended."""

    id: uuid.UUID
    task: str
    status: JobStatus | Unreadable
    depth: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


@dataclass(frozen=True, slots=True)
class Timeline:
    """A root's steps in the order they started (those that never ran last), on one time axis
    from the root's creation to the last end (or ``now``)."""

    steps: list[Step]
    start: datetime
    end: datetime
    #: More steps than :data:`~.batches.MAX_NODES`, or deeper than :data:`~.batches.MAX_DEPTH`.
    truncated: bool


def _is_root() -> sa.ColumnElement[bool]:
    return sa.and_(job.c.depends_on.is_(None), job.c.job_type == JobType.SINGLE)


def list_workflows(conn: Connection, limit: int, cursor: str | None = None) -> Page[WorkflowRow]:
    """One page of workflow roots, newest first, each with its steps counted.

    :raises ValueError: if ``cursor`` was not made by this function.
    """
    after = cursor_id(cursor, "w") if cursor else None
    walk = sa.select(workflow_condition.c.parent_id.label("id")).order_by(
        workflow_condition.c.parent_id.desc()
    )
    if after is not None:
        walk = walk.where(workflow_condition.c.parent_id < after)
    seen = walk.limit(ROOT_WINDOW).subquery()
    roots = (
        conn.execute(
            sa.select(job.c.job_id)
            .select_from(seen.join(job, job.c.job_id == seen.c.id))
            .where(_is_root())
            .distinct()
            .order_by(job.c.job_id.desc())
            .limit(limit + 1)
        )
        .scalars()
        .all()
    )
    found = _counted(conn, list(roots[:limit]))
    rows = [found[i] for i in roots[:limit] if i in found]
    if len(roots) > limit:
        return Page(rows, cursor_of("w", roots[limit - 1]))
    ends = conn.execute(walk.offset(ROOT_WINDOW - 1).limit(2)).scalars().all()
    if len(ends) < 2:  # the window reached the end of the conditions
        return Page(rows, None)
    return Page(rows, cursor_of("w", ends[0]), partial=True)


def _steps(roots: list[uuid.UUID]) -> Any:
    """The steps under each of ``roots`` (the roots included, at depth 0): a recursive walk
    down the conditions, :data:`~.batches.MAX_DEPTH` levels at most."""
    # An integer written into the SQL: a bound 0 could be typed differently from depth + 1.
    steps = (
        sa.select(
            job.c.job_id.label("root"),
            job.c.job_id.label("id"),
            sa.literal_column("0").label("depth"),
        )
        .where(job.c.job_id.in_(roots))
        .cte("steps", recursive=True)
    )
    return steps.union_all(
        sa.select(steps.c.root, workflow_condition.c.job_id, steps.c.depth + 1).where(
            workflow_condition.c.parent_id == steps.c.id, steps.c.depth < MAX_DEPTH
        )
    )


def _counted(conn: Connection, roots: list[uuid.UUID]) -> dict[uuid.UUID, WorkflowRow]:
    """Each root with its steps counted: one grouped statement for them all."""
    if not roots:
        return {}
    steps = _steps(roots)
    ended = job_queue.c.job_id.is_(None)
    canceled = job.c.terminal_status == JobStatus.CANCELED
    skipped = ended & canceled & (workflow_condition.c.decision == Decision.SKIPPED)
    failed = ended & (job.c.terminal_status != JobStatus.SUCCEEDED) & ~skipped
    is_root = steps.c.depth == 0
    counts = conn.execute(
        sa.select(
            steps.c.root,
            sa.func.count().label("steps"),
            sa.func.count(sa.case((ended, 1))).label("ended"),
            sa.func.count(sa.case((failed, 1))).label("failed"),
            sa.func.count(sa.case((skipped, 1))).label("skipped"),
            sa.func.max(job.c.finished_at).label("finished_at"),
            # The root's own columns, picked out of its group (depth 0 is the root alone).
            sa.func.max(sa.case((is_root, job.c.task))).label("task"),
            sa.func.max(sa.case((is_root, job.c.created_at))).label("created_at"),
            sa.func.max(sa.case((is_root, job.c.terminal_status))).label("terminal_status"),
            sa.func.max(sa.case((is_root, job_queue.c.status))).label("live_status"),
        )
        .select_from(
            steps.join(job, job.c.job_id == steps.c.id)
            .outerjoin(job_queue, job_queue.c.job_id == steps.c.id)
            .outerjoin(workflow_condition, workflow_condition.c.job_id == steps.c.id)
        )
        .group_by(steps.c.root)
    ).all()
    return {r.root: _row(r) for r in counts if r.task is not None}


def _row(r: Any) -> WorkflowRow:
    done = r.ended >= r.steps
    return WorkflowRow(
        id=r.root,
        task=r.task,
        status=live_or_cold(r.live_status, r.terminal_status),
        created_at=r.created_at,
        steps=r.steps,
        ended=r.ended,
        failed=r.failed,
        skipped=r.skipped,
        finished_at=r.finished_at if done else None,
    )


def workflow_row(conn: Connection, root_id: uuid.UUID) -> WorkflowRow | None:
    """One root's counts, or None if it is no workflow root."""
    return _counted(conn, [root_id]).get(root_id)


def timeline(conn: Connection, root_id: uuid.UUID, now: datetime) -> Timeline | None:
    """The steps of the workflow ``root_id`` is the root of, for its page; None if it has
    none below it."""
    steps = _steps([root_id])
    first_run = (
        sa.select(
            execution.c.job_id,
            sa.func.min(execution.c.started_at).label("started_at"),
        )
        .where(execution.c.job_id.in_(sa.select(steps.c.id)))
        .group_by(execution.c.job_id)
        .subquery()
    )
    rows = conn.execute(
        sa.select(
            steps.c.id,
            steps.c.depth,
            job.c.task,
            job.c.created_at,
            job.c.finished_at,
            job.c.terminal_status,
            job_queue.c.status.label("live_status"),
            first_run.c.started_at,
        )
        .select_from(
            steps.join(job, job.c.job_id == steps.c.id)
            .outerjoin(job_queue, job_queue.c.job_id == steps.c.id)
            .outerjoin(first_run, first_run.c.job_id == steps.c.id)
        )
        .order_by(steps.c.depth, steps.c.id)
        .limit(MAX_NODES + 1)
    ).all()
    if len(rows) < 2:
        return None
    found = [
        Step(
            id=r.id,
            task=r.task,
            status=live_or_cold(r.live_status, r.terminal_status),
            depth=r.depth,
            created_at=r.created_at,
            started_at=r.started_at,
            # A live job's end is the one the page is drawn at (its bar grows to now).
            finished_at=r.finished_at if r.live_status is None else None,
        )
        for r in rows[:MAX_NODES]
    ]
    deep = any(s.depth >= MAX_DEPTH for s in found)
    ends = [s.finished_at for s in found if s.finished_at is not None]
    end = max(ends) if len(ends) == len(found) else max([now, *ends])
    found.sort(key=lambda s: (s.started_at is None, s.started_at or s.created_at, s.id.bytes))
    start = min(s.created_at for s in found)
    return Timeline(found, start, max(end, start), len(rows) > MAX_NODES or deep)
