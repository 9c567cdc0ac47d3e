"""What a job's end sets off: batch counts, dependents released or canceled, callbacks.

Runs in the transaction that ended the jobs (the completer's, a cancel's, orphan recovery's), so
a child is counted exactly when it ends and a dependent is decided exactly once: each write here
is a compare-and-swap (the batch row only while ``finished_at IS NULL``, a condition only while
``decision IS NULL``, a hot row only in the statuses :mod:`flask_ratchet.states` allows), and
the transaction that loses a race changes nothing. Only jobs written with ``follow_up`` are
looked at, so plain jobs pay nothing here.

Ending one job may end others (a batch's last child ends the batch, a failed step cancels the
steps after it): :meth:`FlowStore.after_end` works in rounds until nothing more ends.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .. import events
from ..events import Event
from ..flow import (
    NOT_YET,
    BatchCounts,
    Condition,
    Decision,
    JobType,
    batch_outcome,
    decoded,
    holds,
    predicate_error,
)
from ..job import BatchProgress
from ..schema import batch, business_key, job, job_queue, job_tag, workflow_condition
from ..states import Action, JobStatus, sources, target
from .base import chunks
from .dialect import DialectHooks

log = logging.getLogger("flask_ratchet")

#: ``evaluate(parent job id, predicate task name, parent's result) -> bool``; may raise. The
#: worker evaluates predicates before its write transaction and looks the values up here.
Evaluator = Callable[[uuid.UUID, str, Any], bool]


def no_predicates(parent_id: uuid.UUID, name: str, result: Any) -> bool:
    """The evaluator outside a worker: predicates only run where the parent succeeded."""
    raise RuntimeError(f"predicate {name} can only be evaluated by a worker")


@dataclass(frozen=True, slots=True)
class Ended:
    """A job that has just reached a terminal status in this transaction."""

    job_id: uuid.UUID
    status: JobStatus
    result: str | None = None  # JSON
    error: str | None = None
    run_ms: float | None = None
    wait_ms: float | None = None
    cascade: bool = False  # canceled because an upstream job ended
    #: The batch of a child, when the caller knows it (a batch child has nothing else to
    #: follow up: no dependents, no callbacks), which spares looking the job up.
    batch_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class Link:
    """A dependent's condition on its parent, to insert with the dependent."""

    job_id: uuid.UUID
    parent_id: uuid.UUID
    kind: Condition
    predicate: str | None = None
    threshold: float | None = None


@dataclass(frozen=True, slots=True)
class NewBatch:
    """A batch's row, inserted with its parent job."""

    batch_id: uuid.UUID
    name: str
    total: int
    progress_task: str | None = None


_CHUNK = 500


