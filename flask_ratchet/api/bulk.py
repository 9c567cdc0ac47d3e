"""Cancel, retry or delete every job a filter matches, or a list of jobs, in one transaction;
and the same for one batch: cancel it, or retry its failed children.

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
from ..ids import job_id_of
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
        _audit(store, conn, actor, role, action, "filter", json.dumps({"filter": shown}), changed)
        return changed

    return runtime.run(work, atomic=True)


def cancel_batch(
    runtime: Runtime,
    batch_id: uuid.UUID | str,
    *,
    actor: str,
    role: str,
    dry_run: bool = False,
) -> int:
    """Cancel a batch that has not settled: its parent job, which cancels every child that has
    not ended (the cascade of a canceled parent), in one transaction with one audit row
    (action ``cancel-batch``, scope ``batch``). Return how many jobs it canceled, the parent
    included (with ``dry_run``: how many it would cancel now, writing nothing); 0 for a batch
    that has settled, or no batch.

    The parent ends CANCELED, so the batch's follow-ups are canceled too, where canceling its
    children alone (``cancel_jobs(batch=…)``) settles it FAILED and runs its ``on_failure``.
    With a policy (:mod:`.policy`), the principal must be allowed to cancel the parent and
    every child that has not ended: the cascade spares none of them, so otherwise nothing is
    canceled (0).

    :raises ValueError: for a ``batch_id`` that is not a job id.
    """
    key = job_id_of(batch_id)
    store = runtime.store
    children = JobFilter(batch_id=key)

    def work(conn: Connection) -> int:
        if not dry_run:
            # The batch row first: every writer that ends a child locks it before the child,
            # so the children counted here are the ones the cascade finds. (A dry run reads
            # only: a confirmation page takes no lock.)
            store.flows.batches.lock(conn, [key])
        found = store.flows.batches.batch_progress(conn, key)
        if found is None or found.finished:
            return 0
        live = store.bulk.count(conn, "cancel", children)
        keep = _keep(runtime, "cancel")
        if keep is not None and (
            not policy.may(runtime, conn, "cancel", key)
            or store.bulk.count(conn, "cancel", children, keep) < live
        ):
            return 0
        if dry_run:
            return live + 1
        if not store.jobs.cancel(conn, key):
            return 0  # the parent had ended (a batch that never settled): nothing to cascade
        changed = 1 + live - store.bulk.count(conn, "cancel", children)
        _audit(store, conn, actor, role, "cancel-batch", "batch", str(key), changed)
        return changed

    return runtime.run(work, atomic=True)


def retry_failed_children(
    runtime: Runtime,
    batch_id: uuid.UUID | str,
    *,
    actor: str,
    role: str,
    dry_run: bool = False,
) -> int:
    """Retry every FAILED child of a batch (PENDING, attempts reset, due now), as
    ``retry_jobs(batch=…)`` does, with one audit row (action ``retry-failed-children``, scope
    ``batch``) and one :data:`~flask_ratchet.events.jobs_bulk_retried` event; return how many
    (with ``dry_run``: how many it would retry now, writing nothing).

    A batch that has not settled counts the retried children again as they end; a settled
    batch keeps its counts and its follow-ups as decided (the children run on their own).

    :raises ValueError: for a ``batch_id`` that is not a job id.
    """
    key = job_id_of(batch_id)
    store = runtime.store
    children = JobFilter(batch_id=key)

    def work(conn: Connection) -> int:
        keep = _keep(runtime, "retry")
        if dry_run:
            return store.bulk.count(conn, "retry", children, keep)
        changed = store.bulk.retry(conn, children, keep)
        shown = described(children)
        facts.record(conn, [Event(facts.JOBS_BULK_RETRIED, {"count": changed, "filter": shown})])
        _audit(store, conn, actor, role, "retry-failed-children", "batch", str(key), changed)
        return changed

    return runtime.run(work, atomic=True)


def _audit(
    store: Store,
    conn: Connection,
    actor: str,
    role: str,
    action: str,
    scope: str,
    target: str,
    changed: int,
) -> None:
    """The operation's ``ratchet_audit`` row, stamped by the database's clock."""
    store.cluster.record_audit(
        conn,
        at=store.now(conn),
        actor=actor,
        role=role,
        action=action,
        scope=scope,
        target=target,
        requested=changed,
        changed=changed,
    )


def _keep(runtime: Runtime, action: str) -> Keep:
    """What narrows each chunk to the jobs the principal may ``action``: nothing without a
    policy."""
    if not policy.active(runtime):
        return None
    return lambda conn, ids: policy.permitted(runtime, conn, action, ids)
