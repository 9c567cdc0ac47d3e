"""The console's pages. GET only, and reads only: nothing here writes to the database.

Live parts of a page are re-fetched by htmx with ``hx-select`` from the same URL, so every page
is one template that also works without JavaScript.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import datetime
from typing import Any

from flask import abort, g, render_template, request, url_for
from sqlalchemy.engine import Connection

from flask_ratchet import api
from flask_ratchet.flows import waits_for_parent
from flask_ratchet.job import Job
from flask_ratchet.paging import Page
from flask_ratchet.runtime import Runtime, current
from flask_ratchet.states import TERMINAL, JobStatus
from flask_ratchet.substates import MEANING, OF_STATUS, SubState, substate

from . import filters, offers, present, reads, replica, workflow_pages
from .htmx import refreshes_a_region
from .present import chart
from .reads import archive

#: A job list's "new jobs" banner counts no further than this.
NEW_CAP = 999
#: The last page number a paged list takes (a bound for the offset it reads from).
MAX_PAGE = 100_000


def current_runtime() -> Runtime:
    """The current app's ratchet runtime (``app.extensions["ratchet"]``)."""
    return current()


def live_after(runtime: Runtime) -> float:
    """Seconds since its last heartbeat within which a node counts as live: three missed
    heartbeats make it silent."""
    return 3 * runtime.config.heartbeat_interval


def overview() -> str:
    """Counts per status, executions over the chosen window (``?window=15m|1h|24h``, default
    the last hour), queue health, nodes and recent actions."""
    chosen = filters.one_of("window", request.args.get("window"), tuple(reads.overview.WINDOWS))
    window = reads.overview.WINDOWS[chosen] if chosen else reads.overview.DEFAULT_WINDOW
    runtime = current_runtime()
    with runtime.connection() as conn:
        now = runtime.store.now(conn)
        counts = reads.overview.status_counts(conn, runtime.store.dialect)
        subs = reads.overview.substate_counts(conn, now)
        buckets = reads.overview.throughput(conn, now, window)
        oldest = runtime.store.health.oldest_due_age(conn, now)
        p95 = runtime.store.health.p95_queue_wait(conn, now)
        nodes = reads.nodes.nodes(conn, now)
        audit = reads.overview.recent_audit(conn)
    return render_template(
        "ratchet/overview.html",
        counts=counts,
        subs=subs,
        meaning=MEANING,
        chart=chart(buckets, window),
        window=window,
        windows=reads.overview.WINDOWS,
        # The default window keeps the plain URL, so the refresh asks for what is on screen.
        window_arg=None if window == reads.overview.DEFAULT_WINDOW else window.key,
        oldest=oldest,
        p95=p95,
        nodes=[n for n in nodes if n.heartbeat_age <= live_after(runtime)],
        audit=audit,
        now=now,
    )


def alarms() -> str:
    """The header's alarms alone: what every page's alarm strip refreshes itself from."""
    return render_template(
        "ratchet/_alarms.html", alarms=read_alarms(), replica=replica.replica_note()
    )


def header_alarms() -> reads.alarms.Alarms | None:
    """The alarms of the page being drawn, for the layout's header; None for a request the
    guard has not let in (its error page reads nothing), and for the refresh of a live region
    (it swaps that region alone: the strip refreshes itself)."""
    if g.get("ratchet_role") is None or refreshes_a_region():
        return None
    return read_alarms()


def read_alarms() -> reads.alarms.Alarms:
    """Every alarm, as of the database's time."""
    runtime = current_runtime()
    with runtime.connection() as conn:
        now = runtime.store.now(conn)
        return reads.alarms.alarms(
            conn,
            now,
            live_after(runtime),
            runtime.config.alarm_due_after,
            runtime.config.alarm_dead_letter_window,
        )