class FlowStore(DialectHooks):
    """Follow-ups of ended jobs. Mixed into the dialect stores."""

    def end_live(
        self,
        conn: Connection,
        job_id: uuid.UUID,
        action: Action,
        *,
        error: str | None = None,
        result: str | None = None,
        node_id: str | None = None,
    ) -> JobStatus | None:
        """Apply a terminal ``action`` to a live job: the guarded delete of its hot row (the
        swap), then its cold row. Return the new status, or None if the job was not in a
        status ``action`` allows (nothing changed). Follow-ups are the caller's."""
        guard = [job_queue.c.job_id == job_id, job_queue.c.status.in_(sources(action))]
        if node_id is not None:
            guard.append(job_queue.c.picked_by == node_id)
        gone = conn.execute(
            sa.delete(job_queue)
            .where(*guard)
            .returning(job_queue.c.status, job_queue.c.attempts, job_queue.c.progress)
        ).first()
        if gone is None:
            return None
        status = target(action, JobStatus(gone.status))
        conn.execute(
            sa.update(job)
            .where(job.c.job_id == job_id)
            .values(
                terminal_status=status,
                terminal_error=error,
                result=result,
                attempts=gone.attempts,
                progress=gone.progress,
                finished_at=self.now_sql(),
            )
        )
        conn.execute(sa.delete(business_key).where(business_key.c.job_id == job_id))
        return status

    def insert_links(self, conn: Connection, links: Sequence[Link]) -> None:
        """Insert dependents' conditions (their jobs are inserted first)."""
        for part in chunks(links, _CHUNK):
            conn.execute(
                sa.insert(workflow_condition),
                [
                    {
                        "job_id": link.job_id,
                        "parent_id": link.parent_id,
                        "kind": str(link.kind),
                        "predicate": link.predicate,
                        "threshold": link.threshold,
                    }
                    for link in part
                ],
            )

    def insert_batch(self, conn: Connection, new: NewBatch) -> None:
        """Insert a batch's row (its parent job is inserted first)."""
        conn.execute(
            sa.insert(batch).values(
                batch_id=new.batch_id,
                name=new.name,
                total=new.total,
                succeeded=0,
                failed=0,
                child_run_ms=0.0,
                child_wait_ms=0.0,
                progress_task=new.progress_task,
                created_at=self.now_sql(),
            )
        )

    def discard_batch(
        self, conn: Connection, batch_id: uuid.UUID, others: Sequence[uuid.UUID]
    ) -> None:
        """Delete a batch this transaction was writing, with its children and ``others`` (its
        parent's follow-ups): a streamed batch whose source failed inside a caller's
        transaction must leave nothing in it."""
        children = sa.select(job.c.job_id).where(job.c.batch_id == batch_id).scalar_subquery()
        ids = [batch_id, *others]
        for table in (business_key, job_tag, job_queue):
            conn.execute(sa.delete(table).where(table.c.job_id.in_(children)))
            conn.execute(sa.delete(table).where(table.c.job_id.in_(ids)))
        conn.execute(sa.delete(workflow_condition).where(workflow_condition.c.job_id.in_(ids)))
        conn.execute(sa.delete(batch).where(batch.c.batch_id == batch_id))
        conn.execute(sa.delete(job).where(job.c.batch_id == batch_id))
        conn.execute(sa.delete(job).where(job.c.job_id.in_(ids)))

    def set_batch_total(self, conn: Connection, batch_id: uuid.UUID, total: int) -> None:
        """Set the child count of a batch whose children were streamed in."""
        conn.execute(sa.update(batch).where(batch.c.batch_id == batch_id).values(total=total))

    def batch_progress(self, conn: Connection, batch_id: uuid.UUID) -> BatchProgress | None:
        """A batch's counts and metrics, or None if there is no such batch."""
        row = conn.execute(sa.select(batch).where(batch.c.batch_id == batch_id)).first()
        return None if row is None else progress_of(row)

    # -- lock order and batch counts outside the completer ---------------------------------------

    def pending_predicates(
        self, conn: Connection, parent_ids: Sequence[uuid.UUID]
    ) -> list[tuple[uuid.UUID, str]]:
        """(parent id, predicate) of the undecided WHEN branches of these jobs."""
        rows = conn.execute(
            sa.select(workflow_condition.c.parent_id, workflow_condition.c.predicate)
            .where(
                workflow_condition.c.parent_id.in_(list(parent_ids)),
                workflow_condition.c.kind == Condition.WHEN,
                workflow_condition.c.decision.is_(None),
            )
            .distinct()
        )
        return [(r.parent_id, r.predicate) for r in rows]

    def lock_batches(self, conn: Connection, batch_ids: Sequence[uuid.UUID]) -> None:
        """Lock batch rows, in id order, before any job row: every writer that may count into
        or settle a batch takes its locks in this order, so none waits for another in a cycle
        (PostgreSQL; SQLite's writers are serialised anyway)."""
        if batch_ids:
            conn.execute(
                sa.select(batch.c.batch_id)
                .where(batch.c.batch_id.in_(sorted(set(batch_ids))))
                .order_by(batch.c.batch_id)
                .with_for_update()
            ).all()

    def lock_batches_of(self, conn: Connection, job_ids: Sequence[uuid.UUID]) -> None:
        """:meth:`lock_batches` for the batches these jobs are children or parents of."""
        mine = conn.execute(
            sa.select(sa.func.coalesce(job.c.batch_id, job.c.job_id)).where(
                job.c.job_id.in_(list(job_ids)),
                sa.or_(job.c.batch_id.is_not(None), job.c.job_type == JobType.BATCH),
            )
        ).scalars()
        self.lock_batches(conn, list(mine))

    def uncount_child(self, conn: Connection, job_id: uuid.UUID) -> None:
        """A FAILED child is live again (retried, or paused): its failure no longer counts in
        its batch, while the batch is unsettled (a settled batch keeps its counts)."""
        parent = conn.execute(sa.select(job.c.batch_id).where(job.c.job_id == job_id)).scalar()
        if parent is not None:
            conn.execute(
                sa.update(batch)
                .where(batch.c.batch_id == parent, batch.c.finished_at.is_(None))
                .values(failed=batch.c.failed - 1)
            )

    def recount_child(self, conn: Connection, job_id: uuid.UUID, status: JobStatus) -> None:
        """A paused FAILED child resumed to FAILED: it counts in its batch again (and may be
        the batch's last)."""
        parent = conn.execute(sa.select(job.c.batch_id).where(job.c.job_id == job_id)).scalar()
        if parent is None:
            return
        out: list[Event] = []
        child = Ended(job_id, status, batch_id=parent)
        link = {job_id: _Link(JobType.BATCH_CHILD, parent, None, None)}
        settled = self._count_children(conn, [child], link, out)
        events.record(conn, out)
        if settled:
            self.after_end(conn, settled)

    def after_end(
        self,
        conn: Connection,
        ended: Sequence[Ended],
        evaluate: Evaluator = no_predicates,
    ) -> None:
        """Set off what the end of ``ended`` sets off, in this transaction, and record the
        events to send once it commits (:func:`flask_ratchet.events.record`)."""
        frontier = list(ended)
        while frontier:
            links = {
                e.job_id: _Link(JobType.BATCH_CHILD, e.batch_id, None, None)
                for e in frontier
                if e.batch_id is not None
            }
            links |= self._links(conn, [e.job_id for e in frontier if e.job_id not in links])
            mine = [e for e in frontier if e.job_id in links]
            if not mine:
                return
            out: list[Event] = []
            later = self._count_children(conn, mine, links, out)
            later += self._cascade_batches(conn, mine, links, out)
            later += self._decide(conn, mine, links, evaluate, out)
            _callbacks(mine, links, out)
            events.record(conn, out)
            frontier = later

    # -- what the ended jobs are linked to -----------------------------------------------------

    def _links(self, conn: Connection, ids: list[uuid.UUID]) -> dict[uuid.UUID, _Link]:
        """The ended jobs that have follow-ups, with what they are linked to."""
        out: dict[uuid.UUID, _Link] = {}
        if not ids:
            return out
        for part in chunks(ids, _CHUNK):
            rows = conn.execute(
                sa.select(
                    job.c.job_id,
                    job.c.job_type,
                    job.c.batch_id,
                    job.c.callbacks,
                    workflow_condition.c.kind,
                )
                .select_from(
                    job.outerjoin(workflow_condition, workflow_condition.c.job_id == job.c.job_id)
                )
                .where(job.c.job_id.in_(list(part)), job.c.follow_up.is_(True))
            )
            for r in rows:
                out[r.job_id] = _Link(r.job_type, r.batch_id, r.callbacks, r.kind)
        return out

    # -- batches -------------------------------------------------------------------------------

    def _count_children(
        self,
        conn: Connection,
        ended: list[Ended],
        links: dict[uuid.UUID, _Link],
        out: list[Event],
    ) -> list[Ended]:
        """Count ended children into their batches; settle each batch whose last child this
        was. Return the batch parents that ended."""
        tallies: dict[uuid.UUID, list[float]] = defaultdict(lambda: [0, 0, 0.0, 0.0])
        for e in ended:
            parent = links[e.job_id].batch_id
            if parent is None:
                continue
            tally = tallies[parent]
            tally[0 if e.status == JobStatus.SUCCEEDED else 1] += 1
            tally[2] += e.run_ms or 0.0
            tally[3] += e.wait_ms or 0.0
        settled: list[Ended] = []
        for batch_id, (ok, bad, run_ms, wait_ms) in sorted(tallies.items()):
            row = conn.execute(
                sa.update(batch)
                .where(batch.c.batch_id == batch_id, batch.c.finished_at.is_(None))
                .values(
                    succeeded=batch.c.succeeded + int(ok),
                    failed=batch.c.failed + int(bad),
                    child_run_ms=batch.c.child_run_ms + run_ms,
                    child_wait_ms=batch.c.child_wait_ms + wait_ms,
                )
                .returning(
                    batch.c.name,
                    batch.c.total,
                    batch.c.succeeded,
                    batch.c.failed,
                    batch.c.progress_task,
                )
            ).first()
            if row is None:
                continue  # already settled (its parent was canceled): nothing to count into
            counts = BatchCounts(row.total, row.succeeded, row.failed)
            if row.progress_task:
                out.append(
                    Event(
                        events.CALLBACK,
                        {"task": row.progress_task, "batch_id": batch_id, "counts": counts},
                    )
                )
            if counts.ended >= counts.total:
                done = self.settle_batch(conn, batch_id, row.name, out)
                if done is not None:
                    settled.append(done)
        return settled

    def settle_batch(
        self, conn: Connection, batch_id: uuid.UUID, name: str, out: list[Event]
    ) -> Ended | None:
        """End a batch whose children have all ended: exactly once (``finished_at`` is the
        swap), and its parent job SUCCEEDED or FAILED. Return the parent's end, or None if
        another transaction settled it or the parent had already ended (canceled)."""
        row = conn.execute(
            sa.update(batch)
            .where(
                batch.c.batch_id == batch_id,
                batch.c.finished_at.is_(None),
                batch.c.succeeded + batch.c.failed >= batch.c.total,
            )
            .values(finished_at=self.now_sql())
            .returning(batch.c.total, batch.c.succeeded, batch.c.failed)
        ).first()
        if row is None:
            return None
        counts = BatchCounts(row.total, row.succeeded, row.failed)
        status, error = batch_outcome(counts)
        action = Action.BATCH_SUCCEED if status == JobStatus.SUCCEEDED else Action.BATCH_FAIL
        ended = self.end_live(conn, batch_id, action, error=error, result=counts.to_json())
        out.append(
            Event(
                events.batch_completed.name,
                {
                    "batch_id": batch_id,
                    "name": name,
                    # A parent that already ended was canceled: the batch ends with it.
                    "status": ended or JobStatus.CANCELED,
                    "total": counts.total,
                    "succeeded": counts.succeeded,
                    "failed": counts.failed,
                },
            )
        )
        if ended is None:
            return None
        return Ended(batch_id, ended, result=counts.to_json(), error=error)

    def settle_stranded_batches(self, conn: Connection, limit: int = 100) -> int:
        """The recovery sweep: settle batches that are not finished although none of their
        children is live any more (their counts are recounted from the children). Counting
        happens in the transaction that ends each child, so this finds nothing unless rows were
        changed behind ratchet's back; it is the safety net. Return how many it settled."""
        live_child = (
            sa.select(job.c.job_id)
            .select_from(job.join(job_queue, job_queue.c.job_id == job.c.job_id))
            .where(job.c.batch_id == batch.c.batch_id)
        )
        stranded = conn.execute(
            sa.select(batch.c.batch_id, batch.c.name)
            .where(batch.c.finished_at.is_(None), ~sa.exists(live_child))
            .limit(limit)
        ).all()
        settled = 0
        for row in stranded:
            ok = sa.func.count().filter(job.c.terminal_status == JobStatus.SUCCEEDED)
            counts = conn.execute(
                sa.select(ok, sa.func.count()).where(job.c.batch_id == row.batch_id)
            ).one()
            conn.execute(
                sa.update(batch)
                .where(batch.c.batch_id == row.batch_id, batch.c.finished_at.is_(None))
                .values(total=counts[1], succeeded=counts[0], failed=counts[1] - counts[0])
            )
            out: list[Event] = []
            ended = self.settle_batch(conn, row.batch_id, row.name, out)
            events.record(conn, out)
            if ended is not None:
                self.after_end(conn, [ended])
                settled += 1
        return settled

    def _cascade_batches(
        self,
        conn: Connection,
        ended: list[Ended],
        links: dict[uuid.UUID, _Link],
        out: list[Event],
    ) -> list[Ended]:
        """A batch parent that was canceled cancels its children that have not ended."""
        canceled: list[Ended] = []
        for e in ended:
            if links[e.job_id].job_type != JobType.BATCH or e.status != JobStatus.CANCELED:
                continue
            # Each child canceled here is counted in the next round, and the last one settles
            # the batch (the parent, already CANCELED, stays so).
            live = conn.execute(
                sa.select(job.c.job_id)
                .select_from(job.join(job_queue, job_queue.c.job_id == job.c.job_id))
                .where(job.c.batch_id == e.job_id)
            ).scalars()
            for child in list(live):
                status = self.end_live(conn, child, Action.CANCEL)
                if status is not None:
                    canceled.append(Ended(child, status, cascade=True, batch_id=e.job_id))
                    out.append(Event(events.job_canceled.name, {"job_id": child, "cascade": True}))
        return canceled

    # -- dependents ----------------------------------------------------------------------------

    def _decide(
        self,
        conn: Connection,
        ended: list[Ended],
        links: dict[uuid.UUID, _Link],
        evaluate: Evaluator,
        out: list[Event],
    ) -> list[Ended]:
        """Decide the dependents of ``ended``: release those whose condition holds, cancel the
        rest. Return the dependents that were canceled (their own dependents are next)."""
        # A batch child never has dependents: only the others are looked up.
        by_id = {e.job_id: e for e in ended if links[e.job_id].job_type != JobType.BATCH_CHILD}
        pending: dict[uuid.UUID, list[Any]] = defaultdict(list)
        for part in chunks(list(by_id), _CHUNK):
            rows = conn.execute(
                sa.select(workflow_condition).where(workflow_condition.c.parent_id.in_(list(part)))
            )
            for r in rows:
                pending[r.parent_id].append(r)
        canceled: list[Ended] = []
        for parent in by_id.values():
            parent_id = parent.job_id
            every = pending.get(parent_id, [])
            # Decided ones were decided when the job first ended (it was retried since).
            conditions = [c for c in every if c.decision is None]
            decisions = _route(parent, conditions, evaluate)
            for cond, (decision, error) in zip(conditions, decisions, strict=True):
                if not self._claim_decision(conn, cond.job_id, decision, error):
                    continue  # decided by another transaction
                if decision == Decision.TRIGGERED:
                    if not self._release(conn, cond.job_id):
                        continue  # canceled by hand meanwhile: nothing to announce
                    out.append(
                        Event(
                            events.branch_triggered.name,
                            {
                                "job_id": cond.job_id,
                                "parent_id": parent_id,
                                "condition": cond.kind,
                            },
                        )
                    )
                    out.append(Event(events.WAKE))
                    continue
                status = self.end_live(conn, cond.job_id, Action.CANCEL, error=error)
                if status is not None:
                    canceled.append(Ended(cond.job_id, status, error=error, cascade=True))
            _chain_events(parent, links[parent_id], every, out)
        for e in canceled:
            out.append(Event(events.job_canceled.name, {"job_id": e.job_id, "cascade": True}))
        return canceled

    def _claim_decision(
        self, conn: Connection, job_id: uuid.UUID, decision: Decision, error: str | None
    ) -> bool:
        done = conn.execute(
            sa.update(workflow_condition)
            .where(workflow_condition.c.job_id == job_id, workflow_condition.c.decision.is_(None))
            .values(decision=decision, error=error, decided_at=self.now_sql())
        )
        return bool(done.rowcount == 1)

    def _release(self, conn: Connection, job_id: uuid.UUID) -> bool:
        """Make a waiting dependent due now (also when an operator paused it meanwhile: it
        keeps its status and is due once resumed)."""
        released = conn.execute(
            sa.update(job_queue)
            .where(
                job_queue.c.job_id == job_id,
                job_queue.c.status.in_([JobStatus.PENDING, JobStatus.PAUSED]),
                job_queue.c.scheduled_time == NOT_YET,
            )
            .values(
                scheduled_time=self.now_sql(),
                version=job_queue.c.version + 1,
                updated_at=self.now_sql(),
            )
        )
        if released.rowcount != 1:
            return False
        conn.execute(
            sa.update(job).where(job.c.job_id == job_id).values(first_due_at=self.now_sql())
        )
        return True


