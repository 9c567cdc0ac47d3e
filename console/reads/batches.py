"""The console's batch and workflow pages, in SQLAlchemy Core for both dialects.

Bounded like the job lists (:mod:`.jobs`), so a page costs the same with a thousand
jobs or a million:

- the batch list is keyset-paged on ``ratchet_batch``'s primary key (a batch's id is its parent
  job's UUIDv7 id, so newest first is id order);
- a batch's children are keyset-paged on the partial index ``(batch_id, job_id)``;
- a filter no index serves (a batch's state, a child's status) looks at a bounded *window* of the
  rows that index walks, at most :data:`BATCH_WINDOW` or :data:`CHILD_WINDOW` per page: a page
  may then come back short, with a cursor that carries on after the window;
- a flow tree walks at most :data:`MAX_UP` jobs up ``depends_on`` and :data:`MAX_NODES` jobs in
  :data:`MAX_DEPTH` levels down; counts come from the batch row, never from ``COUNT(*)``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.sql import Select

from flask_ratchet.flows import JobType, waits_for_parent
from flask_ratchet.job import BatchProgress
from flask_ratchet.paging import Page, cursor_id
from flask_ratchet.paging import cursor as cursor_of
from flask_ratchet.payload import Unreadable
from flask_ratchet.schema import batch, job, job_queue, workflow_condition
from flask_ratchet.states import JobStatus
from flask_ratchet.store.batches import progress_of

from .jobs import (
    JOBS_WITH_HOT_ROW,
    ROW_COLUMNS,
    JobRow,
    live_or_cold,
    to_row,
    where_status,
)

#: The batch list's state filter looks at this many batches (newest first) per page at most:
#: ``finished_at`` has no index, and batches are few next to jobs.
BATCH_WINDOW = 10_000
#: A batch's children filtered by status: this many children per page are looked at at most.
CHILD_WINDOW = 5_000
#: How far a flow tree walks up ``depends_on``, how deep and how wide it goes down, and how many
#: jobs it shows in all (the path to the job on screen is always shown, beyond these).
MAX_UP = 50
MAX_DEPTH = 50
MAX_WIDTH = 20
MAX_NODES = 200
#: A batch's follow-ups shown on its page.
MAX_FOLLOW_UPS = 50
BATCH_STATES = ("running", "finished")


@dataclass(frozen=True, slots=True)
class BatchRow:
    """A batch as the console shows it: its counts and metrics, and its parent job's status."""

    progress: BatchProgress
    status: JobStatus | Unreadable

    @property
    def id(self) -> uuid.UUID:
        return self.progress.batch_id

    @property
    def state(self) -> str:
        """running (a child has not ended: the batch has not settled), complete (every child
        succeeded), complete with failures (a child failed or was canceled), or canceled (its
        parent was: the children that had not ended were canceled with it). A parent whose
        status this version cannot read shows that status as stored: nothing is made up."""
        if not isinstance(self.status, JobStatus):
            return str(self.status)
        if self.status == JobStatus.CANCELED:
            return "canceled"
        if not self.progress.finished:
            return "running"
        return "complete with failures" if self.progress.failed else "complete"


class _HasId(Protocol):
    @property
    def id(self) -> uuid.UUID: ...


RowT = TypeVar("RowT", bound=_HasId)


@dataclass(frozen=True, slots=True)
class WaitsOn:
    """A dependent's condition on its parent, and what was decided when the parent ended.

    ``kind`` and ``decision`` are kept as the stored text (see :class:`~flask_ratchet.flows.
    Condition` and :class:`~flask_ratchet.flows.Decision`): a page must draw whatever it finds.
    """

    parent_id: uuid.UUID
    kind: str
    predicate: str | None
    threshold: float | None
    decision: str | None
    error: str | None
    decided_at: datetime | None


@dataclass(slots=True, eq=False)
class FlowNode:
    """One job of a flow tree, with the dependents shown under it."""

    id: uuid.UUID
    task: str
    status: JobStatus | Unreadable
    #: PENDING (or PAUSED) and due at NOT_YET: its parent has not ended yet.
    waiting: bool
    waits_on: WaitsOn | None
    #: The batch this job is the parent of.
    batch: BatchProgress | None
    children: list[FlowNode] = field(default_factory=list)
    #: More dependents than shown (the width bound).
    more: bool = False


@dataclass(frozen=True, slots=True)
class JobFlow:
    """What links one job to others, for its page."""

    job_type: str
    #: The batch the job is a child of, or the batch it is the parent of.
    batch: BatchRow | None
    waits_on: WaitsOn | None
    parent: FlowNode | None
    #: From the root of the job's flow down; None when the job has no parent and no dependents.
    tree: FlowNode | None
    #: The tree was cut at one of its bounds.
    truncated: bool = False

    @property
    def is_batch_parent(self) -> bool:
        return self.job_type == JobType.BATCH


