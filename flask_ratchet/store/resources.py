"""Resource limits and permits: how many jobs may use a shared resource at once, cluster-wide.

A permit is a row in ``ratchet_resource_permit`` (one per running job that holds one); the limit
is a row in ``ratchet_resource_limit``. Taking a permit is one short transaction that the database
serialises per resource:

- PostgreSQL: ``SELECT … FOR UPDATE`` on the limit row, then count the resource's permits and
  insert one if fewer than ``max_concurrent`` are out. Under READ COMMITTED (the worker's engine)
  each statement after the lock sees every permit committed before the lock was granted, so two
  workers can never both see the last free permit.
- SQLite: the store's write transactions start with ``BEGIN IMMEDIATE`` (one writer at a time),
  so the count and the insert are serialised by the database file's write lock.

A rate is a sliding window kept as a log: ``ratchet_resource_start`` holds the resource's starts
of the last period. Under the same lock, the starts older than the period are deleted, the rest
counted, and with ``count`` of them in the window the job is deferred until the oldest is a
period old; otherwise its start is added. A log, not a counter per fixed window: a fixed window
lets ``2 * count`` starts through around a window's edge, which an API counting its own sliding
window refuses; the log is at most ``count`` rows per resource.

A permit is released (deleted) by the worker right after the job's code returns or raises. What
a worker could not release (it died, or the delete failed) is released by orphan recovery:
permits of nodes that are no longer alive, and permits of jobs that are no longer RUNNING on the
permit's node, once they are older than the orphan grace. A node also drops its own permits when
it starts (they belong to an earlier process with its node id).
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..columns import StoredUuid, UtcDateTime
from ..errors import InvalidOption
from ..resources import DEFAULT_RETRY_DELAY, Rate, ResourceLimit
from ..resources import resource_limit as checked_limit
from ..schema import job_queue, node, resource_limit, resource_permit, resource_start
from ..states import JobStatus
from .dialect import Dialect
from .types import Acquisition, Permit


class Resources:
    """Resource limits and permits."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect

    def set_resource_limit(self, conn: Connection, limit: ResourceLimit) -> None:
        """Create or change a resource's limit (a row that already says so is left alone)."""
        rate = limit.rate
        self.dialect.upserted(
            conn,
            resource_limit,
            ("resource_name",),
            {
                "resource_name": limit.name,
                "max_concurrent": limit.max_concurrent,
                "retry_delay": limit.retry_delay,
                "rate_count": None if rate is None else rate.count,
                "rate_period": None if rate is None else rate.period,
                "updated_at": self.dialect.now_sql(),
            },
            lambda new: {
                "max_concurrent": new.max_concurrent,
                "retry_delay": new.retry_delay,
                "rate_count": new.rate_count,
                "rate_period": new.rate_period,
                "updated_at": new.updated_at,
            },
            # Every worker writes RATCHET_RESOURCES when it starts: most of those writes
            # change nothing and need not lock the row or bump updated_at.
            where=lambda new: sa.or_(
                *(
                    sa.not_(column.is_not_distinct_from(getattr(new, column.name)))
                    for column in _SETTINGS
                )
            ),
        )

    def get_resource_limit(self, conn: Connection, name: str) -> ResourceLimit | None:
        """The limit of resource ``name``, or ``None`` if it has none."""
        row = conn.execute(
            sa.select(*_SETTINGS).where(resource_limit.c.resource_name == name)
        ).first()
        return None if row is None else ResourceLimit(name, row[0], row[1], _rate(row[2], row[3]))

    def starts_in_window(self, conn: Connection, name: str, rate: Rate) -> int:
        """How many jobs of resource ``name`` started in the last ``rate.period``."""
        horizon = self._moment(conn) - timedelta(seconds=rate.period)
        return int(
            conn.execute(
                sa.select(sa.func.count()).where(
                    resource_start.c.resource_name == name, resource_start.c.started_at > horizon
                )
            ).scalar_one()
        )

    def permits_in_use(self, conn: Connection, name: str) -> int:
        """How many permits of resource ``name`` are out."""
        return int(
            conn.execute(
                sa.select(sa.func.count())
                .select_from(resource_permit)
                .where(resource_permit.c.resource_name == name)
            ).scalar_one()
        )

    def acquire_permit(
        self, conn: Connection, job_id: uuid.UUID, resource: str, node_id: str
    ) -> Acquisition:
        """Take a permit of ``resource`` for ``job_id``, which ``node_id`` is running.

        Run it in a transaction of its own (``begin``) and commit at once: on PostgreSQL the
        limit row stays locked, and every other request for the resource waits, until then.
        """
        row = conn.execute(
            sa.select(*_SETTINGS)
            .where(resource_limit.c.resource_name == resource)
            .with_for_update()  # nothing on SQLite, whose BEGIN IMMEDIATE already serialises
        ).first()
        if row is None:
            return Acquisition(Permit.UNLIMITED)
        try:
            # A stored limit is checked as a user's: NaN, negative, huge or text values (written
            # by hand) would otherwise fail the comparison below or the deferral's due time.
            stored_rate = None if row[2] is None and row[3] is None else (row[2], row[3])
            limit = checked_limit(resource, row[0], row[1], stored_rate)
        except InvalidOption as exc:
            reason = (
                f"the limit of resource {resource!r} in ratchet_resource_limit is unreadable: {exc}"
            )
            return Acquisition(Permit.UNREADABLE, retry_delay=DEFAULT_RETRY_DELAY, reason=reason)
        # Every permit counts, this job's own too: one left by an earlier attempt means that
        # attempt's thread may still be inside the resource (it timed out, or was canceled,
        # while blocked), and the new attempt waits until it gives the permit back.
        others = 0
        if limit.max_concurrent is not None:
            held = conn.execute(
                sa.select(resource_permit.c.job_id).where(
                    resource_permit.c.resource_name == resource
                )
            ).scalars()
            holders = set(held)
            others = len(holders)
            if others >= limit.max_concurrent or job_id in holders:
                return Acquisition(Permit.FULL, retry_delay=limit.retry_delay, in_use=others)
        moment = None
        if limit.rate is not None:
            moment = self._moment(conn)
            wait = self._window_wait(conn, resource, limit.rate, moment)
            if wait is not None:
                reason = f"resource {resource!r} had its {limit.rate} starts"
                return Acquisition(Permit.FULL, retry_delay=wait, in_use=others, reason=reason)
        # Guarded like every other write: only while the job is RUNNING on this node.
        running = sa.exists().where(
            job_queue.c.job_id == job_id,
            job_queue.c.status == JobStatus.RUNNING,
            job_queue.c.picked_by == node_id,
        )
        job_value = sa.literal(job_id, StoredUuid())
        name_value = sa.literal(resource, sa.String())
        if limit.max_concurrent is not None:
            stmt = self.dialect.insert_ignoring(resource_permit, "job_id").from_select(
                ["job_id", "resource_name", "node_id", "acquired_at"],
                sa.select(
                    job_value, name_value, sa.literal(node_id, sa.String()), self.dialect.now_sql()
                ).where(running),
            )
            if conn.execute(stmt.returning(resource_permit.c.job_id)).first() is None:
                return Acquisition(Permit.GONE, in_use=others)
        if moment is not None:
            start = sa.insert(resource_start).from_select(
                ["resource_name", "started_at", "job_id"],
                sa.select(name_value, sa.literal(moment, UtcDateTime()), job_value).where(running),
            )
            if conn.execute(start.returning(resource_start.c.job_id)).first() is None:
                # Ended meanwhile (a cancel committed between the two inserts): the permit
                # just taken goes too, or it would hold a place until this node restarts.
                conn.execute(sa.delete(resource_permit).where(resource_permit.c.job_id == job_id))
                return Acquisition(Permit.GONE, in_use=others)
        if limit.max_concurrent is None:
            return Acquisition(Permit.COUNTED)
        return Acquisition(Permit.GRANTED, in_use=others + 1)

    def _moment(self, conn: Connection) -> datetime:
        moment: datetime = conn.execute(sa.select(self.dialect.instant_sql())).scalar_one()
        return moment

    def _window_wait(
        self, conn: Connection, resource: str, rate: Rate, moment: datetime
    ) -> float | None:
        """Seconds until the rate's window has room for a start at ``moment``, or ``None`` if
        it has room now; the starts that left the window are deleted on the way."""
        horizon = moment - timedelta(seconds=rate.period)
        mine = resource_start.c.resource_name == resource
        conn.execute(sa.delete(resource_start).where(mine, resource_start.c.started_at <= horizon))
        count, oldest = conn.execute(
            sa.select(sa.func.count(), sa.func.min(resource_start.c.started_at)).where(mine)
        ).one()
        if count < rate.count:
            return None
        return max(float((oldest - horizon).total_seconds()), 0.001)

    def release_permit(self, conn: Connection, job_id: uuid.UUID, node_id: str) -> bool:
        """Give back ``job_id``'s permit, if ``node_id`` holds it; False if it held none."""
        result = conn.execute(
            sa.delete(resource_permit).where(
                resource_permit.c.job_id == job_id, resource_permit.c.node_id == node_id
            )
        )
        return bool(result.rowcount == 1)


