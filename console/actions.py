"""Retry, cancel, pause, resume, run now and delete: for one job, selected jobs, or a whole
filter; and pause, resume, run now and cancel for one recurring master.

One job goes through the library's own guarded operation
(:func:`flask_ratchet.api.jobs.change_each`: ``retry_job``, ``cancel_job``… and ``delete_job``,
which also keeps the lock order of batch writers), so an illegal transition changes nothing and
is reported as refused. Selected jobs and a filter's jobs are retried, canceled or deleted by the
library's bulk operation (:func:`flask_ratchet.api.bulk.change_listed`: the same guards, a chunk
of jobs per statement, one aggregate event; job by job if the database refuses the set, so
that only the job it refuses is refused); pausing and resuming go job by job. The changes and
their audit row are written in one transaction (the request's ``db.session``, or one of
ratchet's own database: ``Runtime.unit_of_work``) and committed together. :mod:`.security` has
already checked the role, the CSRF token and the origin before any of this runs.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import sqlalchemy as sa
from flask import abort, g, render_template, request, url_for
from sqlalchemy.engine import Connection
from werkzeug.wrappers import Response

from flask_ratchet.api import bulk, jobs, recurring
from flask_ratchet.runtime import Runtime
from flask_ratchet.states import JobStatus

from . import filters, offers, pages, reads
from .htmx import notice_or_page
from .pages import current_runtime, job_id_or_404
from .security import actor

#: The most jobs one action changes: a bulk action takes the newest this many that match.
BULK_CAP = 500

#: What each action may start from, to explain a refusal.
ALLOWED_FROM = {
    "retry": "FAILED",
    "cancel": "PENDING, PAUSED or RUNNING",
    "pause": "PENDING or FAILED",
    "resume": "PAUSED",
    "run_now": "PENDING and due later (scheduled, or retrying after a failure)",
    "delete": "SUCCEEDED, FAILED or CANCELED",
}
#: The statuses each action may start from (the pages offer these): a bulk action counts and
#: selects only these, so what the confirmation counts is what the action changes. Run now is
#: no status change: due later is the store's guard (Jobs.run_now), PENDING its status.
SOURCES = offers.SOURCES | {"run_now": frozenset({JobStatus.PENDING})}
PAST = {
    "retry": "retried",
    "cancel": "canceled",
    "pause": "paused",
    "resume": "resumed",
    "run_now": "made due now",
    "delete": "deleted",
}


@dataclass(slots=True)
class ActionResult:
    """What an action did: the jobs it changed and the ones it refused."""

    action: str
    changed: list[uuid.UUID] = field(default_factory=list)
    refused: list[uuid.UUID] = field(default_factory=list)

    @property
    def requested(self) -> int:
        return len(self.changed) + len(self.refused)


def _apply(
    action: str, ids: list[uuid.UUID], scope: str, target: Callable[[ActionResult], str]
) -> ActionResult:
    """Run ``action`` on each job and write the audit row, in the request's transaction.

    A job whose operation fails in the database (a concurrent change breaking a constraint,
    say) is counted as refused, without taking the other jobs' changes and the audit row down
    with it (see :func:`~flask_ratchet.api.jobs.change_each`).
    """
    runtime = current_runtime()
    listed = None
    if scope != "job" and action in bulk.OPERATIONS:
        # Set-based, a chunk at a time, with one aggregate event (jobs-bulk-canceled …).
        listed = bulk.change_listed(runtime, action, ids, {"console": scope})
    if listed is not None:
        done = set(listed)
        changed = [i for i in ids if i in done]
        refused = [i for i in ids if i not in done]
    else:  # one job, pause and resume, or a set the database refused: one job at a time
        changed, refused = jobs.change_each(runtime, action, ids)
    outcome = ActionResult(action, changed, refused)
    with runtime.connection() as conn:
        audit(conn, action, scope, target(outcome), outcome.requested, len(outcome.changed))
    return outcome


def audit(
    conn: Connection,
    action: str,
    scope: str,
    target: str,
    requested: int,
    changed: int,
    at: datetime | None = None,
) -> None:
    """One ``ratchet_audit`` row for this request's actor and role, stamped ``at`` (by default
    now, by the database's clock)."""
    store = current_runtime().store
    store.cluster.record_audit(
        conn,
        at=store.now(conn) if at is None else at,
        actor=actor(),
        role=str(g.ratchet_role),
        action=action,
        scope=scope,
        target=target,
        requested=requested,
        changed=changed,
    )


