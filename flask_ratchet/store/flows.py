"""What a job's end sets off: batch counts, dependents released or canceled, callbacks.

Runs in the transaction that ended the jobs (the completer's, a cancel's, orphan recovery's), so
a child is counted exactly when it ends and a dependent is decided exactly once: each write here
is a compare-and-swap (the batch row only while ``finished_at IS NULL``, a condition only while
``decision IS NULL``, a hot row only in the statuses :mod:`flask_ratchet.states` allows), and
the transaction that loses a race changes nothing. Only jobs written with ``follow_up`` are
looked at, so plain jobs pay nothing here.

Ending one job may end others (a batch's last child ends the batch, a failed step cancels the
steps after it): :meth:`Flows.ended`, the one entry point every terminal write calls (completion,
cancel, orphan recovery, a batch's settling), works in rounds until nothing more ends.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .. import facts
from ..facts import Event
from ..flows import (
    NOT_YET,
    BatchCounts,
    Condition,
    Decision,
    JobType,
    holds,
    predicate_error,
    unreadable_condition,
    unreadable_decision,
)
from ..retry import first_line
from ..schema import batch, job, job_queue, workflow_condition
from ..states import Action, JobStatus
from .batches import Batches, JobLinks, record_cascade
from .dialect import Dialect, chunks
from .terminal import end_live
from .types import Ended, Evaluator, Link, no_predicates

log = logging.getLogger("flask_ratchet")


class Flows:
    """What links jobs (conditions, batches) and what a job's end sets off."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self.batches = Batches(dialect)
        #: Told of each dependent released, in its transaction: a step that awaits a signal
        #: starts waiting then (:meth:`.Signals.park_released`, set by the store).
        self.on_released: Callable[[Connection, uuid.UUID], None] = lambda conn, job_id: None

    def insert_links(self, conn: Connection, links: Sequence[Link]) -> None:
        """Insert dependents' conditions (their jobs are inserted first)."""
        for part in chunks(links):
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

    # -- predicates and batch counts outside the completer --------------------------------------

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

    def recount_child(self, conn: Connection, job_id: uuid.UUID, status: JobStatus) -> None:
        """A paused FAILED child resumed to FAILED: it counts in its batch again (and may be
        the batch's last)."""
        parent = conn.execute(sa.select(job.c.batch_id).where(job.c.job_id == job_id)).scalar()
        if parent is None:
            return
        self.ended(conn, [Ended(job_id, status, batch_id=parent)])

    # -- the one entry point after a job's end -------------------------------------------------

    def ended(
        self,
        conn: Connection,
        ended: Sequence[Ended],
        evaluate: Evaluator = no_predicates,
        *,
        isolate: bool = False,
    ) -> None:
        """Set off what the end of ``ended`` sets off, in this transaction, and record the
        facts to announce once it commits (:func:`flask_ratchet.facts.record`).

        ``isolate``: each job's follow-ups in a savepoint of their own (see :meth:`_alone`), for
        a batch of outcomes that failed to write whole.
        """
        if isolate:
            for one in ended:
                self._alone(conn, one, evaluate)
        elif ended:
            self._rounds(conn, ended, evaluate)

    def _alone(self, conn: Connection, ended: Ended, evaluate: Evaluator) -> None:
        """Set off what one job's end sets off, in a savepoint: if that fails (a row it reads
        holds what ratchet never writes, in a way nothing before caught), the job's outcome is
        written all the same and its follow-ups are left as they are, with one log line (a
        batch is settled later by the recovery sweep; a dependent waits for an operator)."""
        earlier = facts.take(conn)
        try:
            with self.dialect.savepoint(conn):
                self._rounds(conn, [ended], evaluate)
        except Exception as exc:
            facts.take(conn)  # recorded by what the savepoint took back: it never happened
            log.error(
                "job %s ended %s, but what its end sets off failed (%s: %s); its outcome is "
                "written, its follow-ups are left as they are",
                ended.job_id,
                ended.status,
                type(exc).__name__,
                first_line(exc),
            )
        facts.record(conn, [*earlier, *facts.take(conn)])

    def _rounds(self, conn: Connection, ended: Sequence[Ended], evaluate: Evaluator) -> None:
        frontier = list(ended)
        while frontier:
            links = {
                e.job_id: JobLinks(JobType.BATCH_CHILD, e.batch_id, None, None)
                for e in frontier
                if e.batch_id is not None
            }
            links |= self._links(conn, [e.job_id for e in frontier if e.job_id not in links])
            mine = [e for e in frontier if e.job_id in links]
            if not mine:
                return
            out: list[Event] = []
            later = self.batches.count_children(conn, mine, links, out)
            later += self.batches.cascade_batches(conn, mine, links, out)
            later += self._decide(conn, mine, links, evaluate, out)
            _callbacks(mine, links, out)
            facts.record(conn, out)
            frontier = later

    # -- what the ended jobs are linked to -----------------------------------------------------

    def _links(self, conn: Connection, ids: list[uuid.UUID]) -> dict[uuid.UUID, JobLinks]:
        """The ended jobs that have follow-ups, with what they are linked to."""
        out: dict[uuid.UUID, JobLinks] = {}
        if not ids:
            return out
        for part in chunks(ids):
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
                out[r.job_id] = JobLinks(r.job_type, r.batch_id, r.callbacks, r.kind)
        return out

    # -- batches -------------------------------------------------------------------------------

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
            if self.batches.recount_batch(conn, row.batch_id) is not None:
                settled += self.settle(conn, row.batch_id, row.name)
        return settled

    def settle(self, conn: Connection, batch_id: uuid.UUID, name: str) -> bool:
        """Settle a batch whose children have all ended (an empty one: at once) and set off
        what its parent's end sets off; False if it was settled already."""
        out: list[Event] = []
        ended = self.batches.settle_batch(conn, batch_id, name, out)
        facts.record(conn, out)
        if ended is None:
            return False
        self.ended(conn, [ended])
        return True

    # -- dependents ----------------------------------------------------------------------------

    def _decide(
        self,
        conn: Connection,
        ended: list[Ended],
        links: dict[uuid.UUID, JobLinks],
        evaluate: Evaluator,
        out: list[Event],
    ) -> list[Ended]:
        """Decide the dependents of ``ended``: release those whose condition holds, cancel the
        rest. Return the dependents that were canceled (their own dependents are next)."""
        # A batch child never has dependents: only the others are looked up.
        by_id = {e.job_id: e for e in ended if links[e.job_id].job_type != JobType.BATCH_CHILD}
        pending: dict[uuid.UUID, list[Any]] = defaultdict(list)
        for part in chunks(list(by_id)):
            rows = conn.execute(
                sa.select(workflow_condition).where(workflow_condition.c.parent_id.in_(list(part)))
            )
            for r in rows:
                pending[r.parent_id].append(r)
        canceled: list[Ended] = []
        for parent in by_id.values():
            parent_id = parent.job_id
            every = pending.get(parent_id, [])
            # Decided ones were decided when the job first ended (it was retried since); a
            # decision ratchet never writes is no decision, and is decided again (canceled).
            conditions = [c for c in every if c.decision not in _DECIDED]
            decisions = _route(parent, conditions, evaluate)
            for cond, (decision, error) in zip(conditions, decisions, strict=True):
                if not self._claim_decision(conn, cond, decision, error):
                    continue  # decided by another transaction
                if decision == Decision.TRIGGERED:
                    if not self._release(conn, cond.job_id):
                        continue  # canceled by hand meanwhile: nothing to announce
                    out.append(
                        Event(
                            facts.BRANCH_TRIGGERED,
                            {
                                "job_id": cond.job_id,
                                "parent_id": parent_id,
                                "condition": cond.kind,
                            },
                        )
                    )
                    out.append(Event(facts.WAKE))
                    continue
                status = end_live(self.dialect, conn, cond.job_id, Action.CANCEL, error=error)
                if status is not None:
                    canceled.append(Ended(cond.job_id, status, cascade=True))
            _chain_events(parent, links[parent_id], every, out)
        record_cascade(canceled, out)
        return canceled

    def _claim_decision(
        self, conn: Connection, cond: Any, decision: Decision, error: str | None
    ) -> bool:
        """Record ``cond``'s decision, if it is still as it was read (undecided, or holding a
        decision ratchet never writes)."""
        done = conn.execute(
            sa.update(workflow_condition)
            .where(
                workflow_condition.c.job_id == cond.job_id,
                workflow_condition.c.decision.is_not_distinct_from(cond.decision),
            )
            .values(decision=decision, error=error, decided_at=self.dialect.now_sql())
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
                scheduled_time=self.dialect.now_sql(),
                version=job_queue.c.version + 1,
                updated_at=self.dialect.now_sql(),
            )
        )
        if released.rowcount != 1:
            return False
        conn.execute(
            sa.update(job).where(job.c.job_id == job_id).values(first_due_at=self.dialect.now_sql())
        )
        # A step that awaits a signal waits from now, its signal's wait counted from here.
        self.on_released(conn, job_id)
        return True