def jobs() -> str:
    """The job list: filters, sort, keyset pages, and a banner counting newer jobs."""
    wanted = filters.parse(request.args)
    runtime = current_runtime()
    with runtime.connection() as conn:
        now = runtime.store.now(conn)  # sub-states are judged by the database's clock
        wanted = replace(wanted, query=replace(wanted.query, now=now))
        floor = reads.jobs.search_floor(conn, wanted.query)
        try:
            page = reads.jobs.list_jobs(conn, wanted.query, wanted.size, wanted.cursor, floor=floor)
        except ValueError:
            filters.refuse("cursor", "bad cursor")
        if api.policy.active(runtime):  # only the jobs the operator may see (a short page)
            shown = set(api.policy.permitted(runtime, conn, "read", [r.id for r in page.items]))
            page = replace(page, items=[r for r in page.items if r.id in shown])
        newest = _newest(conn, wanted, page, floor) if wanted.cursor is None else None
    return render_template(
        "ratchet/jobs.html",
        page=page,
        wanted=wanted,
        args=wanted.args,
        newest=newest,
        filtered=bool(filters.filter_args(wanted.args)),
        # Buttons for what applies to a job on screen; a filter's, to what its status allows.
        offered=offers.offered((row.status for row in page.items), run_now=True),
        offered_on_filter=offers.offered(
            sorted(wanted.query.statuses) if wanted.query.statuses else list(JobStatus)
        ),
        search_window=reads.jobs.SEARCH_WINDOW,
        searches_text=reads.jobs.searches_text(wanted.query),
        chosen=set(wanted.args.get("status", "").split(",")),
        can_search=filters.can_search_arguments(),
        statuses=list(JobStatus),
        substates=OF_STATUS,
        meaning=MEANING,
        now=now,
        sorts=reads.jobs.SORTS,
        sizes=filters.PAGE_SIZES,
    )


def _newest(
    conn: Connection,
    wanted: filters.ListRequest,
    page: Page[reads.jobs.JobRow],
    floor: datetime | None,
) -> uuid.UUID | None:
    """The newest matching job when the page is drawn: the "new jobs" banner counts from it.

    Newest first, that is the first row; in another order the page may not hold it, so it is
    looked up (one row off the end of the same index the list walks).
    """
    if not page.items:
        return None
    if wanted.query.sort == "newest":
        return page.items[0].id
    found = reads.jobs.matching_ids(conn, wanted.query, 1, floor=floor)
    return found[0] if found else max(r.id for r in page.items)


def jobs_new() -> str:
    """The banner of the job list: how many matching jobs arrived since the page was drawn."""
    wanted = filters.parse(request.args)
    newest = filters.job_id(request.args.get("newest", ""))
    if newest is None:
        abort(400, "newest must be a job id")
    runtime = current_runtime()
    with runtime.connection() as conn:
        n = reads.jobs.newer_than(conn, wanted.query, newest, NEW_CAP)
    return render_template("ratchet/_jobs_new.html", n=n, cap=NEW_CAP, args=wanted.args)


def _why_not_running(
    runtime: Runtime, conn: Connection, job: Job
) -> list[reads.job_why.Reason] | None:
    """For a PENDING job whose time has come (not one held for a parent), what keeps it from
    running; ``None`` for any other job."""
    now = runtime.store.now(conn)
    if job.status != JobStatus.PENDING or job.scheduled_at > now:
        return None
    if waits_for_parent(job.scheduled_at):
        return None
    task = runtime.registry.get(job.task)
    return reads.job_why.reasons(
        conn,
        runtime.store.dialect,
        runtime.store.queues,
        job_id=job.id,
        queue=job.queue,
        task=job.task,
        service=job.task if task is None else task.service_name,
        resource_name=job.resource,
        now=now,
        live_after=live_after(runtime),
    )


def _scoped_flow(
    runtime: Runtime, conn: Connection, flow: reads.batches.JobFlow | None
) -> reads.batches.JobFlow | None:
    """``flow`` without the jobs the operator may not read (:mod:`flask_ratchet.api.policy`):
    such a job and what hangs under it are left out."""
    if flow is None or not api.policy.active(runtime):
        return flow
    nodes: list[reads.batches.FlowNode] = [n for n in (flow.parent, flow.tree) if n is not None]
    ids: list[uuid.UUID] = [] if flow.batch is None else [flow.batch.id]
    while nodes:
        node = nodes.pop()
        ids.append(node.id)
        nodes.extend(node.children)
    shown = set(api.policy.permitted(runtime, conn, "read", ids))

    def pruned(node: reads.batches.FlowNode | None) -> reads.batches.FlowNode | None:
        if node is None or node.id not in shown:
            return None
        kept = [c for c in (pruned(child) for child in node.children) if c is not None]
        return replace(node, children=kept)

    batch = flow.batch if flow.batch is not None and flow.batch.id in shown else None
    return replace(flow, batch=batch, parent=pruned(flow.parent), tree=pruned(flow.tree))


