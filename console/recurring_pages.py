"""The recurring page (GET, read only): every recurring master with its next fire times, and
what canceling one means before it is confirmed (POSTed to :mod:`.actions`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from flask import abort, render_template, request

from flask_ratchet import api
from flask_ratchet.cron import DIALECT_LABELS, CronError, dialect, next_fire_times
from flask_ratchet.recurring import RecurringJob, RecurringStatus

from . import filters
from .pages import current_runtime

#: How many upcoming fire times the recurring page shows per master.
UPCOMING = 3


@dataclass(frozen=True, slots=True)
class MasterRow:
    """One line of the recurring page: the master, its next fire times (UTC) and its cron's
    dialect, as a person reads it ("Unix cron")."""

    master: RecurringJob
    upcoming: list[datetime]
    dialect: str


def recurring() -> str:
    """Every recurring master (CANCELED ones with ``?canceled=1``) and its next fire times."""
    with_canceled = request.args.get("canceled", "") == "1"
    runtime = current_runtime()
    masters = api.recurring.list_all(runtime, with_canceled, decrypt=False)
    with runtime.connection() as conn:
        now = runtime.store.now(conn)
    rows = [MasterRow(m, _upcoming(m), _dialect(m.cron)) for m in masters]
    return render_template(
        "ratchet/recurring.html",
        rows=rows,
        with_canceled=with_canceled,
        now=now,
        upcoming=UPCOMING,
    )


def _dialect(expr: str) -> str:
    try:
        return DIALECT_LABELS[dialect(expr)]
    except CronError:
        return "not a valid cron expression"  # a stored value this version cannot read


def _upcoming(master: RecurringJob) -> list[datetime]:
    """The next fire times of an ACTIVE master, from its stored ``next_fire`` on.

    Counted from ``next_fire`` (not from now) so the first one shown is the occurrence the
    workers will fire next, even when it is overdue because no worker is running.
    """
    if master.status != RecurringStatus.ACTIVE or master.next_fire is None:
        return []
    try:
        return next_fire_times(
            master.cron, master.zone, master.next_fire - timedelta(microseconds=1), UPCOMING
        )
    except (CronError, LookupError):
        # A zone the server's tz database no longer knows (ZoneInfoNotFoundError is a
        # KeyError): the page still lists the master, without a preview.
        return []


def recurring_cancel() -> str:
    """GET …/recurring/cancel?id=…: what canceling a master means; asks to confirm."""
    wanted = request.args.get("id", "")
    if not wanted or len(wanted) > filters.MAX_TEXT:
        abort(404)
    master = api.recurring.get(current_runtime(), wanted, decrypt=False)
    if master is None:
        abort(404)
    return render_template("ratchet/recurring_cancel.html", master=master)