# -- batches -----------------------------------------------------------------------------------

_BATCH_COLUMNS = (
    *batch.c,
    job_queue.c.status.label("live_status"),
    job.c.terminal_status,
)
_BATCHES = batch.join(job, job.c.job_id == batch.c.batch_id).outerjoin(
    job_queue, job_queue.c.job_id == batch.c.batch_id
)


def list_batches(
    conn: Connection, state: str | None, limit: int, cursor: str | None = None
) -> Page[BatchRow]:
    """One page of batches, newest first; ``state`` is "running", "finished" or None (any).

    :raises ValueError: if ``cursor`` was not made by this function.
    """
    after = cursor_id(cursor, "b") if cursor else None
    if state is None:
        stmt = sa.select(*_BATCH_COLUMNS).select_from(_BATCHES)
        if after is not None:
            stmt = stmt.where(batch.c.batch_id < after)
        raw = conn.execute(stmt.order_by(batch.c.batch_id.desc()).limit(limit + 1)).all()
        return _page(conn, raw, limit, _batch_row, "b")
    if state not in BATCH_STATES:
        raise ValueError(f"unknown batch state {state!r}")
    walk = sa.select(batch.c.batch_id.label("id")).order_by(batch.c.batch_id.desc())
    if after is not None:
        walk = walk.where(batch.c.batch_id < after)
    seen = walk.limit(BATCH_WINDOW).subquery()
    ended = batch.c.finished_at
    done = ended.is_not(None) if state == "finished" else ended.is_(None)
    raw = conn.execute(
        sa.select(*_BATCH_COLUMNS)
        .select_from(seen.join(_BATCHES, batch.c.batch_id == seen.c.id))
        .where(done)
        .order_by(batch.c.batch_id.desc())
        .limit(limit + 1)
    ).all()
    return _page(conn, raw, limit, _batch_row, "b", walk, BATCH_WINDOW)


def batch_row(conn: Connection, batch_id: uuid.UUID) -> BatchRow | None:
    """One batch, or None if there is none with this id."""
    found = conn.execute(
        sa.select(*_BATCH_COLUMNS).select_from(_BATCHES).where(batch.c.batch_id == batch_id)
    ).first()
    return None if found is None else _batch_row(found)


def follow_ups(conn: Connection, batch_id: uuid.UUID) -> tuple[list[FlowNode], bool]:
    """A batch's follow-ups (the dependents of its parent) in the order they were added, and
    whether there are more than :data:`MAX_FOLLOW_UPS`."""
    found = _dependents(conn, [batch_id], MAX_FOLLOW_UPS + 1)
    return found[:MAX_FOLLOW_UPS], len(found) > MAX_FOLLOW_UPS


def batch_children(
    conn: Connection,
    batch_id: uuid.UUID,
    status: JobStatus | None,
    limit: int,
    cursor: str | None = None,
) -> Page[JobRow]:
    """One page of a batch's children, newest first, in ``status`` if given.

    :raises ValueError: if ``cursor`` was not made by this function.
    """
    after = cursor_id(cursor, "c") if cursor else None
    if status is None:
        stmt = (
            sa.select(*ROW_COLUMNS).select_from(JOBS_WITH_HOT_ROW).where(job.c.batch_id == batch_id)
        )
        if after is not None:
            stmt = stmt.where(job.c.job_id < after)
        raw = conn.execute(stmt.order_by(job.c.job_id.desc()).limit(limit + 1)).all()
        return _page(conn, raw, limit, to_row, "c")
    # No index leads from a batch to its children in one status: walk the batch's children on
    # (batch_id, job_id), newest first, and filter a window of them.
    walk = (
        sa.select(job.c.job_id.label("id"))
        .where(job.c.batch_id == batch_id)
        .order_by(job.c.job_id.desc())
    )
    if after is not None:
        walk = walk.where(job.c.job_id < after)
    seen = walk.limit(CHILD_WINDOW).subquery()
    raw = conn.execute(
        where_status(
            sa.select(*ROW_COLUMNS).select_from(
                seen.join(job, job.c.job_id == seen.c.id).outerjoin(
                    job_queue, job_queue.c.job_id == job.c.job_id
                )
            ),
            status,
        )
        .order_by(job.c.job_id.desc())
        .limit(limit + 1)
    ).all()
    return _page(conn, raw, limit, to_row, "c", walk, CHILD_WINDOW)


