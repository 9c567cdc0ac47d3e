"""The console's resource limits and circuit breakers, in SQLAlchemy Core for both dialects.

Read only, and bounded like the console's other reads (:mod:`.jobs`), so the pages cost
the same with a thousand jobs or a million:

- **Resources** are the names that have a limit row, permits out, or live jobs naming them: at
  most :data:`MAX_RESOURCES`, first by name. Permits are one row per running job that holds one,
  a small table, counted whole.
- **Waiting jobs** are PENDING jobs naming a resource. ``ratchet_job.resource_name`` has no index
  (most jobs name no resource, and every submission would pay for one), so they cannot be counted
  directly: the count walks the newest :data:`WAITING_WINDOW` PENDING hot rows on the console's
  PENDING index and reads each one's resource from its cold row by primary key. It is exact when
  there are no more PENDING jobs than that, and a lower bound otherwise (:class:`Waiting`).
- **Circuit breakers** live in each worker's memory; every heartbeat publishes them in the
  node's ``info``. Only live nodes count (at most :data:`MAX_NODES`), and resets are read from the
  audit trail's last :data:`RESET_LOOKBACK`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.sql import Select

from flask_ratchet.breaker import BREAKER_RESET, BreakerSnapshot, BreakerState
from flask_ratchet.columns import StoredUuid, aware, const
from flask_ratchet.errors import InvalidOption
from flask_ratchet.options import shown
from flask_ratchet.payload import Unreadable, read_checked
from flask_ratchet.resources import Rate, checked_max_concurrent, checked_rate, checked_retry_delay
from flask_ratchet.schema import (
    audit,
    job,
    job_queue,
    node,
    resource_limit,
    resource_permit,
    resource_start,
)
from flask_ratchet.states import JobStatus
from flask_ratchet.store.dialect import Dialect

from .nodes import live

#: The most resources the page lists (the first ones by name).
MAX_RESOURCES = 200
#: Waiting jobs are looked for among this many PENDING jobs, the newest (see the module doc).
WAITING_WINDOW = 20_000
#: The partial index of PENDING hot rows by id (``schema.py``) the waiting counts walk.
PENDING_INDEX = "ix_ratchet_job_queue_pending"
#: A waiting count above this shows as "1,000+".
WAITING_CAP = 1_000
#: RUNNING jobs looked at for their resource: more than any cluster runs at once.
RUNNING_SCAN = 5_000
#: (resource, node) pairs of permits read: far more than any cluster holds.
PERMIT_GROUPS = 10_000
#: Live nodes whose breakers are read, and services shown.
MAX_NODES = 500
MAX_SERVICES = 200
#: Breaker resets older than this are not shown (every worker alive has applied them).
RESET_LOOKBACK = timedelta(days=1)

# -- resources -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Waiting:
    """PENDING jobs naming a resource, found among the newest :data:`WAITING_WINDOW`."""

    count: int
    #: Every PENDING job was looked at: ``count`` is exact. Otherwise it is a lower bound.
    complete: bool


@dataclass(frozen=True, slots=True)
class Holder:
    """A node holding permits of a resource, and how many."""

    node_id: str
    permits: int


@dataclass(frozen=True, slots=True)
class ResourceRow:
    """One resource as the console shows it. ``max_concurrent`` is ``None`` without a limit;
    it and ``retry_delay`` are :class:`~flask_ratchet.payload.Unreadable` if the limit row holds
    what ratchet never writes there (the worker then defers the resource's jobs)."""

    name: str
    max_concurrent: int | Unreadable | None
    retry_delay: float | Unreadable | None
    updated_at: datetime | None
    #: At most so many starts per period (``None``: no rate), and the starts in its window.
    rate: Rate | Unreadable | None
    starts: int
    #: Permits out, and the nodes holding them (by node id).
    in_use: int
    holders: tuple[Holder, ...]
    waiting: Waiting
    #: RUNNING jobs naming the resource (with a limit, each holds a permit or is about to).
    running: int

    @property
    def readable_rate(self) -> Rate | None:
        """The rate, if it has one that can be read."""
        return self.rate if isinstance(self.rate, Rate) else None

    @property
    def limited(self) -> bool:
        """The resource has a limit row (jobs at once, a rate, or both)."""
        return self.retry_delay is not None

    @property
    def full(self) -> bool:
        """Every permit is out: the resource's next jobs are deferred by its retry delay."""
        return isinstance(self.max_concurrent, int) and self.in_use >= self.max_concurrent

    @property
    def unreadable(self) -> list[Unreadable]:
        """The columns of the limit row that cannot be read (its jobs are deferred by
        :data:`~flask_ratchet.resources.DEFAULT_RETRY_DELAY` until it is set again)."""
        values = (self.max_concurrent, self.retry_delay, self.rate)
        return [v for v in values if isinstance(v, Unreadable)]


@dataclass(frozen=True, slots=True)
class ResourceReport:
    """The resources page: its rows, and how far the waiting counts looked."""

    rows: list[ResourceRow]
    #: There are more than :data:`MAX_RESOURCES` resources: only the first by name are listed.
    more: bool
    #: PENDING jobs looked at for the waiting counts, and whether that was all of them.
    scanned: int
    complete: bool


def resources(conn: Connection, dialect: Dialect) -> ResourceReport:
    """Every resource with a limit, permits out or live jobs naming it (at most
    :data:`MAX_RESOURCES`, by name), with its limit, permits, holders and waiting jobs."""
    limits = {
        r.resource_name: r
        for r in conn.execute(
            sa.select(resource_limit)
            .order_by(resource_limit.c.resource_name)
            .limit(MAX_RESOURCES + 1)
        )
    }
    holders = _holders(conn)
    pending, scanned = _pending_by_resource(conn, dialect)
    running = _running_by_resource(conn)
    # Limit rows past the first MAX_RESOURCES + 1 names sort after every name kept here, so
    # the first MAX_RESOURCES names of this union are the first of all resources.
    names = sorted(set(limits) | set(holders) | set(pending) | set(running))
    complete = scanned < WAITING_WINDOW
    rows = [
        _row(conn, dialect, name, limits.get(name), holders, pending, running, complete)
        for name in names[:MAX_RESOURCES]
    ]
    return ResourceReport(rows, len(names) > MAX_RESOURCES, scanned, complete)


def resource(conn: Connection, dialect: Dialect, name: str) -> ResourceRow:
    """One resource (what the page lists for it; empty figures for a name nothing uses)."""
    limit = conn.execute(
        sa.select(resource_limit).where(resource_limit.c.resource_name == name)
    ).first()
    holders = _holders(conn, name)
    pending, scanned = _pending_by_resource(conn, dialect)
    running = _running_by_resource(conn)
    return _row(conn, dialect, name, limit, holders, pending, running, scanned < WAITING_WINDOW)


def live_node_ids(conn: Connection, now: datetime, live_after: float) -> set[str]:
    """The ids of the live nodes (heartbeat at most ``live_after`` seconds before ``now``)."""
    return set(
        conn.execute(
            sa.select(node.c.node_id).where(live(now, live_after)).limit(MAX_NODES)
        ).scalars()
    )


def _row(
    conn: Connection,
    dialect: Dialect,
    name: str,
    limit: Any,
    holders: Mapping[str, tuple[Holder, ...]],
    pending: Mapping[str, int],
    running: Mapping[str, int],
    complete: bool,
) -> ResourceRow:
    held = holders.get(name, ())
    # A limit row is checked as a user's limit would be: what SQLite keeps in its number
    # columns (text, a blob, a huge or negative number) or PostgreSQL's NaN reads as stored.
    max_concurrent: int | Unreadable | None = None
    retry_delay: float | Unreadable | None = None
    rate: Rate | Unreadable | None = None
    if limit is not None:
        if limit.max_concurrent is not None:  # NULL: a rate only
            max_concurrent = read_checked(
                "max_concurrent", partial(checked_max_concurrent, name), limit.max_concurrent
            )
        retry_delay = read_checked(
            "retry_delay", partial(checked_retry_delay, name), limit.retry_delay
        )
        if limit.rate_count is not None or limit.rate_period is not None:
            rate = read_checked(
                "rate", partial(checked_rate, name), (limit.rate_count, limit.rate_period)
            )
    starts = 0
    if isinstance(rate, Rate):
        starts = _starts_in_window(conn, name, rate, dialect.now(conn))
    return ResourceRow(
        name=name,
        max_concurrent=max_concurrent,
        retry_delay=retry_delay,
        updated_at=None if limit is None else limit.updated_at,
        rate=rate,
        starts=starts,
        in_use=sum(h.permits for h in held),
        holders=held,
        waiting=Waiting(pending.get(name, 0), complete),
        running=running.get(name, 0),
    )


def _starts_in_window(conn: Connection, name: str, rate: Rate, now: datetime) -> int:
    """Starts of ``name`` in its rate's window (at most the rate's count rows, on the log's
    primary key)."""
    horizon = now - timedelta(seconds=rate.period)
    s = resource_start.c
    stmt = sa.select(sa.func.count()).where(s.resource_name == name, s.started_at > horizon)
    return int(conn.execute(stmt).scalar_one())


def _holders(conn: Connection, name: str | None = None) -> dict[str, tuple[Holder, ...]]:
    """Permits out per resource and node (the permit table holds one row per running job)."""
    p = resource_permit.c
    stmt = sa.select(p.resource_name, p.node_id, sa.func.count().label("n")).group_by(
        p.resource_name, p.node_id
    )
    if name is not None:
        stmt = stmt.where(p.resource_name == name)
    out: dict[str, list[Holder]] = {}
    for r in conn.execute(stmt.order_by(p.resource_name, p.node_id).limit(PERMIT_GROUPS)):
        out.setdefault(r.resource_name, []).append(Holder(r.node_id, int(r.n)))
    return {k: tuple(v) for k, v in out.items()}


def _by_resource(conn: Connection, hot: Select[Any]) -> tuple[dict[str, int], int]:
    """The hot rows ``hot`` selects (their ``job_id``) counted per resource, and how many there
    were.

    The resource is read with a correlated subquery, one primary-key lookup per hot row,
    rather than a join: a planner that expects many rows could hash-join the whole cold table.
    """
    rows_of = hot.subquery()
    name = sa.select(job.c.resource_name).where(job.c.job_id == rows_of.c.job_id).scalar_subquery()
    named = sa.select(name.label("resource_name")).select_from(rows_of).subquery()
    rows = conn.execute(
        sa.select(named.c.resource_name, sa.func.count().label("n")).group_by(named.c.resource_name)
    ).all()
    counts = {r.resource_name: int(r.n) for r in rows if r.resource_name is not None}
    return counts, sum(int(r.n) for r in rows)


def _pending_by_resource(conn: Connection, dialect: Dialect) -> tuple[dict[str, int], int]:
    """PENDING jobs per resource among the newest :data:`WAITING_WINDOW`, walked newest first
    on the console's PENDING index (partial on ``status = 'PENDING'``: hence the literal)."""
    # Columns by name: the table may be read through the index as text (see Dialect.indexed).
    job_id = sa.literal_column(f"{job_queue.name}.job_id", StoredUuid())
    status = sa.literal_column(f"{job_queue.name}.status", sa.String())
    return _by_resource(
        conn,
        sa.select(job_id.label("job_id"))
        .select_from(dialect.indexed(job_queue, PENDING_INDEX))
        .where(status == const(JobStatus.PENDING))
        .order_by(job_id.desc())
        .limit(WAITING_WINDOW),
    )


def _running_by_resource(conn: Connection) -> dict[str, int]:
    """RUNNING jobs per resource: few (at most every worker's concurrency), found on the
    ``(status, picked_at, picked_by)`` index. Unordered: sorting them by id would have SQLite
    walk the primary key past every other hot row instead."""
    return _by_resource(
        conn,
        sa.select(job_queue.c.job_id)
        .where(job_queue.c.status == const(JobStatus.RUNNING))
        .limit(RUNNING_SCAN),
    )[0]


# -- circuit breakers ----------------------------------------------------------------------------

#: From best to worst: a service's overall state is the worst of its workers'.
_SEVERITY = {BreakerState.CLOSED: 0, BreakerState.HALF_OPEN: 1, BreakerState.OPEN: 2}


@dataclass(frozen=True, slots=True)
class NodeBreaker:
    """A service's breaker in one live worker, as its last heartbeat published it."""

    node_id: str
    host: str
    #: As the node row holds it (:class:`~flask_ratchet.payload.Unreadable` if not a number).
    pid: int | Unreadable
    last_heartbeat: datetime
    heartbeat_age: float
    snapshot: BreakerSnapshot

    @property
    def half_open_in(self) -> float | None:
        """Seconds until an OPEN breaker lets trial calls through, counted from now (the
        published figure is as old as the heartbeat); ``None`` unless OPEN."""
        if self.snapshot.state is not BreakerState.OPEN:
            return None
        return max(0.0, self.snapshot.open_for_left - self.heartbeat_age)


@dataclass(frozen=True, slots=True)
class ServiceBreakers:
    """One service's breakers across the live workers that report one, by node id."""

    service: str
    nodes: tuple[NodeBreaker, ...]
    #: The latest reset an operator asked for (within :data:`RESET_LOOKBACK`).
    reset_at: datetime | None = None

    @property
    def state(self) -> BreakerState:
        """The worst state over the workers: OPEN, then HALF_OPEN, then CLOSED."""
        states = [n.snapshot.state for n in self.nodes] or [BreakerState.CLOSED]
        return max(states, key=_SEVERITY.__getitem__)

    def reset_pending(self, worker: NodeBreaker) -> bool:
        """Whether ``worker`` has not yet had a heartbeat since the latest reset (it applies
        the reset at that heartbeat)."""
        return self.reset_at is not None and worker.last_heartbeat < self.reset_at


@dataclass(frozen=True, slots=True)
class BreakerReport:
    """The breakers page: services by name, and how many workers are live."""

    services: list[ServiceBreakers]
    live_nodes: int
    #: There are more than :data:`MAX_SERVICES` services: only the first by name are listed.
    more: bool


def breakers(conn: Connection, now: datetime, live_after: float) -> BreakerReport:
    """The breakers every live node (heartbeat within ``live_after`` seconds of ``now``)
    published, per service, with the latest reset asked for each."""
    by_service, live = _published(conn, now, live_after)
    resets = reset_requests(conn, now)
    names = sorted(by_service)
    services = [
        ServiceBreakers(name, tuple(by_service[name]), resets.get(name))
        for name in names[:MAX_SERVICES]
    ]
    return BreakerReport(services, live, len(names) > MAX_SERVICES)


def service_breakers(
    conn: Connection, now: datetime, live_after: float, service: str
) -> ServiceBreakers:
    """One service's breakers in the live nodes (none if no live node reports it)."""
    by_service, _ = _published(conn, now, live_after)
    return ServiceBreakers(
        service, tuple(by_service.get(service, ())), reset_requests(conn, now).get(service)
    )


def _published(
    conn: Connection, now: datetime, live_after: float
) -> tuple[dict[str, list[NodeBreaker]], int]:
    """Every live node's published breakers by service, and how many nodes are live.

    Live as :func:`.nodes.live` decides it.
    """
    rows = conn.execute(
        sa.select(node.c.node_id, node.c.host, node.c.pid, node.c.last_heartbeat, node.c.info)
        .where(live(now, live_after))
        .order_by(node.c.node_id)
        .limit(MAX_NODES)
    ).all()
    out: dict[str, list[NodeBreaker]] = {}
    for r in rows:
        for service, snapshot in _snapshots(r.info).items():
            out.setdefault(service, []).append(
                NodeBreaker(
                    node_id=r.node_id,
                    host=r.host,
                    pid=read_checked("pid", _whole, r.pid),
                    last_heartbeat=r.last_heartbeat,
                    heartbeat_age=max(0.0, (now - r.last_heartbeat).total_seconds()),
                    snapshot=snapshot,
                )
            )
    return out, len(rows)


def _snapshots(info: str | None) -> dict[str, BreakerSnapshot]:
    """The breakers in a node's ``info`` JSON (see ``maintenance/heartbeat.py``).

    Written by workers, possibly of another version: what does not parse, or an entry with an
    unknown state, is left out rather than failing the page.
    """
    if not info:
        return {}
    try:
        value = json.loads(info)
    except (ValueError, RecursionError):
        return {}
    published = value.get("breakers") if isinstance(value, dict) else None
    if not isinstance(published, dict):
        return {}
    out: dict[str, BreakerSnapshot] = {}
    for service, entry in published.items():
        snapshot = _snapshot(entry)
        if isinstance(service, str) and service and snapshot is not None:
            out[service] = snapshot
    return out


def _snapshot(entry: object) -> BreakerSnapshot | None:
    if not isinstance(entry, dict):
        return None
    state = entry.get("state")
    if not isinstance(state, str) or state not in BreakerState.__members__:
        return None
    return BreakerSnapshot(
        state=BreakerState(state),
        calls=int(_number(entry.get("calls"))),
        failures=int(_number(entry.get("failures"))),
        failure_rate=_number(entry.get("failure_rate")),
        open_for_left=_number(entry.get("open_for_left")),
        trials_running=int(_number(entry.get("trials_running"))),
        trials_succeeded=int(_number(entry.get("trials_succeeded"))),
        times_opened=int(_number(entry.get("times_opened"))),
    )


def _number(value: object) -> float:
    """A published figure, or 0 for anything that is not a finite, non-negative number (JSON
    holds integers of any length: one past a float's range is not a figure either)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    try:
        number = float(value)
    except OverflowError:
        return 0.0
    return number if math.isfinite(number) and number >= 0 else 0.0


def _whole(value: object) -> int:
    """A whole number a node row holds (SQLite keeps any text a hand wrote there).

    :raises InvalidOption: if it is not one.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidOption(f"must be a whole number, got {shown(value)}")
    return value


def reset_requests(conn: Connection, now: datetime) -> dict[str, datetime]:
    """The latest reset asked for each service within :data:`RESET_LOOKBACK` (audit rows of
    the ``reset-breaker`` action, found on the ``at`` index)."""
    latest = sa.func.max(audit.c.at).label("latest")
    rows = conn.execute(
        sa.select(audit.c.target, latest)
        .where(audit.c.action == BREAKER_RESET, audit.c.at >= now - RESET_LOOKBACK)
        .group_by(audit.c.target)
        .limit(MAX_SERVICES * 5)
    ).all()
    # An aggregate over a typed column keeps its type on both dialects: aware() is a safety net.
    return {r.target: aware(r.latest) for r in rows}
