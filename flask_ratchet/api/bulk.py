"""Cancel, retry or delete every job a filter matches, or a list of jobs, in one transaction.

Each runs in the caller's transaction (a request's, or ``ratchet.transaction()``) or one of its
own, and writes, with the changes, one audit row and one aggregate event
(:data:`flask_ratchet.events.jobs_bulk_canceled` …), sent after the commit. The changes
themselves are the store's, a chunk of jobs at a time (:class:`flask_ratchet.store.bulk.Bulk`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from .. import facts
from ..facts import Event
from ..runtime import Runtime
from ..store import Store
from ..store.types import JobFilter
from . import policy

#: Narrows each chunk to the jobs the principal may change (see :mod:`.policy`).
Keep = Callable[[Connection, list[uuid.UUID]], list[uuid.UUID]] | None
#: A bulk operation: the store's change, and the fact it is announced as.
Operation = tuple[Callable[[Store, Connection, JobFilter, Keep], int], str]

#: Each bulk operation an operator can name (a signal's delivery takes a payload:
#: :func:`flask_ratchet.api.signals.deliver_matching`).
OPERATIONS: dict[str, Operation] = {
    "cancel": (
        lambda store, conn, where, keep: store.bulk.cancel(conn, where, keep),
        facts.JOBS_BULK_CANCELED,
    ),
    "retry": (
        lambda store, conn, where, keep: store.bulk.retry(conn, where, keep),
        facts.JOBS_BULK_RETRIED,
    ),
    "delete": (
        lambda store, conn, where, keep: store.bulk.delete(conn, where, keep),
        facts.JOBS_BULK_DELETED,
    ),
}


def described(where: JobFilter) -> dict[str, Any]:
    """The filter's given fields, as JSON values (for the audit row and the event)."""
    out: dict[str, Any] = {}
    for name in where.__dataclass_fields__:
        value = getattr(where, name)
        if value is None:
            continue
        if name == "statuses":
            out["status"] = [str(s) for s in value]
        elif name == "batch_id":
            out["batch"] = str(value)
        else:
            out[name] = value.isoformat() if hasattr(value, "isoformat") else value
    return out


def change_listed(
    runtime: Runtime, action: str, ids: Sequence[uuid.UUID], shown: dict[str, Any]
) -> list[uuid.UUID] | None:
    """Apply the bulk operation ``action`` to the jobs ``ids`` names, a chunk at a time, in
    one transaction (the caller's, or one of its own), with one aggregate event whose
    ``filter`` is ``shown``; return the ids it changed. The caller writes the audit row (the
    console's names the changed jobs).

    ``None`` if a statement failed in the database (a row it could not change): the
    savepoint around the change is rolled back, nothing changed, and the transaction is
    usable, to change the jobs one at a time (:func:`~.jobs.change_each`) and refuse only
    the one that fails.

    :raises KeyError: for an ``action`` that is not one of :data:`OPERATIONS`.
    """
    _, kind = OPERATIONS[action]
    store = runtime.store

    def work(conn: Connection) -> list[uuid.UUID] | None:
        try:
            with store.savepoint(conn):
                changed = store.bulk.change_listed(conn, action, ids, _keep(runtime, action))
        except DBAPIError as exc:
            if store.dialect.transient(exc):  # the whole transaction is gone: again
                raise
            return None
        facts.record(conn, [Event(kind, {"count": len(changed), "filter": shown})])
        return changed

    return runtime.run(work)


def change_matching(
    runtime: Runtime,
    action: str,
    where: JobFilter,
    *,
    actor: str,
    role: str,
    dry_run: bool = False,
    operation: Operation | None = None,
) -> int:
    """Apply the bulk operation ``action`` (one of :data:`OPERATIONS`, or ``operation``
    under that name) to the jobs matching ``where``; return how many it changed (with
    ``dry_run``: how many it would change now, writing nothing).

    :raises KeyError: for an ``action`` that is not one of :data:`OPERATIONS`.
    """
    change, kind = operation or OPERATIONS[action]
    store = runtime.store
    shown = described(where)

    def work(conn: Connection) -> int:
        if dry_run:
            return store.bulk.count(conn, action, where, _keep(runtime, action))
        changed = change(store, conn, where, _keep(runtime, action))
        facts.record(conn, [Event(kind, {"count": changed, "filter": shown})])
        store.cluster.record_audit(
            conn,
            at=store.now(conn),
            actor=actor,
            role=role,
            action=action,
            scope="filter",
            target=json.dumps({"filter": shown}),
            requested=changed,
            changed=changed,
        )
        return changed

    return runtime.run(work, atomic=True)


def _keep(runtime: Runtime, action: str) -> Keep:
    """What narrows each chunk to the jobs the principal may ``action``: nothing without a
    policy."""
    if not policy.active(runtime):
        return None
    return lambda conn, ids: policy.permitted(runtime, conn, action, ids)
