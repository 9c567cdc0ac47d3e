"""Tasks, predicates, callbacks and signal receivers the batch/chain/workflow tests use.

Imported by ``tests.apps`` so that worker subprocesses register them too. Everything they see is
written to ``FlowNote`` rows, which the tests read back.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from flask import Flask
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Mapped, mapped_column

from flask_ratchet import DoNotRetry, JobContext, events
from flask_ratchet.job import BatchProgress, Job
from tests.apps import db, ratchet


class FlowNote(db.Model):  # type: ignore[name-defined,misc]
    """One thing a flow test wants to know happened: what, about which job, with what."""

    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[str]
    job_id: Mapped[str]
    value: Mapped[str]
    pid: Mapped[int]


def note(kind: str, job_id: Any, value: Any = None) -> None:
    """Record a note; a SQLite file busy with several workers' writes is retried, not lost."""
    for attempt in range(10):
        db.session.add(
            FlowNote(kind=kind, job_id=str(job_id), value=json.dumps(value), pid=os.getpid())
        )
        try:
            db.session.commit()
            return
        except OperationalError:
            db.session.rollback()
            if attempt == 9:
                raise
            time.sleep(0.1 * (attempt + 1))


@ratchet.task
def step(label: str, ctx: JobContext) -> str:
    """A chain step: records what the previous step returned, returns its own label."""
    note("step", ctx.job_id, {"label": label, "previous": ctx.previous_result})
    return f"{label}-done"


@ratchet.task
def produce(n: int) -> dict[str, int]:
    return {"n": n}


@ratchet.task(max_retries=3)
def broken(label: str) -> None:
    """Fails for good at once."""
    raise DoNotRetry(f"{label} is broken")


@ratchet.task(max_retries=0)
def batch_item(i: int, fail_every: int = 0) -> int:
    """A batch child: fails for good when ``i`` is a multiple of ``fail_every``."""
    if fail_every and i % fail_every == 0:
        raise DoNotRetry(f"item {i} refused")
    note("item", JobContext.current().job_id, i)
    return i


@ratchet.task
def follow_up(label: str) -> str:
    note("follow-up", JobContext.current().job_id, label)
    return label


@ratchet.task
def gather(label: str, ctx: JobContext) -> dict[str, Any]:
    """A batch's follow-up, as a chord's callback: its children's results and statuses, read
    three at a time (so that a few children take several pages)."""
    batch = ctx.batch
    assert batch is not None, "a batch's follow-up sees its batch"
    return {
        "label": label,
        "batch": str(batch.id),
        "total": batch.progress.total,
        "results": list(batch.results(page_size=3)),
        "statuses": [str(child.status) for child in batch.children(page_size=3)],
    }


@ratchet.task(queue="default")
def kept_in_default(i: int) -> int:
    """A task that names the default queue itself: no route moves its jobs."""
    return i


@ratchet.task
def batch_of_step(ctx: JobContext) -> bool:
    """Whether a job that is no batch's follow-up sees a batch (it should not)."""
    return ctx.batch is not None


@ratchet.task
def is_big(result: Any) -> bool:
    return bool(result["n"] > 10)


@ratchet.task
def is_small(result: Any) -> bool:
    return bool(result["n"] <= 10)


@ratchet.task
def predicate_raises(result: Any) -> bool:
    raise ValueError("cannot judge this result")


@ratchet.task
def callback(job: Job) -> None:
    note("callback", job.id, str(job.status))


@ratchet.task
def callback_raises(job: Job) -> None:
    raise RuntimeError("a broken callback")


@ratchet.task
def progress_seen(progress: BatchProgress) -> None:
    note("progress", progress.batch_id, progress.ended)


def _receiver(signal_name: str) -> Any:
    def receive(sender: Flask, **data: Any) -> None:
        if not sender.config.get("FLOW_NOTES"):
            return  # only in the flow tests' workers: elsewhere a commit here would intrude
        job_id = data.get("job_id") or data.get("batch_id")
        value = {k: str(v) for k, v in data.items() if k in ("status", "condition", "cascade")}
        note(f"signal:{signal_name}", job_id, value)

    return receive


# Strong references: blinker holds receivers weakly.
RECEIVERS = {
    name: _receiver(name)
    for name in (
        "batch_completed",
        "chain_completed",
        "chain_failed",
        "branch_triggered",
        "job_canceled",
        "job_dead_lettered",
    )
}
for _name, _receive in RECEIVERS.items():
    getattr(events, _name).connect(_receive)


@ratchet.task(max_retries=3)
def slow_item(i: int, fail_every: int) -> int:
    """A batch child that takes a little while; fails for good on multiples of ``fail_every``."""
    time.sleep(0.01)
    if i % fail_every == 0:
        raise DoNotRetry(f"item {i} refused")
    note("item", JobContext.current().job_id, i)
    return i


@ratchet.task
def is_big_and_noted(result: Any) -> bool:
    """A predicate that writes: it must not run inside the worker's write transaction."""
    note("predicate", "-", result)
    return bool(result["n"] > 10)


@ratchet.task
def callback_result(job: Job) -> None:
    """Notes the result a success callback was given (``encrypted`` if it was not opened)."""
    note("callback-result", job.id, str(job.result))