def job_detail(job_id: str) -> str:
    """One job: facts, arguments, progress, executions, logs, alerts, neighbours, actions, and
    the batch, chain or workflow it is part of."""
    key = job_id_or_404(job_id)
    runtime = current_runtime()
    job = api.jobs.get(runtime, key, decrypt=False)  # the console holds no keys
    if job is None:
        abort(404, _missing_job(runtime, key))
    with runtime.connection() as conn:
        extras = reads.job_detail.job_extras(conn, key)
        flow = _scoped_flow(runtime, conn, reads.batches.job_flow(conn, key))
        waits_on = None if flow is None else flow.waits_on
        history = reads.job_detail.job_history(conn, job, extras.executions, waits_on)
        why = _why_not_running(runtime, conn, job)
        now = runtime.store.now(conn)
        paused = job.queue in runtime.store.queues.paused(conn)
        timeline = None
        root = flow is not None and flow.tree is not None and flow.tree.id == key
        if root and flow is not None and not flow.is_batch_parent:  # a workflow's root
            timeline = workflow_pages.timeline_for(runtime, conn, key, now)
    sub = substate(
        job.status,
        due_at=job.scheduled_at,
        attempts=job.attempts,
        now=now,
        queue_paused=paused,
        picked_at=job.picked_at,
        started_at=extras.started_at,
    )
    actions = offers.offered([job.status])
    if sub in (SubState.SCHEDULED, SubState.RETRYING):
        actions.insert(0, "run_now")
    return render_template(
        "ratchet/job.html",
        job=job,
        why=why,
        extras=extras,
        history=history,
        actions=actions,
        flow=flow,
        flow_live=_flow_live(flow),
        timeline=timeline,
        flow_limits={
            "nodes": reads.batches.MAX_NODES,
            "width": reads.batches.MAX_WIDTH,
            "depth": reads.batches.MAX_DEPTH,
            "up": reads.batches.MAX_UP,
        },
        not_due=waits_for_parent(job.scheduled_at),
        # A live region's refresh draws the live parts alone: not the arguments (up to
        # RATCHET_MAX_PAYLOAD_BYTES), nor the layout, every two seconds.
        region=refreshes_a_region(),
        whole={part: request.args.get(part) == "all" for part in ("args", "result")},
        sub=sub,
        sub_meaning=None if sub is None else MEANING[sub],
        now=now,
    )


def _missing_job(runtime: Runtime, key: uuid.UUID) -> str:
    """What a 404 for a job id says: archived (and when), or not found, naming the retention
    that archives ended jobs either way."""
    days = runtime.config.retention_days
    kept = f"RATCHET_RETENTION_DAYS ({days:g} day{'' if days == 1 else 's'})"
    with runtime.connection() as conn:
        archived = archive.archived_at(conn, key)
    if archived is not None:
        return (
            f"Job {key} was archived at {present.when(archived)} UTC: ended jobs are moved "
            f"out of the job tables {kept} after they end."
        )
    return f"Job {key} was not found; ended jobs are archived after {kept}."


def _flow_live(flow: reads.batches.JobFlow | None) -> bool:
    """Whether anything in a job's flow may still change: its batch runs, or a job is live."""
    if flow is None:
        return False
    if flow.batch is not None and not flow.batch.progress.finished:
        return True
    todo = [flow.tree] if flow.tree is not None else []
    while todo:
        node = todo.pop()
        if node.status not in TERMINAL:
            return True
        todo += node.children
    return False


def batches() -> str:
    """Batches, newest first: progress, counts and metrics; live while one shown is running."""
    wanted = filters.one_of("state", request.args.get("state"), reads.batches.BATCH_STATES)
    size = filters.page_size(request.args.get("size"))
    cursor = filters.checked_cursor(request.args.get("cursor"))
    runtime = current_runtime()
    with runtime.connection() as conn:
        now = runtime.store.now(conn)
        try:
            page = reads.batches.list_batches(conn, wanted, size, cursor)
        except ValueError:
            filters.refuse("cursor", "bad cursor")
        if api.policy.active(runtime):  # the batches whose parent the operator may read
            shown = set(api.policy.permitted(runtime, conn, "read", [r.id for r in page.items]))
            page = replace(page, items=[r for r in page.items if r.id in shown])
    return render_template(
        "ratchet/batches.html",
        page=page,
        args=page_args(state=wanted, size=size),
        cursor=cursor,
        live=any(not row.progress.finished for row in page.items),
        now=now,
        states=reads.batches.BATCH_STATES,
        size=size,
        sizes=filters.PAGE_SIZES,
        window=reads.batches.BATCH_WINDOW,
    )


