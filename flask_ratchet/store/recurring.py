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
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Row

from .. import payload
from ..cron import CronError, next_fire, zone_info
from ..errors import UnreadableJob
from ..ids import uuid7
from ..options import JobOptions
from ..payload import Sealed, Unreadable
from ..recurring import (
    Misfire,
    RecurringDefinition,
    RecurringJob,
    RecurringStatus,
    decode_misfire,
    decode_options,
    plan_fires,
)
from ..retry import first_line
from ..schema import recurring
from ..sealing import MASTER_PAYLOAD, NO_KEYS, Keyring, is_sealed, master_binding
from .dialect import Dialect
from .jobs import Jobs
from .types import Fired, FirePass, NewJob

log = logging.getLogger("flask_ratchet.worker")

#: Masters fired per transaction; more wait for the next pass (moments later).
FIRE_BATCH = 100

_LIVE = (RecurringStatus.ACTIVE, RecurringStatus.PAUSED)
#: The columns a registration sets and compares; a difference in any of them is a change.
_DEFINITION = ("name", "task", "cron", "zone", "payload", "options", "misfire")


class Recurring:
    """Recurring masters; their children go in through the jobs part's submission."""

    #: The most masters one firing pass takes (a full pass means more may be due).
    fire_batch = FIRE_BATCH

    def __init__(self, dialect: Dialect, jobs: Jobs) -> None:
        self.dialect = dialect
        self.jobs = jobs

    # -- registration --------------------------------------------------------------------------

    def register(
        self, conn: Connection, d: RecurringDefinition, keyring: Keyring = NO_KEYS
    ) -> tuple[RecurringJob, bool]:
        """Create or update the master ``d.id``; return it and whether anything changed.

        The same definition again changes nothing (``next_fire`` is kept). A changed cron or
        zone recomputes ``next_fire`` from now; other changes (task, arguments, options, name,
        misfire policy) keep it. A CANCELED master is replaced by a new, active one. A PAUSED one
        stays paused. An encrypted master's arguments are sealed with ``keyring``.
        """
        now = self.dialect.now(conn)
        values = {
            "name": d.name,
            "task": d.task,
            "cron": d.cron,
            "zone": d.zone,
            "payload": _stored_payload(d, keyring, None),
            "options": d.options_json(),
            "misfire": str(d.misfire),
        }
        created = conn.execute(
            self.dialect.insert_ignoring(recurring, "recurring_id")
            .values(
                recurring_id=d.id,
                status=RecurringStatus.ACTIVE,
                next_fire=next_fire(d.cron, d.zone, now),
                created_at=now,
                updated_at=now,
                **values,
            )
            .returning(recurring.c.recurring_id)
        ).first()
        if created is not None:
            return self._snapshot(conn, d.id), True
        # The row is locked from here to the commit (PostgreSQL; SQLite's BEGIN IMMEDIATE holds
        # the whole file), so the update below is the only one: no compare-and-swap is needed.
        row = conn.execute(
            sa.select(recurring).where(recurring.c.recurring_id == d.id).with_for_update()
        ).one()
        values["payload"] = _stored_payload(d, keyring, row.payload)
        changes: dict[str, Any]
        # A status ratchet never writes (a row written by hand) is replaced like CANCELED: no
        # operation could ever move it, and the id would be lost for good.
        if row.status not in _LIVE:
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
        self,
        conn: Connection,
        threshold: timedelta,
        disabled: Sequence[str] = (),
        keyring: Keyring = NO_KEYS,
    ) -> FirePass:
        """Create the children of every due, active master and advance its ``next_fire``.

        Run inside a write transaction of its own (``store.begin``); masters another firer holds
        are skipped, not waited for. An encrypted master's arguments are opened with
        ``keyring`` and sealed again for each child.
        """
        now = self.dialect.now(conn)
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
            readable = _fireable(self._to_job(row), row, keyring)
            if isinstance(readable, str):
                self._set_aside(conn, row, now, readable)
                continue
            misfire, options, call = readable
            try:
                fires, upcoming = plan_fires(
                    row.cron,
                    row.zone,
                    row.next_fire,
                    now,
                    misfire,
                    threshold,
                    after=row.last_fire,
                )
            except (ValueError, OverflowError) as exc:
                self._set_aside(conn, row, now, _schedule_damage(row, exc))
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
            child = _child(row, options)
            children = [
                _sealed_as(replace(child, job_id=uuid7(), fire_time=t), call, keyring)
                for t in fires
            ]
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
            with self.dialect.savepoint(conn):
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

    def _set_aside(self, conn: Connection, row: Row[Any], now: datetime, why: str) -> None:
        """Pause a master that cannot be fired (``why`` names the column), so that it leaves
        the due set; the other masters of the pass fire as usual.

        Left due, it would be picked up by every pass of every worker (and on SQLite each pass
        takes the write lock) only to fail again. Pausing keeps its definition: fix it by
        registering it again, then resume it.
        """
        log.error(
            "recurring job %s cannot be evaluated (%s); paused it. "
            "Register a valid definition and resume it",
            row.recurring_id,
            why,
        )
        conn.execute(
            sa.update(recurring)
            .where(recurring.c.recurring_id == row.recurring_id)
            .values(status=RecurringStatus.PAUSED, next_fire=None, updated_at=now)
        )

    def peek(self, conn: Connection, disabled: Sequence[str] = ()) -> FirePass:
        """When the next occurrence is due, read only: a firer checks before it writes."""
        return FirePass(self.dialect.now(conn), [], self._next_due(conn, disabled))

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
            .values(
                status=RecurringStatus.PAUSED, next_fire=None, updated_at=self.dialect.now_sql()
            )
        )
        return paused.rowcount == 1 or self._status(conn, recurring_id) == RecurringStatus.PAUSED

    def resume(self, conn: Connection, recurring_id: str, keyring: Keyring = NO_KEYS) -> bool:
        """PAUSED → ACTIVE, next due at the first occurrence after now (no catch-up).

        A master that could not be fired (a column ratchet never writes, or sealed arguments
        ``keyring`` cannot open) is not resumed.
        """
        row = conn.execute(
            sa.select(recurring)
            .where(
                recurring.c.recurring_id == recurring_id,
                recurring.c.status == RecurringStatus.PAUSED,
            )
            .with_for_update()
        ).first()
        if row is None or isinstance(_fireable(self._to_job(row), row, keyring), str):
            return False
        now = self.dialect.now(conn)
        try:
            upcoming = _first_after(row.cron, row.zone, now, row.last_fire)
        except (ValueError, OverflowError):
            return False
        conn.execute(
            sa.update(recurring)
            .where(recurring.c.recurring_id == recurring_id)
            .values(status=RecurringStatus.ACTIVE, next_fire=upcoming, updated_at=now)
        )
        return True

    def cancel(self, conn: Connection, recurring_id: str) -> bool:
        """ACTIVE or PAUSED → CANCELED. Children already created are left alone."""
        canceled = conn.execute(
            sa.update(recurring)
            .where(recurring.c.recurring_id == recurring_id, recurring.c.status.in_(_LIVE))
            .values(
                status=RecurringStatus.CANCELED, next_fire=None, updated_at=self.dialect.now_sql()
            )
        )
        return canceled.rowcount == 1

    def run_now(
        self,
        conn: Connection,
        recurring_id: str,
        keyring: Keyring = NO_KEYS,
        principal: str | None = None,
    ) -> uuid.UUID | None:
        """Create one extra child of an ACTIVE or PAUSED master, due now, outside its schedule
        (its ``fire_time`` is empty). ``None`` if there is no such master, or if it cannot be
        fired (a column ratchet never writes)."""
        row = conn.execute(
            sa.select(recurring).where(
                recurring.c.recurring_id == recurring_id, recurring.c.status.in_(_LIVE)
            )
        ).first()
        if row is None:
            return None
        readable = _fireable(self._to_job(row), row, keyring)
        if isinstance(readable, str):
            return None
        _, options, call = readable
        child = _sealed_as(_child(row, options), call, keyring)
        child.principal = principal  # whoever asked for it, as for any job they submit
        (inserted,) = self.jobs.insert_jobs(conn, [child])
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
        """A snapshot of a master's row; a column that is not what ratchet writes there is read
        as :class:`~flask_ratchet.payload.Unreadable`, never an error."""
        args, kwargs = payload.read_call(row.payload)
        return RecurringJob(
            id=row.recurring_id,
            name=row.name,
            task=row.task,
            cron=row.cron,
            zone=row.zone,
            status=payload.read_member(RecurringStatus, "status", row.status),
            next_fire=row.next_fire,
            last_fire=row.last_fire,
            misfire=payload.read_with(decode_misfire, row.misfire),
            options=payload.read_with(decode_options, row.options),
            args=args,
            kwargs=kwargs,
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


def _child(row: Row[Any], options: JobOptions) -> NewJob:
    """A child job of master ``row`` (its ``options`` decoded), due now, outside its schedule;
    the firing gives each its fire time."""
    return NewJob(
        job_id=uuid7(),
        task=row.task,
        payload=row.payload,
        params=payload.dumps(options.params) if options.params else None,
        options=options,
        recurring_id=row.recurring_id,
        fire_time=None,
    )


def _fireable(
    master: RecurringJob, row: Row[Any], keyring: Keyring
) -> tuple[Misfire, JobOptions, str | None] | str:
    """What firing a master needs beyond its schedule (its misfire policy, its children's
    options, and its arguments in the clear if they are sealed), or why it cannot be fired as
    stored, naming the column (a sealed one included, whose key ``keyring`` lacks)."""
    call = None
    if isinstance(master.args, Sealed):
        try:
            call = keyring.open(row.payload, master_binding(row.recurring_id), MASTER_PAYLOAD)
        except UnreadableJob as exc:
            return str(exc)
        args, _ = payload.read_call(call)
        if isinstance(args, Unreadable):
            return args.reason
    elif isinstance(master.args, Unreadable):
        return master.args.reason
    if isinstance(master.misfire, Unreadable):
        return master.misfire.reason
    if isinstance(master.options, Unreadable):
        return master.options.reason
    return master.misfire, master.options, call


def _sealed_as(child: NewJob, call: str | None, keyring: Keyring) -> NewJob:
    """``child`` with its own sealed copy of its master's arguments (``call``, the clear text
    of a sealed master's); as it is for a master in the clear."""
    if call is None:
        return child
    child.payload = keyring.seal(call, child.job_id, "payload")
    return child


def _stored_payload(d: RecurringDefinition, keyring: Keyring, stored: str | None) -> str:
    """What master ``d``'s payload column holds: its arguments, sealed if it is encrypted;
    the ``stored`` text itself when it opens to them (registered again, nothing changes).

    :raises ConfigError: for an encrypted master in an app without a current key.
    """
    if not d.encrypt:
        return d.payload
    binding = master_binding(d.id)
    if stored is not None and is_sealed(stored):
        try:
            if keyring.open(stored, binding, MASTER_PAYLOAD) == d.payload:
                return stored
        except UnreadableJob:
            pass  # sealed with a key that is gone: sealed again with the current one
    return keyring.seal(d.payload, binding, MASTER_PAYLOAD)


def _schedule_damage(row: Row[Any], exc: Exception) -> str:
    """Why a master's schedule cannot be evaluated, naming the column that holds the cause."""
    try:
        zone_info(row.zone)
    except CronError:
        return f"column 'zone' holds {row.zone!r}: {exc}"
    return f"column 'cron' holds {row.cron!r} (in zone {row.zone!r}): {exc}"
