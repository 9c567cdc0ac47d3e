"""Why a job whose time has come does not run: what the job page says of a due PENDING job.

Each reason is one read the console already makes elsewhere: the queue's pause (the queues
page), the live workers and the queues they take (their heartbeats), the job's resource (the
resources page), its service's circuit breakers (the breakers page) and the workers that handed
it back because they do not know its task (its hot row's refusals).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from flask_ratchet.breaker import BreakerState
from flask_ratchet.refusals import read_refusals
from flask_ratchet.schema import job_queue, node
from flask_ratchet.store.dialect import Dialect
from flask_ratchet.store.queues import Queues

from .nodes import live
from .resources import resource, service_breakers


@dataclass(frozen=True, slots=True)
class Reason:
    """One reason, as a sentence, and the console page that shows more of it."""

    text: str
    #: The console's endpoint and its arguments (``None``: no page).
    page: tuple[str, dict[str, str]] | None = None


def reasons(
    conn: Connection,
    dialect: Dialect,
    queues: Queues,
    *,
    job_id: uuid.UUID,
    queue: str,
    task: str,
    service: str,
    resource_name: str | None,
    now: datetime,
    live_after: float,
) -> list[Reason]:
    """What keeps the due PENDING job ``job_id`` (of ``queue``, ``task``, breaker ``service``
    and ``resource_name``) from running now; ``now`` is the database's time, ``live_after``
    the heartbeat age past which a worker is not live."""
    found: list[Reason] = []
    state = queues.states(conn).get(queue)
    if state is not None and state.paused:
        by = f" by {state.changed_by}" if state.changed_by else ""
        found.append(
            Reason(
                f"Its queue {queue} is paused (since {state.changed_at:%Y-%m-%d %H:%M:%S} UTC"
                f"{by}).",
                ("ratchet_console.queues", {}),
            )
        )
    found += _workers(conn, queue, now, live_after)
    if resource_name is not None:
        row = resource(conn, dialect, resource_name)
        page: tuple[str, dict[str, str]] = ("ratchet_console.resources", {})
        if row.full:
            found.append(
                Reason(
                    f"Its resource {resource_name} is full: {row.in_use} of "
                    f"{row.max_concurrent} permits are out.",
                    page,
                )
            )
        rate = row.readable_rate
        if rate is not None and row.starts >= rate.count:
            found.append(Reason(f"Its resource {resource_name} is at its rate ({rate}).", page))
    breakers = service_breakers(conn, now, live_after, service)
    open_on = [n.node_id for n in breakers.nodes if n.snapshot.state is BreakerState.OPEN]
    if open_on:
        found.append(
            Reason(
                f"The circuit breaker of {service} is open on {len(open_on)} of "
                f"{len(breakers.nodes)} workers: its jobs wait until it lets calls through.",
                ("ratchet_console.breakers", {}),
            )
        )
    refused = conn.execute(
        sa.select(job_queue.c.refused_by).where(job_queue.c.job_id == job_id)
    ).scalar()
    handed_back = read_refusals(refused)
    if handed_back:
        names = ", ".join(name for name, _ in handed_back)
        found.append(Reason(f"Workers that do not know the task {task} handed it back: {names}."))
    return found


def _workers(conn: Connection, queue: str, now: datetime, live_after: float) -> list[Reason]:
    """No live worker at all, or none that takes ``queue`` (a worker that publishes no
    queues, of an older version, is taken to take every queue)."""
    rows = conn.execute(
        sa.select(node.c.node_id, node.c.info).where(live(now, live_after)).limit(500)
    ).all()
    if not rows:
        return [
            Reason(
                f"No worker is live: none has beaten its heart in the last {live_after:g} s.",
                ("ratchet_console.nodes", {}),
            )
        ]
    taking = [r.node_id for r in rows if _takes(r.info, queue)]
    if taking:
        return []
    return [
        Reason(
            f"None of the {len(rows)} live workers takes queue {queue} (they were started "
            "with --queues naming others).",
            ("ratchet_console.nodes", {}),
        )
    ]


def _takes(info: str | None, queue: str) -> bool:
    try:
        published = json.loads(info) if info else {}
    except (ValueError, RecursionError):
        return True
    queues = published.get("queues") if isinstance(published, dict) else None
    return not isinstance(queues, list) or queue in queues