#: A limit row's settings, in :class:`~flask_ratchet.resources.ResourceLimit`'s order.
_SETTINGS = (
    resource_limit.c.max_concurrent,
    resource_limit.c.retry_delay,
    resource_limit.c.rate_count,
    resource_limit.c.rate_period,
)


def _rate(count: int | None, period: float | None) -> Rate | None:
    return None if count is None or period is None else Rate(count, period)


def release_stale_permits(dialect: Dialect, conn: Connection, grace: float) -> int:
    """Orphan recovery: delete permits taken over ``grace`` seconds ago whose node is not alive
    (no heartbeat for ``grace``, or no node row). Returns how many were deleted.

    A live node's permits are its own to give back, even for a job that is no longer RUNNING
    there: its thread may still be inside the resource (a timeout or cancel while it was
    blocked). The age test spares a permit taken a moment ago, as orphan recovery spares a job
    claimed a moment ago.
    """
    alive = sa.select(node.c.node_id).where(dialect.heard_within(grace))
    result = conn.execute(
        sa.delete(resource_permit).where(
            resource_permit.c.acquired_at < dialect.ago_sql(grace),
            resource_permit.c.node_id.not_in(alive),
        )
    )
    return int(result.rowcount)


def release_node_permits(conn: Connection, node_id: str) -> int:
    """At start-up: delete permits an earlier process with this node id left behind."""
    result = conn.execute(sa.delete(resource_permit).where(resource_permit.c.node_id == node_id))
    return int(result.rowcount)