def _action_name(value: str | None) -> str:
    if value not in ALLOWED_FROM:
        abort(400, f"action must be one of {', '.join(ALLOWED_FROM)}")
    return value


def _answer(outcome: ActionResult, back: str, location: str | None = None) -> Response | str:
    """A notice for htmx (and an event that refreshes live parts), or a page without JS."""
    return notice_or_page(
        "ratchet/_notice.html",
        back,
        location=location,
        outcome=outcome,
        past=PAST[outcome.action],
        allowed_from=ALLOWED_FROM[outcome.action],
    )


def _back(default: str) -> str:
    """Where "back" leads: a console path from the form, never another site."""
    return _console_path(request.form.get("next", "")) or default


def _console_path(wanted: str) -> str | None:
    """``wanted`` if it is a path of this console, else ``None`` (never another site)."""
    root = url_for("ratchet_console.overview")
    if wanted.startswith(root) and not wanted.startswith("//") and "\\" not in wanted:
        return wanted
    return None


def one(job_id: str, action: str) -> Response | str:
    """POST …/jobs/<id>/<action>: act on one job."""
    name = _action_name(action)
    key = job_id_or_404(job_id)
    outcome = _apply(name, [key], "job", lambda _: str(key))
    default = url_for("ratchet_console.job", job_id=str(key))
    if name == "delete" and outcome.changed:
        # The page the action came from is gone: htmx goes to the list instead of refreshing
        # a job page that would now be a 404.
        jobs = url_for("ratchet_console.jobs")
        return _answer(outcome, jobs, location=jobs)
    return _answer(outcome, _back(default))


def selected() -> Response | str:
    """POST …/jobs/selected: act on the jobs ticked in the list."""
    name = _action_name(request.form.get("action"))
    raw = request.form.getlist("job_id")
    if not raw:
        abort(400, "select at least one job")
    if len(raw) > BULK_CAP:
        abort(400, f"at most {BULK_CAP} jobs at once")
    ids: list[uuid.UUID] = []
    for value in raw:
        key = filters.job_id(value)
        if key is None:
            abort(400, "job_id must be job ids")
        if key not in ids:
            ids.append(key)
    outcome = _apply(name, ids, "selected", lambda _: json.dumps([str(i) for i in ids]))
    return _answer(outcome, _back(url_for("ratchet_console.jobs")))


def _confirm_page(
    name: str,
    wanted: filters.ListRequest,
    grew_from: int | None = None,
    back: str | None = None,
) -> str:
    """The confirmation: how many jobs the action would change, and a snapshot of them.

    The form carries the newest matching id (``bound``; ids are UUIDv7, so later jobs have
    greater ids) and the count shown: the action then never reaches a job that arrived after
    this page, and asks again if more jobs came to match meanwhile. ``back``: the console page
    the action was asked from (the dead letters), where "back" and "cancel" lead.
    """
    runtime = current_runtime()
    among = SOURCES[name]
    with runtime.connection() as conn:
        floor = reads.jobs.search_floor(conn, wanted.query)
        n = reads.jobs.count_jobs(conn, wanted.query, BULK_CAP, among=among, floor=floor)
        newest = reads.jobs.matching_ids(conn, wanted.query, 1, among=among, floor=floor)
    return render_template(
        "ratchet/confirm.html",
        action=name,
        n=min(n, BULK_CAP),
        counted=n,
        bound=newest[0] if newest else None,
        more=n > BULK_CAP,
        cap=BULK_CAP,
        args=filters.filter_args(wanted.args),
        allowed_from=ALLOWED_FROM[name],
        past=PAST[name],
        grew_from=grew_from,
        back=back,
    )


def confirm_filter() -> str:
    """GET …/jobs/bulk: how many jobs an action on this filter would touch; asks to confirm."""
    name = _action_name(request.args.get("action"))
    back = _console_path(request.args.get("next", ""))
    return _confirm_page(name, filters.parse(request.args), back=back)


