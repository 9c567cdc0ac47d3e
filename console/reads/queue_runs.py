"""The last hour's runs of the queues a page shows: how many succeeded and failed, and the
median (p50) and the 95th percentile (p95) of how long a run waited to be claimed and how long
it ran.

One grouped statement for all of the page's queues, over the runs that started in the last hour
(the ``started_at`` index), never one per queue. Each percentile is the exact *nearest-rank*
one: the value at rank ``ceil(p * n)`` of the ``n`` values in order, a time some run took
(not an interpolation between two). PostgreSQL computes it with ``percentile_disc``; SQLite
and MariaDB have no percentile aggregate, and rank the values with window functions
(``ROW_NUMBER`` and ``COUNT`` over each queue) to take the same value. Runs written before the
execution row held its queue (migration 0014) are not here: see ``queues._older_runs``.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from flask_ratchet.schema import execution
from flask_ratchet.states import JobStatus

#: The percentiles shown, in hundredths.
MEDIAN, TAIL = 50, 95


@dataclass(frozen=True, slots=True)
class HourRuns:
    """One queue's runs that started in the last hour: how many ended each way, and their
    waits and run times in milliseconds (``None``: no run, or none that recorded it)."""

    succeeded: int = 0
    failed: int = 0
    wait_p50: float | None = None
    wait_p95: float | None = None
    run_p50: float | None = None
    run_p95: float | None = None


def hour_runs(conn: Connection, names: Collection[str], now: datetime) -> dict[str, HourRuns]:
    """The :class:`HourRuns` of each queue of ``names`` that ran a job in the hour up to
    ``now`` (the database's time), in one grouped statement."""
    if not names:
        return {}
    e = execution
    where = (e.c.started_at >= now - timedelta(hours=1), e.c.queue.in_(sorted(names)))
    if conn.dialect.name == "postgresql":
        stmt = sa.select(
            e.c.queue,
            sa.func.count(),
            sa.func.count(sa.case((e.c.status == JobStatus.FAILED, 1))),
            *(
                sa.func.percentile_disc(p / 100).within_group(column)
                for column in (e.c.queue_wait_ms, e.c.duration_ms)
                for p in (MEDIAN, TAIL)
            ),
        )
        rows = conn.execute(stmt.where(*where).group_by(e.c.queue))
    else:
        rows = conn.execute(_ranked(where))
    return {
        name: HourRuns(
            int(n) - int(bad), int(bad), *(None if v is None else float(v) for v in times)
        )
        for name, n, bad, *times in rows
    }


def _ranked(where: tuple[sa.ColumnElement[bool], ...]) -> sa.Select[tuple[str, ...]]:
    """The nearest-rank percentiles by window functions: each value's rank among its queue's
    values (those recorded: NULLs rank last and are not counted), and of the values whose rank
    is at least ``p * n`` the least, which is the one at rank ``ceil(p * n)``. Integer
    arithmetic only (``rank * 100 >= p * n``): no CEIL, which SQLite may lack."""
    e = execution
    columns = {"wait": e.c.queue_wait_ms, "run": e.c.duration_ms}
    ranked = sa.select(
        e.c.queue,
        e.c.status,
        *(
            part
            for key, column in columns.items()
            for part in (
                column.label(key),
                sa.func.row_number()
                .over(
                    partition_by=e.c.queue,
                    order_by=(sa.case((column.is_(None), 1), else_=0), column),
                )
                .label(f"{key}_rank"),
                sa.func.count(column).over(partition_by=e.c.queue).label(f"{key}_n"),
            )
        ),
    ).where(*where)
    r = ranked.subquery("ranked")
    return sa.select(
        r.c.queue,
        sa.func.count(),
        sa.func.count(sa.case((r.c.status == JobStatus.FAILED, 1))),
        *(
            sa.func.min(sa.case((r.c[f"{key}_rank"] * 100 >= r.c[f"{key}_n"] * p, r.c[key])))
            for key in columns
            for p in (MEDIAN, TAIL)
        ),
    ).group_by(r.c.queue)
