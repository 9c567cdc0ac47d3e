"""Named queues: pausing and resuming one across the cluster, and what each holds.

A paused queue's jobs stay PENDING and no worker claims them, from its next claim on (the claim
reads the paused queues itself); jobs already running finish. Resuming wakes the workers.
"""

from __future__ import annotations

from ..job import QueueSummary
from ..options import validate_queue
from ..runtime import Runtime


def pause_queue(runtime: Runtime, name: str, *, by: str | None = None) -> bool:
    """Stop every worker claiming from queue ``name``; False if it was paused already.

    :raises InvalidOption: for a name that is no queue name; nothing is written.
    """
    queue = validate_queue(name)
    # The workers are woken too: each reads the paused queues anew, and from then on claims
    # around the queue instead of finding its jobs among its candidates.
    return runtime.write_jobs(
        lambda conn: runtime.store.queues.set_paused(conn, queue, True, by),
        wake=lambda changed: changed,
    )


def resume_queue(runtime: Runtime, name: str, *, by: str | None = None) -> bool:
    """Let workers claim from queue ``name`` again, and wake them; False if it was not paused.

    :raises InvalidOption: for a name that is no queue name; nothing is written.
    """
    queue = validate_queue(name)
    return runtime.write_jobs(
        lambda conn: runtime.store.queues.set_paused(conn, queue, False, by),
        wake=lambda changed: changed,
    )


def queues(runtime: Runtime) -> list[QueueSummary]:
    """Every known queue, by name (as the console's queues page lists them): the default
    queue, every queue ever paused or resumed, and every queue a live or ended job names."""
    return runtime.run(lambda conn: runtime.store.queues.summaries(conn, runtime.store.now(conn)))