def on_filter() -> tuple[str, int] | Response | str:
    """POST …/jobs/bulk: act on the newest :data:`BULK_CAP` jobs matching the posted filter
    that existed when it was confirmed (``bound``), if no more match than were confirmed."""
    name = _action_name(request.form.get("action"))
    wanted = filters.parse(request.form)
    args = filters.filter_args(wanted.args)
    if not args:
        abort(400, "an action on every job needs at least one filter")
    bound = filters.job_id(request.form.get("bound", ""))
    if bound is None:
        abort(400, "bound must be the job id from the confirmation page")
    confirmed = filters.whole_number("count", request.form.get("count", ""), 0, filters.INT_MAX)
    runtime = current_runtime()
    among = SOURCES[name]
    with runtime.connection() as conn:
        floor = reads.jobs.search_floor(conn, wanted.query)
        n = reads.jobs.count_jobs(
            conn, wanted.query, BULK_CAP, among=among, upto=bound, floor=floor
        )
        if n > confirmed:
            # Jobs confirmed as not matching match now: the operator decides again.
            back = _console_path(request.form.get("next", ""))
            grew = min(confirmed, BULK_CAP)
            return _confirm_page(name, wanted, grew_from=grew, back=back), 409
        ids = reads.jobs.matching_ids(
            conn, wanted.query, BULK_CAP, among=among, upto=bound, floor=floor
        )

    def target(outcome: ActionResult) -> str:
        return json.dumps({"filter": args, "changed": [str(i) for i in outcome.changed]})

    outcome = _apply(name, ids, "filter", target)
    return _answer(outcome, _back(pages.list_url(args)))


# -- recurring masters ---------------------------------------------------------------------------

#: What each action on a recurring master may start from, to explain a refusal.
RECURRING_ALLOWED_FROM = {
    "pause": "ACTIVE or PAUSED",
    "resume": "PAUSED",
    "run": "ACTIVE or PAUSED",
    "cancel": "ACTIVE or PAUSED",
}
RECURRING_PAST = {
    "pause": "paused",
    "resume": "resumed",
    "run": "run now",
    "cancel": "canceled",
}


@dataclass(frozen=True, slots=True)
class RecurringActionResult:
    """What an action on one recurring master did."""

    action: str
    recurring_id: str
    changed: bool
    #: The extra child a "run now" created.
    child: uuid.UUID | None = None
    #: The master's status after a refusal (``None``: there is no such master).
    status: str | None = None


def _recurring_operation(runtime: Runtime, action: str) -> Callable[[str], bool | uuid.UUID]:
    def run(recurring_id: str) -> bool | uuid.UUID:
        child = recurring.run_now(runtime, recurring_id)
        return False if child is None else child

    ops: dict[str, Callable[[str], bool | uuid.UUID]] = {
        "pause": lambda recurring_id: recurring.pause(runtime, recurring_id),
        "resume": lambda recurring_id: recurring.resume(runtime, recurring_id),
        "run": run,
        "cancel": lambda recurring_id: recurring.cancel(runtime, recurring_id),
    }
    return ops[action]


def recurring_one(action: str) -> Response | str:
    """POST …/recurring/<action> with the master's ``id`` in the form: pause, resume, run now
    or cancel one recurring master through the library's operation, and audit it.

    The id travels in the body, not the path: it is any text of up to 255 characters
    (``/``, ``..`` and ``?`` included), which a path segment could not carry intact.
    """
    if action not in RECURRING_ALLOWED_FROM:
        abort(400, f"action must be one of {', '.join(RECURRING_ALLOWED_FROM)}")
    recurring_id = request.form.get("id", "")
    if not recurring_id or len(recurring_id) > filters.MAX_TEXT:
        abort(400, f"id must be a recurring job's id of 1 to {filters.MAX_TEXT} characters")
    runtime = current_runtime()
    op = _recurring_operation(runtime, action)
    with runtime.connection() as conn:
        try:
            # A savepoint, as for jobs: a failure in the database leaves the audit row intact.
            with runtime.store.savepoint(conn):
                result = op(recurring_id)
        except sa.exc.DBAPIError:
            result = False
        child = result if isinstance(result, uuid.UUID) else None
        changed = child is not None or result is True
        audit(conn, action, "recurring", recurring_id, 1, int(changed))
        found = None if changed else recurring.get(runtime, recurring_id, decrypt=False)
    outcome = RecurringActionResult(
        action,
        recurring_id,
        changed,
        child=child,
        status=None if found is None else str(found.status),
    )
    return notice_or_page(
        "ratchet/_recurring_notice.html",
        _back(url_for("ratchet_console.recurring")),
        outcome=outcome,
        past=RECURRING_PAST[action],
        allowed_from=RECURRING_ALLOWED_FROM[action],
    )