_DECIDED = frozenset(Decision)


def _route(
    parent: Ended, conditions: list[Any], evaluate: Evaluator
) -> list[tuple[Decision, str | None]]:
    """Each condition's decision. A predicate that raises fails the parent's routing: every
    branch is canceled, with the error. A condition that cannot be read (a row ratchet never
    wrote) cancels its own dependent alone, with an error naming the column."""
    unreadable = _unreadable(parent, conditions)
    decided = _route_readable(
        parent, [c for c in conditions if c.job_id not in unreadable], evaluate
    )
    return [
        (Decision.ERROR, unreadable[c.job_id]) if c.job_id in unreadable else decided.pop(0)
        for c in conditions
    ]


def _unreadable(parent: Ended, conditions: list[Any]) -> dict[uuid.UUID, str]:
    """The conditions that cannot be decided, with the error of each (logged once)."""
    found: dict[uuid.UUID, str] = {}
    for cond in conditions:
        problem = unreadable_condition(cond.kind, cond.decision, cond.predicate, cond.threshold)
        if problem is not None:
            found[cond.job_id] = unreadable_decision(problem)
            log.error("job %s: dependent %s is canceled: %s", parent.job_id, cond.job_id, problem)
    return found


def _route_readable(
    parent: Ended, conditions: list[Any], evaluate: Evaluator
) -> list[tuple[Decision, str | None]]:
    counts = BatchCounts.from_json(parent.result)
    values: dict[uuid.UUID, bool] = {}
    branches = [c for c in conditions if c.kind == Condition.WHEN]
    if branches and parent.status == JobStatus.SUCCEEDED:
        for cond in branches:
            try:
                values[cond.job_id] = bool(evaluate(parent.job_id, cond.predicate))
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