def batch_detail(batch_id: str) -> str:
    """One batch: progress, metrics, follow-ups, and its children (keyset pages, by status)."""
    key = job_id_or_404(batch_id)
    wanted = filters.job_status(request.args.get("status"))
    size = filters.page_size(request.args.get("size"))
    cursor = filters.checked_cursor(request.args.get("cursor"))
    runtime = current_runtime()
    with runtime.connection() as conn:
        now = runtime.store.now(conn)
        found = reads.batches.batch_row(conn, key)
        if found is None or not api.policy.may(runtime, conn, "read", key):
            abort(404)
        follow_ups, more_follow_ups = reads.batches.follow_ups(conn, key)
        try:
            children = reads.batches.batch_children(
                conn, key, JobStatus(wanted) if wanted else None, size, cursor
            )
        except ValueError:
            filters.refuse("cursor", "bad cursor")
    return render_template(
        "ratchet/batch.html",
        b=found,
        follow_ups=follow_ups,
        more_follow_ups=more_follow_ups,
        children=children,
        args=page_args(status=wanted, size=size),
        cursor=cursor,
        live=not found.progress.finished,
        now=now,
        statuses=list(JobStatus),
        size=size,
        sizes=filters.PAGE_SIZES,
        window=reads.batches.CHILD_WINDOW,
    )


def page_args(size: int, **values: str | None) -> dict[str, str]:
    """A page's validated parameters, to rebuild its links: no empty ones, no default size."""
    args = {k: v for k, v in values.items() if v}
    if size != filters.DEFAULT_PAGE_SIZE:
        args["size"] = str(size)
    return args


def dead_letters() -> str:
    """FAILED jobs grouped by task and fingerprint, the largest groups first, a hundred groups
    a page (``?page=2``)."""
    number = filters.whole_number("page", request.args.get("page") or "1", 1, MAX_PAGE)
    per_page = reads.dead_letters.GROUPS_PER_PAGE
    start = (number - 1) * per_page
    runtime = current_runtime()
    with runtime.connection() as conn:
        if api.policy.active(runtime):  # the operator's jobs only (grouped in Python)

            def visible(ids: list[uuid.UUID]) -> set[uuid.UUID]:
                return set(api.policy.permitted(runtime, conn, "read", ids))

            found = reads.dead_letters.failure_groups_among(conn, visible, per_page, start)
        else:
            found = reads.dead_letters.failure_groups(conn, per_page, start)
    more = found.total > start + len(found.groups)
    return render_template(
        "ratchet/dlq.html",
        found=found,
        first=url_for("ratchet_console.dead_letters") if number > 1 else None,
        previous=(
            url_for("ratchet_console.dead_letters", page=number - 1 if number > 2 else None)
            if number > 1
            else None
        ),
        next=url_for("ratchet_console.dead_letters", page=number + 1) if more else None,
    )


def nodes() -> str:
    """Every worker node: heartbeat age, the queues it takes, the jobs it runs, version; once
    none is left, the last ones that stopped cleanly."""
    runtime = current_runtime()
    with runtime.connection() as conn:
        now = runtime.store.now(conn)
        rows = reads.nodes.nodes(conn, now)
        stopped = [] if rows else reads.nodes.last_stopped(conn)
    return render_template(
        "ratchet/nodes.html",
        nodes=rows,
        stopped=stopped,
        live_after=live_after(runtime),
        max_nodes=reads.nodes.MAX_NODES,
    )


def database_now() -> datetime:
    """The database's clock, read once per request: how long ago a time on the page was is
    counted from it, as every age the console shows (a web server's clock may differ)."""
    if "ratchet_now" not in g:
        runtime = current_runtime()
        with runtime.connection() as conn:
            g.ratchet_now = runtime.store.now(conn)
    now: datetime = g.ratchet_now
    return now


def ago(value: datetime) -> str:
    """``3 min ago``, ``in 4 min``: ``value`` from the database's clock (the ``ratchet_ago``
    filter of the ``_when.html`` macro)."""
    return present.relative(value, database_now())


def list_url(args: dict[str, str], **changes: str | None) -> str:
    """The job list's URL with ``args`` changed (``None`` removes a parameter)."""
    return page_url("ratchet_console.jobs", args, **changes)


def page_url(endpoint: str, args: dict[str, str], **changes: Any) -> str:
    """The URL of the console page ``endpoint`` with ``args`` changed (``None`` removes a
    parameter; path parameters such as ``batch_id`` go in ``changes``)."""
    merged: dict[str, Any] = {**args, **changes}
    return url_for(endpoint, **{k: v for k, v in merged.items() if v})


def job_id_or_404(text: str) -> uuid.UUID:
    """``text`` as a job id, or 404 (a path whose id is no job id names no job)."""
    key = filters.job_id(text)
    if key is None:
        abort(404)
    return key