def _page(
    conn: Connection,
    raw: Sequence[Any],
    limit: int,
    row: Callable[[Any], RowT],
    kind: str,
    walk: Select[Any] | None = None,
    window: int = 0,
) -> Page[RowT]:
    """A page of the first ``limit`` of ``raw`` (up to ``limit + 1`` rows read), each made by
    ``row``; its cursor (``<kind>.<id>``) follows the last row if there were more. A filtered
    page that came back short carries on after the ``window`` rows of ``walk`` it looked at."""
    rows = [row(r) for r in raw[:limit]]
    if len(raw) > limit:
        return Page(rows, cursor_of(kind, rows[-1].id))
    if walk is None:
        return Page(rows, None)
    last = _end_of_window(conn, walk, window)
    return Page(rows, None if last is None else cursor_of(kind, last), partial=last is not None)


def _end_of_window(conn: Connection, walk: Select[Any], size: int) -> uuid.UUID | None:
    """The last id of a window of ``walk`` (the next page starts after it), or None if the
    window reached the end of the list. Read off the same index walk, with the row after the
    window to tell a window that ends the list from one that is merely full."""
    found = conn.execute(walk.offset(size - 1).limit(2)).scalars().all()
    return found[0] if len(found) == 2 else None


def _batch_row(r: Any) -> BatchRow:
    return BatchRow(progress_of(r), live_or_cold(r.live_status, r.terminal_status))


# -- flows -------------------------------------------------------------------------------------

_NODE_COLUMNS = (
    job.c.job_id,
    job.c.task,
    job.c.terminal_status,
    job_queue.c.status.label("live_status"),
    job_queue.c.scheduled_time,
    workflow_condition.c.parent_id,
    workflow_condition.c.kind,
    workflow_condition.c.predicate,
    workflow_condition.c.threshold,
    workflow_condition.c.decision,
    workflow_condition.c.error.label("routing_error"),
    workflow_condition.c.decided_at,
    batch.c.batch_id,
    batch.c.name,
    batch.c.total,
    batch.c.succeeded,
    batch.c.failed,
    batch.c.child_run_ms,
    batch.c.child_wait_ms,
    batch.c.created_at,
    batch.c.finished_at,
)


def _nodes_from(linked: Any) -> Any:
    """``linked`` (the jobs, joined to their conditions) with hot rows and batch rows."""
    return linked.outerjoin(job_queue, job_queue.c.job_id == job.c.job_id).outerjoin(
        batch, batch.c.batch_id == job.c.job_id
    )


def _node(r: Any) -> FlowNode:
    status = live_or_cold(r.live_status, r.terminal_status)
    waits_on = None
    if r.parent_id is not None:
        waits_on = WaitsOn(
            parent_id=r.parent_id,
            kind=r.kind,
            predicate=r.predicate,
            threshold=r.threshold,
            decision=r.decision,
            error=r.routing_error,
            decided_at=r.decided_at,
        )
    return FlowNode(
        id=r.job_id,
        task=r.task,
        status=status,
        waiting=waits_for_parent(r.scheduled_time),
        waits_on=waits_on,
        batch=progress_of(r) if r.batch_id is not None else None,
    )


def _nodes(conn: Connection, ids: list[uuid.UUID]) -> dict[uuid.UUID, FlowNode]:
    linked = job.outerjoin(workflow_condition, workflow_condition.c.job_id == job.c.job_id)
    rows = conn.execute(
        sa.select(*_NODE_COLUMNS).select_from(_nodes_from(linked)).where(job.c.job_id.in_(ids))
    )
    return {r.job_id: _node(r) for r in rows}


def _dependents(conn: Connection, parents: list[uuid.UUID], limit: int) -> list[FlowNode]:
    """Up to ``limit`` dependents of ``parents``, in id order (the order they were added).

    No ORDER BY in the query: with one, a parent with a great many dependents would have them
    all read and sorted; without, the scan of the ``parent_id`` index stops at ``limit``.
    """
    linked = job.join(workflow_condition, workflow_condition.c.job_id == job.c.job_id)
    rows = conn.execute(
        sa.select(*_NODE_COLUMNS)
        .select_from(_nodes_from(linked))
        .where(workflow_condition.c.parent_id.in_(parents))
        .limit(limit)
    )
    return sorted((_node(r) for r in rows), key=lambda n: n.id.bytes)