def _chain_events(parent: Ended, link: JobLinks, conditions: list[Any], out: list[Event]) -> None:
    """A chain's end: its last step succeeded, or a step failed or was canceled directly."""
    steps = [c for c in conditions if c.kind == Condition.THEN]
    in_chain = bool(steps) or link.condition == Condition.THEN
    if not in_chain:
        return
    if parent.status == JobStatus.SUCCEEDED and not steps:
        out.append(Event(facts.CHAIN_COMPLETED, {"job_id": parent.job_id}))
    elif parent.status != JobStatus.SUCCEEDED and not parent.cascade:
        out.append(Event(facts.CHAIN_FAILED, {"job_id": parent.job_id, "status": parent.status}))


def _callbacks(ended: list[Ended], links: dict[uuid.UUID, JobLinks], out: list[Event]) -> None:
    """A job's own callbacks: on success, or on failure for good (not on cancel)."""
    for e in ended:
        text = links[e.job_id].callbacks
        if not text:
            continue
        which = {JobStatus.SUCCEEDED: "success", JobStatus.FAILED: "failure"}.get(e.status)
        if which is None:
            continue
        for name in _callback_names(e.job_id, text, which):
            out.append(Event(facts.CALLBACK, {"task": name, "job_id": e.job_id}))


def _callback_names(job_id: uuid.UUID, text: str, which: str) -> list[str]:
    """The tasks a job's ``callbacks`` column names for ``which`` end. A column that is not the
    JSON ratchet writes sets nothing off (and is logged): it must not fail the transaction that
    ends the job, which would then be retried with the same row for ever."""
    try:
        names = json.loads(text).get(which, [])
    except (ValueError, TypeError, AttributeError, RecursionError):
        names = None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        log.warning("job %s: column 'callbacks' is not readable, no callback is sent", job_id)
        return []
    return names
