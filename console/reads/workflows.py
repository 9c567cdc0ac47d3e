"""The console's workflow pages: the list of workflow roots, and a root's timeline.

A *workflow* here is a chain or a tree of branches: its *root* is the job every other step
hangs from (no parent of its own, not a batch's parent: a batch has its own pages), and its
*steps* are the root and every job below it in ``ratchet_workflow_condition``. Bounded like the
other lists (:mod:`.batches`):

- the roots are found walking the ``parent_id`` index of ``ratchet_workflow_condition``, newest
  parent first, a *window* of at most :data:`ROOT_WINDOW` condition rows per page (a step that
  is itself a parent is read there and left out): a page may come back short, with a cursor
  that carries on after the window;
- a page's steps are found by one recursive walk down the conditions for all its roots (at
  most :data:`~.batches.MAX_DEPTH` levels and :data:`MAX_COUNTED` steps), then read by primary
  key a chunk at a time, and counted: never one query per root;
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
#: The most steps a page of the list counts (the roots of a page and everything below them);
#: a page of workflows that have more counts this many of them.
MAX_COUNTED = 20_000
#: Steps read by primary key per statement.
FACTS_CHUNK = 1_000
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


def _walk(conn: Connection, roots: list[uuid.UUID], limit: int, ordered: bool = False) -> Any:
    """Up to ``limit`` steps under ``roots`` (the roots included, at depth 0), each as ``root,
    id, depth, decision``: a recursive walk down the conditions alone, :data:`~.batches.
    MAX_DEPTH` levels at most (in ``depth, id`` order if ``ordered``).

    What the pages show of each step is read afterwards by primary key (:func:`_facts`): no
    planner can tell how many rows a recursive walk makes, and joined to one, the jobs were
    read by scanning the whole table (PostgreSQL hashed all 106,000 jobs to count the steps of
    50 roots; read inside the walk, its cost estimate set off a JIT compilation of 0.5 s).
    """
    # An integer written into the SQL: a bound 0 could be typed differently from depth + 1.
    # A root has no decision: NULL, typed as the column the other levels read.
    steps = (
        sa.select(
            job.c.job_id.label("root"),
            job.c.job_id.label("id"),
            sa.literal_column("0").label("depth"),
            sa.cast(sa.null(), workflow_condition.c.decision.type).label("decision"),
        )
        .where(job.c.job_id.in_(roots))
        .cte("steps", recursive=True)
    )
    steps = steps.union_all(
        sa.select(
            steps.c.root,
            workflow_condition.c.job_id,
            steps.c.depth + 1,
            workflow_condition.c.decision,
        ).where(workflow_condition.c.parent_id == steps.c.id, steps.c.depth < MAX_DEPTH)
    )
    stmt = sa.select(steps.c.root, steps.c.id, steps.c.depth, steps.c.decision)
    if ordered:
        stmt = stmt.order_by(steps.c.depth, steps.c.id)
    return conn.execute(stmt.limit(limit)).all()


def _facts(conn: Connection, ids: list[uuid.UUID], runs: bool = False) -> dict[uuid.UUID, Any]:
    """Each step's job columns and hot row status (with ``runs``: its first attempt's start),
    by primary key, a chunk of ids a statement. A step deleted meanwhile is not there."""
    columns: list[Any] = [
        job.c.job_id,
        job.c.task,
        job.c.created_at,
        job.c.finished_at,
        job.c.terminal_status,
        job_queue.c.status.label("live_status"),
    ]
    if runs:  # on the executions' job_id index, a step at a time
        first = sa.select(sa.func.min(execution.c.started_at)).where(
            execution.c.job_id == job.c.job_id
        )
        columns.append(first.scalar_subquery().label("started_at"))
    found: dict[uuid.UUID, Any] = {}
    for start in range(0, len(ids), FACTS_CHUNK):
        part = ids[start : start + FACTS_CHUNK]
        rows = conn.execute(
            sa.select(*columns)
            .select_from(job.outerjoin(job_queue, job_queue.c.job_id == job.c.job_id))
            .where(job.c.job_id.in_(part))
        )
        found.update((r.job_id, r) for r in rows)
    return found


def _counted(conn: Connection, roots: list[uuid.UUID]) -> dict[uuid.UUID, WorkflowRow]:
    """Each root with its steps counted: the walk for all of them at once, then their steps'
    rows by primary key (never a query per root)."""
    if not roots:
        return {}
    walked = _walk(conn, roots, MAX_COUNTED)
    facts = _facts(conn, list({w.id for w in walked}))
    tally: dict[uuid.UUID, list[Any]] = {}
    for w in walked:
        f = facts.get(w.id)
        if f is None:
            continue  # deleted meanwhile
        t = tally.setdefault(w.root, [None, 0, 0, 0, 0, None])
        if w.depth == 0:
            t[0] = f
        t[1] += 1
        if f.live_status is not None:
            continue
        t[2] += 1
        if f.terminal_status == JobStatus.CANCELED and w.decision == Decision.SKIPPED:
            t[4] += 1  # a branch not taken, or a step after one that did not succeed
        elif f.terminal_status != JobStatus.SUCCEEDED:
            t[3] += 1
        if f.finished_at is not None and (t[5] is None or f.finished_at > t[5]):
            t[5] = f.finished_at
    return {
        root: WorkflowRow(
            id=root,
            task=t[0].task,
            status=live_or_cold(t[0].live_status, t[0].terminal_status),
            created_at=t[0].created_at,
            steps=t[1],
            ended=t[2],
            failed=t[3],
            skipped=t[4],
            finished_at=t[5] if t[2] >= t[1] else None,
        )
        for root, t in tally.items()
        if t[0] is not None
    }


def timeline(conn: Connection, root_id: uuid.UUID, now: datetime) -> Timeline | None:
    """The steps of the workflow ``root_id`` is the root of, for its page; None if it has
    none below it."""
    walked = _walk(conn, [root_id], MAX_NODES + 1, ordered=True)
    facts = _facts(conn, [w.id for w in walked[:MAX_NODES]], runs=True)
    found = [
        Step(
            id=w.id,
            task=f.task,
            status=live_or_cold(f.live_status, f.terminal_status),
            depth=w.depth,
            created_at=f.created_at,
            started_at=f.started_at,
            # A live job's end is the one the page is drawn at (its bar grows to now).
            finished_at=f.finished_at if f.live_status is None else None,
        )
        for w in walked[:MAX_NODES]
        if (f := facts.get(w.id)) is not None
    ]
    if len(found) < 2:
        return None
    deep = any(s.depth >= MAX_DEPTH for s in found)
    ends = [s.finished_at for s in found if s.finished_at is not None]
    end = max(ends) if len(ends) == len(found) else max([now, *ends])
    found.sort(key=lambda s: (s.started_at is None, s.started_at or s.created_at, s.id.bytes))
    start = min(s.created_at for s in found)
    return Timeline(found, start, max(end, start), len(walked) > MAX_NODES or deep)
