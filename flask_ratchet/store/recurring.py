"""The SQL of recurring masters (``ratchet_recurring``): registration, firing and operations.

Exactly one master exists per id: the id is the table's primary key, and registration is an
``INSERT … ON CONFLICT DO NOTHING`` followed, when the row exists, by an update under the row's
lock. A new ``next_fire`` is computed under that lock and never at or before the master's
``last_fire``, so a registration that waited for a firer cannot schedule an occurrence again.
Firing locks due masters (``FOR UPDATE SKIP LOCKED`` on PostgreSQL; SQLite's ``BEGIN IMMEDIATE``
serialises firers), advances ``next_fire`` with a compare-and-swap on its old value and inserts
the children through the store's normal submission, all in one transaction. The unique
``(recurring_id, fire_time)`` constraint of ``ratchet_job`` makes a second child for one
occurrence impossible; each master's children go in under a savepoint, so such a conflict skips
that master's occurrences and never rolls back the rest of the pass.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Row

from .. import payload
from ..cron import next_fire
from ..ids import uuid7
from ..recurring import (
    Misfire,
    RecurringDefinition,
    RecurringJob,
    RecurringStatus,
    decode_options,
    plan_fires,
)
from ..retry import first_line
from ..schema import recurring
from .base import NewJob
from .sql import SqlJobStore

log = logging.getLogger("flask_ratchet.worker")

#: Masters fired per transaction; more wait for the next pass (moments later).
FIRE_BATCH = 100

_LIVE = (RecurringStatus.ACTIVE, RecurringStatus.PAUSED)
#: The columns a registration sets and compares; a difference in any of them is a change.
_DEFINITION = ("name", "task", "cron", "zone", "payload", "options", "misfire")


@dataclass(frozen=True, slots=True)
class Fired:
    """One child created by :meth:`RecurringStore.fire_due`."""

    recurring_id: str
    fire_time: datetime
    job_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class FirePass:
    """What one firing pass did, and when the next occurrence is due (database time)."""

    now: datetime
    fired: list[Fired]
    next_due: datetime | None


class RecurringStore:
    """Recurring masters, on top of a job store (its clock, its dialect, its submission)."""

    def __init__(self, jobs: SqlJobStore) -> None:
        self.jobs = jobs

    # -- registration --------------------------------------------------------------------------

    def register(self, conn: Connection, d: RecurringDefinition) -> tuple[RecurringJob, bool]:
        """Create or update the master ``d.id``; return it and whether anything changed.

        The same definition again changes nothing (``next_fire`` is kept). A changed cron or
        zone recomputes ``next_fire`` from now; other changes (task, arguments, options, name,
        misfire policy) keep it. A CANCELED master is replaced by a new, active one. A PAUSED one
        stays paused.
        """
        now = self.jobs.now(conn)
        values = {
            "name": d.name,
            "task": d.task,
            "cron": d.cron,
            "zone": d.zone,
            "payload": d.payload,
            "options": d.options_json(),
            "misfire": str(d.misfire),
        }
        created = conn.execute(
            self.jobs.dialect_insert(recurring)
            .values(
                recurring_id=d.id,
                status=RecurringStatus.ACTIVE,
                next_fire=next_fire(d.cron, d.zone, now),
                created_at=now,
                updated_at=now,
                **values,
            )
            .on_conflict_do_nothing(index_elements=["recurring_id"])
            .returning(recurring.c.recurring_id)
        ).first()
        if created is not None:
            return self._snapshot(conn, d.id), True
        # The row is locked from here to the commit (PostgreSQL; SQLite's BEGIN IMMEDIATE holds
        # the whole file), so the update below is the only one: no compare-and-swap is needed.
        row = conn.execute(
            sa.select(recurring).where(recurring.c.recurring_id == d.id).with_for_update()
        ).one()
        changes: dict[str, Any]
        if row.status == RecurringStatus.CANCELED:
            changes = {"status": RecurringStatus.ACTIVE, "created_at": now, "last_fire": None}
            changes |= {"next_fire": _first_after(d.cron, d.zone, now, row.last_fire)} | values
        else:
            changes = {k: v for k, v in values.items() if getattr(row, k) != v}
            if not changes:
                return self._to_job(row), False
            rescheduled = "cron" in changes or "zone" in changes
            if rescheduled and row.status == RecurringStatus.ACTIVE:
                changes["next_fire"] = _first_after(d.cron, d.zone, now, row.last_fire)
        conn.execute(
            sa.update(recurring)
            .where(recurring.c.recurring_id == d.id)
            .values(updated_at=now, **changes)
        )
        return self._snapshot(conn, d.id), True

    # -- firing --------------------------------------------------------------------------------

    def fire_due(
        self, conn: Connection, threshold: timedelta, disabled: Sequence[str] = ()
    ) -> FirePass:
        """Create the children of every due, active master and advance its ``next_fire``.

        Run inside a write transaction of its own (``store.begin``); masters another firer holds
        are skipped, not waited for.
        """
        now = self.jobs.now(conn)
        enabled = _enabled(disabled)
        due = conn.execute(
            sa.select(recurring)
            .where(
                recurring.c.status == RecurringStatus.ACTIVE,
                recurring.c.next_fire <= now,
                enabled,
            )
            .order_by(recurring.c.next_fire)
            .limit(FIRE_BATCH)
            .with_for_update(skip_locked=True)
        ).all()
        fired: list[Fired] = []
        for row in due:
            try:
                fires, upcoming = plan_fires(
                    row.cron,
                    row.zone,
                    row.next_fire,
                    now,
                    Misfire.parse(row.misfire),
                    threshold,
                    after=row.last_fire,
                )
            except (ValueError, OverflowError) as exc:
                self._set_aside(conn, row, now, exc)
                continue
            advanced = conn.execute(
                sa.update(recurring)
                .where(
                    recurring.c.recurring_id == row.recurring_id,
                    recurring.c.status == RecurringStatus.ACTIVE,
                    recurring.c.next_fire == row.next_fire,
                )
                .values(
                    next_fire=upcoming,
                    last_fire=fires[-1] if fires else row.last_fire,
                    updated_at=now,
                )
            )
            if advanced.rowcount != 1:
                continue  # another firer advanced it first: its children exist
            child = _child(row, None)  # options decoded once, however many fire times
            children = [replace(child, job_id=uuid7(), fire_time=t) for t in fires]
            if children and not self._insert_children(conn, row.recurring_id, children):
                continue
            fired += [
                Fired(row.recurring_id, t, c.job_id) for t, c in zip(fires, children, strict=True)
            ]
        return FirePass(now, fired, self._next_due(conn, disabled))

    def _insert_children(self, conn: Connection, recurring_id: str, children: list[NewJob]) -> bool:
        """Insert one master's children in a savepoint; ``False`` if one of them existed.

        A child for an occurrence that already has one (a ``(recurring_id, fire_time)``
        conflict) can only come from a master whose ``next_fire`` went back, e.g. written by
        hand. Only this master's children are rolled back; its ``next_fire`` stays advanced, so
        it does not come back, and the other masters of the pass fire.
        """
        try:
            with self.jobs.savepoint(conn):
                self.jobs.insert_jobs(conn, children)
        except sa.exc.IntegrityError as exc:
            log.error(
                "recurring job %s: an occurrence from %s to %s already has its child; "
                "skipped them and moved on (%s)",
                recurring_id,
                children[0].fire_time,
                children[-1].fire_time,
                first_line(exc),
            )
            return False
        return True

    def _set_aside(self, conn: Connection, row: Row[Any], now: datetime, exc: Exception) -> None:
        """Pause a master whose schedule cannot be evaluated, so that it leaves the due set.

        Left due, it would be picked up by every pass of every worker (and on SQLite each pass
        takes the write lock) only to fail again. Pausing keeps its definition: fix it by
        registering it again, then resume it.
        """
        log.error(
            "recurring job %s cannot be evaluated (cron %r, zone %r, misfire %r: %s); paused it. "
            "Register a valid definition and resume it",
            row.recurring_id,
            row.cron,
            row.zone,
            row.misfire,
            exc,
        )
        conn.execute(
            sa.update(recurring)
            .where(recurring.c.recurring_id == row.recurring_id)
            .values(status=RecurringStatus.PAUSED, next_fire=None, updated_at=now)
        )

    def peek(self, conn: Connection, disabled: Sequence[str] = ()) -> FirePass:
        """When the next occurrence is due, read only: a firer checks before it writes."""
        return FirePass(self.jobs.now(conn), [], self._next_due(conn, disabled))

    def _next_due(self, conn: Connection, disabled: Sequence[str]) -> datetime | None:
        # MIN() keeps the column's type: an aware UTC time on SQLite too.
        return conn.execute(
            sa.select(sa.func.min(recurring.c.next_fire)).where(
                recurring.c.status == RecurringStatus.ACTIVE, _enabled(disabled)
            )
        ).scalar()

    # -- operations ----------------------------------------------------------------------------

    def pause(self, conn: Connection, recurring_id: str) -> bool:
        """ACTIVE → PAUSED (no children until resumed). Pausing a paused master returns True."""
        paused = conn.execute(
            sa.update(recurring)
            .where(
                recurring.c.recurring_id == recurring_id,
                recurring.c.status == RecurringStatus.ACTIVE,
            )
            .values(status=RecurringStatus.PAUSED, next_fire=None, updated_at=self.jobs.now_sql())
        )
        return paused.rowcount == 1 or self._status(conn, recurring_id) == RecurringStatus.PAUSED

    def resume(self, conn: Connection, recurring_id: str) -> bool:
        """PAUSED → ACTIVE, next due at the first occurrence after now (no catch-up)."""
        row = conn.execute(
            sa.select(recurring.c.cron, recurring.c.zone, recurring.c.last_fire)
            .where(
                recurring.c.recurring_id == recurring_id,
                recurring.c.status == RecurringStatus.PAUSED,
            )
            .with_for_update()
        ).first()
        if row is None:
            return False
        now = self.jobs.now(conn)
        conn.execute(
            sa.update(recurring)
            .where(recurring.c.recurring_id == recurring_id)
            .values(
                status=RecurringStatus.ACTIVE,
                next_fire=_first_after(row.cron, row.zone, now, row.last_fire),
                updated_at=now,
            )
        )
        return True

    def cancel(self, conn: Connection, recurring_id: str) -> bool:
        """ACTIVE or PAUSED → CANCELED. Children already created are left alone."""
        canceled = conn.execute(
            sa.update(recurring)
            .where(recurring.c.recurring_id == recurring_id, recurring.c.status.in_(_LIVE))
            .values(status=RecurringStatus.CANCELED, next_fire=None, updated_at=self.jobs.now_sql())
        )
        return canceled.rowcount == 1

    def run_now(self, conn: Connection, recurring_id: str) -> uuid.UUID | None:
        """Create one extra child of an ACTIVE or PAUSED master, due now, outside its schedule
        (its ``fire_time`` is empty). ``None`` if there is no such master."""
        row = conn.execute(
            sa.select(recurring).where(
                recurring.c.recurring_id == recurring_id, recurring.c.status.in_(_LIVE)
            )
        ).first()
        if row is None:
            return None
        (inserted,) = self.jobs.insert_jobs(conn, [_child(row, None)])
        return inserted.job_id

    # -- reads ---------------------------------------------------------------------------------

    def get(self, conn: Connection, recurring_id: str) -> RecurringJob | None:
        row = conn.execute(
            sa.select(recurring).where(recurring.c.recurring_id == recurring_id)
        ).first()
        return None if row is None else self._to_job(row)

    def list_all(self, conn: Connection, include_canceled: bool = False) -> list[RecurringJob]:
        stmt = sa.select(recurring).order_by(recurring.c.recurring_id)
        if not include_canceled:
            stmt = stmt.where(recurring.c.status.in_(_LIVE))
        return [self._to_job(row) for row in conn.execute(stmt)]

    def _snapshot(self, conn: Connection, recurring_id: str) -> RecurringJob:
        found = self.get(conn, recurring_id)
        assert found is not None
        return found

    def _status(self, conn: Connection, recurring_id: str) -> str | None:
        return conn.execute(
            sa.select(recurring.c.status).where(recurring.c.recurring_id == recurring_id)
        ).scalar()

    @staticmethod
    def _to_job(row: Row[Any]) -> RecurringJob:
        decoded = payload.loads(row.payload)
        return RecurringJob(
            id=row.recurring_id,
            name=row.name,
            task=row.task,
            cron=row.cron,
            zone=row.zone,
            status=RecurringStatus(row.status),
            next_fire=row.next_fire,
            last_fire=row.last_fire,
            misfire=Misfire.parse(row.misfire),
            options=decode_options(row.options),
            args=decoded["args"],
            kwargs=decoded["kwargs"],
            created_at=row.created_at,
            updated_at=row.updated_at,
        )


def _enabled(disabled: Sequence[str]) -> sa.ColumnElement[bool]:
    if not disabled:
        return sa.true()
    return recurring.c.recurring_id.not_in(list(disabled))


def _first_after(
    cron: str, zone: str, now: datetime, last_fire: datetime | None
) -> datetime | None:
    """A master's next fire time from now on, never at or before its newest child's.

    On PostgreSQL ``now`` is when the transaction began: a registration that waited for the row
    lock while a firer fired an occurrence would otherwise schedule that occurrence again.
    """
    return next_fire(cron, zone, now if last_fire is None else max(now, last_fire))


def _child(row: Row[Any], fire_time: datetime | None) -> NewJob:
    """The child job of master ``row`` for ``fire_time``: due now, with the master's options."""
    options = decode_options(row.options)
    return NewJob(
        job_id=uuid7(),
        task=row.task,
        payload=row.payload,
        params=payload.dumps(options.params) if options.params else None,
        options=options,
        recurring_id=row.recurring_id,
        fire_time=fire_time,
    )