def _path_up(conn: Connection, job_id: uuid.UUID) -> tuple[list[uuid.UUID], bool]:
    """The job, its parent, its parent's parent… up to :data:`MAX_UP` steps (one recursive
    query on the primary key); and whether the walk stopped before the root."""
    up = (
        # An integer written into the SQL: a bound 0 could be typed differently from depth + 1.
        sa.select(job.c.job_id, job.c.depends_on, sa.literal_column("0").label("depth"))
        .where(job.c.job_id == job_id)
        .cte("up", recursive=True)
    )
    parent = job.alias("parent")
    up = up.union_all(
        sa.select(parent.c.job_id, parent.c.depends_on, up.c.depth + 1).where(
            parent.c.job_id == up.c.depends_on, up.c.depth < MAX_UP
        )
    )
    rows = conn.execute(
        sa.select(up.c.job_id, up.c.depends_on, up.c.depth).order_by(up.c.depth)
    ).all()
    path: list[uuid.UUID] = []
    for r in rows:
        if r.job_id in path:  # a loop (never written by ratchet): stop where it closes
            return path, True
        path.append(r.job_id)
    # Stopped by the bound, not at a root (nor at a parent deleted since: nothing to draw).
    return path, bool(rows) and rows[-1].depth >= MAX_UP and rows[-1].depends_on is not None


def job_flow(conn: Connection, job_id: uuid.UUID) -> JobFlow | None:
    """The batch, parent, condition and flow tree of one job; None if it is in no flow."""
    me = conn.execute(
        sa.select(job.c.job_type, job.c.batch_id, job.c.depends_on, job.c.follow_up).where(
            job.c.job_id == job_id
        )
    ).first()
    if me is None:
        return None
    plain = me.job_type == JobType.SINGLE and me.depends_on is None and me.batch_id is None
    if plain and not me.follow_up:
        return None  # neither linked nor followed up: no query would find anything
    # A batch's parent: its batch row comes with its own node below.
    own = None
    if me.job_type != JobType.BATCH and me.batch_id is not None:
        own = batch_row(conn, me.batch_id)
    if me.job_type == JobType.BATCH_CHILD:
        # A child is linked to its batch only; the batch's page shows the rest.
        return None if own is None else JobFlow(me.job_type, own, None, None, None)
    path, truncated = _path_up(conn, job_id)
    on_path = _nodes(conn, path)
    if job_id not in on_path:
        return None  # deleted in between
    path = [i for i in path if i in on_path]  # a parent deleted since is not drawn
    tree, cut = _tree(conn, path, on_path)
    mine = on_path[job_id]
    if me.job_type == JobType.BATCH and mine.batch is not None:
        own = BatchRow(mine.batch, mine.status)
    parent = on_path.get(path[1]) if len(path) > 1 else None
    if tree is not None and not tree.children:
        tree = None  # a lone job: nothing to draw
    if own is None and tree is None and mine.waits_on is None:
        return None
    return JobFlow(me.job_type, own, mine.waits_on, parent, tree, truncated or cut)


def _tree(
    conn: Connection, path: list[uuid.UUID], on_path: dict[uuid.UUID, FlowNode]
) -> tuple[FlowNode | None, bool]:
    """The flow from its root (``path[-1]``) down, level by level, within the bounds; the path
    down to the job on screen (``path[0]``) is always in it. Return it and whether it was cut."""
    if not path:
        return None, False
    root = on_path[path[-1]]
    # Each job on the path, by its parent: the one dependent drawn whatever the bounds.
    next_on_path = {path[i + 1]: on_path[path[i]] for i in range(len(path) - 1)}
    seen = {root.id}
    level = [root]
    cut = False
    depth = 0
    while level:
        room = MAX_NODES - len(seen)
        parents = [n.id for n in level]
        if depth >= MAX_DEPTH or room <= 0:
            cut = cut or bool(_dependents(conn, parents, 1))
            break
        found = _dependents(conn, parents, room + 1)
        cut = cut or len(found) > room
        by_parent: dict[uuid.UUID, list[FlowNode]] = {}
        for node in found[:room]:
            if node.waits_on is None or node.id in seen:
                continue  # seen already: a loop, which ratchet never writes
            # The path's own objects, so that the job on screen is the one in the tree.
            by_parent.setdefault(node.waits_on.parent_id, []).append(on_path.get(node.id, node))
        below: list[FlowNode] = []
        for parent in level:
            kids = by_parent.get(parent.id, [])
            if len(kids) > MAX_WIDTH:
                parent.more, cut = True, True
                kids = kids[:MAX_WIDTH]
            on = next_on_path.get(parent.id)
            if on is not None and on not in kids:
                kids = sorted([*kids, on], key=lambda n: n.id.bytes)
            seen.update(k.id for k in kids)
            parent.children = kids
            below += kids
        level = below
        depth += 1
    # Whichever bound stopped the walk, the path down to the job on screen is drawn.
    for parent_id, child in next_on_path.items():
        parent = on_path[parent_id]
        if child not in parent.children:
            parent.children.append(child)
    return root, cut