def progress_of(row: Any) -> BatchProgress:
    """A ``ratchet_batch`` row as a :class:`BatchProgress`."""
    return BatchProgress(
        batch_id=row.batch_id,
        name=row.name,
        total=row.total,
        succeeded=row.succeeded,
        failed=row.failed,
        finished=row.finished_at is not None,
        child_run_ms=row.child_run_ms,
        child_wait_ms=row.child_wait_ms,
        created_at=row.created_at,
        finished_at=row.finished_at,
    )


@dataclass(frozen=True, slots=True)
class _Link:
    job_type: str
    batch_id: uuid.UUID | None
    callbacks: str | None
    condition: str | None  # the job's own condition, if it is a dependent


def _route(
    parent: Ended, conditions: list[Any], evaluate: Evaluator
) -> list[tuple[Decision, str | None]]:
    """Each condition's decision. A predicate that raises fails the parent's routing: every
    branch is canceled, with the error."""
    counts = BatchCounts.from_json(parent.result)
    values: dict[uuid.UUID, bool] = {}
    branches = [c for c in conditions if c.kind == Condition.WHEN]
    if branches and parent.status == JobStatus.SUCCEEDED:
        result = decoded(parent.result)
        for cond in branches:
            try:
                values[cond.job_id] = bool(evaluate(parent.job_id, cond.predicate, result))
            except Exception as exc:
                error = predicate_error(cond.predicate, exc)
                log.error("job %s: %s", parent.job_id, error)
                return [(Decision.ERROR, error) for _ in conditions]
    decisions: list[tuple[Decision, str | None]] = []
    for cond in conditions:
        ok = holds(
            Condition(cond.kind),
            parent.status,
            threshold=cond.threshold,
            counts=counts,
            predicate=values.get(cond.job_id, False),
        )
        decisions.append((Decision.TRIGGERED, None) if ok else (Decision.SKIPPED, None))
    return decisions


def _chain_events(parent: Ended, link: _Link, conditions: list[Any], out: list[Event]) -> None:
    """A chain's end: its last step succeeded, or a step failed or was canceled directly."""
    steps = [c for c in conditions if c.kind == Condition.THEN]
    in_chain = bool(steps) or link.condition == Condition.THEN
    if not in_chain:
        return
    if parent.status == JobStatus.SUCCEEDED and not steps:
        out.append(Event(events.chain_completed.name, {"job_id": parent.job_id}))
    elif parent.status != JobStatus.SUCCEEDED and not parent.cascade:
        out.append(
            Event(events.chain_failed.name, {"job_id": parent.job_id, "status": parent.status})
        )


def _callbacks(ended: list[Ended], links: dict[uuid.UUID, _Link], out: list[Event]) -> None:
    """A job's own callbacks: on success, or on failure for good (not on cancel)."""
    for e in ended:
        text = links[e.job_id].callbacks
        if not text:
            continue
        which = {JobStatus.SUCCEEDED: "success", JobStatus.FAILED: "failure"}.get(e.status)
        if which is None:
            continue
        for name in json.loads(text).get(which, []):
            out.append(Event(events.CALLBACK, {"task": name, "job_id": e.job_id}))
