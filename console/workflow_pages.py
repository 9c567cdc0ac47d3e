"""The workflow list, and the timeline at the top of a workflow root's page (GET, read only).

The timeline is drawn server-side as one SVG bar per step (attributes only: the CSP forbids
style attributes), on one time axis from the root's creation to the last step's end, or to now
while a step is live.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from datetime import datetime

from flask import abort, render_template, request
from sqlalchemy.engine import Connection

from flask_ratchet import api
from flask_ratchet.runtime import Runtime, current

from . import filters, reads

#: The narrowest bar drawn (in hundredths of the axis), so that a step of a few milliseconds in
#: an hour-long workflow still shows.
MIN_WIDTH = 0.5


@dataclass(frozen=True, slots=True)
class Bar:
    """One step of a timeline: its place on the axis (``x`` and ``width`` in hundredths) and
    how long it ran (None: it never started)."""

    step: reads.workflows.Step
    x: float
    width: float
    seconds: float | None

    @property
    def css(self) -> str:
        """The step's status, as the class that colours its bar."""
        return str(self.step.status).lower()


@dataclass(frozen=True, slots=True)
class Drawn:
    """A root's timeline, ready to draw."""

    bars: list[Bar]
    start: datetime
    end: datetime
    truncated: bool


def workflows() -> str:
    """Workflow roots, newest first, each with its state and steps done of total."""
    size = filters.page_size(request.args.get("size"))
    cursor = filters.checked_cursor(request.args.get("cursor"))
    runtime = current()
    with runtime.connection() as conn:
        now = runtime.store.now(conn)
        try:
            page = reads.workflows.list_workflows(conn, size, cursor)
        except ValueError:
            abort(400, "bad cursor")
        if api.policy.active(runtime):  # the roots the operator may read
            shown = set(api.policy.permitted(runtime, conn, "read", [r.id for r in page.items]))
            page = replace(page, items=[r for r in page.items if r.id in shown])
    args = {"size": str(size)} if size != filters.DEFAULT_PAGE_SIZE else {}
    return render_template(
        "ratchet/workflows.html",
        page=page,
        args=args,
        cursor=cursor,
        live=any(r.state == reads.workflows.RUNNING for r in page.items),
        now=now,
        size=size,
        sizes=filters.PAGE_SIZES,
        window=reads.workflows.ROOT_WINDOW,
    )


def timeline_for(
    runtime: Runtime, conn: Connection, job_id: uuid.UUID, now: datetime
) -> Drawn | None:
    """The timeline of the workflow ``job_id`` is the root of (the steps the operator may
    read), or None."""
    found = reads.workflows.timeline(conn, job_id, now)
    if found is None:
        return None
    steps = found.steps
    if api.policy.active(runtime):
        shown = set(api.policy.permitted(runtime, conn, "read", [s.id for s in steps]))
        steps = [s for s in steps if s.id in shown]
    span = max((found.end - found.start).total_seconds(), 1e-3)
    bars = []
    for s in steps:
        if s.started_at is None:
            # Never started: a thin mark where it was written (or decided against).
            at = s.finished_at or s.created_at
            bars.append(Bar(s, _share(at, found.start, span), MIN_WIDTH, None))
            continue
        end = s.finished_at or now
        seconds = max((end - s.started_at).total_seconds(), 0.0)
        x = _share(s.started_at, found.start, span)
        width = min(max(seconds / span * 100, MIN_WIDTH), 100 - x)
        bars.append(Bar(s, x, round(max(width, 0.0), 2), seconds))
    return Drawn(bars, found.start, found.end, found.truncated)


def _share(at: datetime, start: datetime, span: float) -> float:
    """Where ``at`` lies on the axis, in hundredths (kept inside it)."""
    return round(min(max((at - start).total_seconds() / span * 100, 0.0), 100 - MIN_WIDTH), 2)
