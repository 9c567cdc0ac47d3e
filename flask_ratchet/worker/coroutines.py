"""Running ``async def`` tasks: an event loop per job thread, made once and kept.

A job thread runs one job at a time, so its loop runs one task's coroutine at a time, with the
thread's app context and the job's :class:`~flask_ratchet.JobContext` (both context variables,
copied into the task). Keeping the loop costs about 8 µs a job against 80 µs for a new loop per
job (``asyncio.run``; ``python -m bench.event_loop``), and keeps a task's concurrency inside its
own slot: ``--concurrency`` counts async jobs as it counts the others.

Stopping the job (a timeout, ``cancel_job``, a drain that ran out) cancels the task from the
watchdog's thread, so ``asyncio.CancelledError`` rises at its next ``await``. Code that blocks the
loop (``time.sleep``, a synchronous driver or HTTP call, CPU-bound work) cannot be cancelled
until it returns, like a synchronous task stuck in C code. What the coroutine left running
(tasks it started and did not await) is cancelled when it returns and given
``LEFTOVER_GRACE`` seconds to finish; a task that will not is left behind with its loop, and
the thread takes a new loop, so no job's work runs into the next job's.

A thread that already runs an event loop (a job run in-process from async test code, or an
eager commit in an ``async`` view) cannot run a second one: the coroutine then runs on a loop of
its own in a short-lived helper thread, and this thread waits for it.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
from collections.abc import Coroutine
from typing import Any

from ..context import JobContext

log = logging.getLogger("flask_ratchet.worker")

#: How long the tasks a job's coroutine left running get to end once cancelled.
LEFTOVER_GRACE = 5.0

_local = threading.local()
#: Loops left with tasks that would not end: kept, never collected, so that their tasks are not
#: destroyed while pending (which asyncio reports as an error) and simply never run again.
_abandoned: list[asyncio.AbstractEventLoop] = []


def run_coroutine(coro: Coroutine[Any, Any, Any], ctx: JobContext) -> Any:
    """Run ``coro`` to its end and return its value (or raise its error,
    ``asyncio.CancelledError`` when the job was stopped)."""
    if _loop_running_here():
        return _on_helper_thread(coro, ctx)
    loop: asyncio.AbstractEventLoop | None = getattr(_local, "loop", None)
    if loop is None or loop.is_closed():
        loop = _local.loop = asyncio.new_event_loop()
    try:
        return _run_on(loop, coro, ctx)
    finally:
        if not _cancel_leftovers(loop, ctx):
            _abandoned.append(loop)  # stubborn tasks keep that loop; the next job gets a new one
            _local.loop = None


def _run_on(
    loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any], ctx: JobContext
) -> Any:
    task = loop.create_task(coro)

    def cancel() -> None:  # called from the watchdog's thread
        loop.call_soon_threadsafe(task.cancel)

    ctx.on_stop(cancel)
    try:
        return loop.run_until_complete(task)
    finally:
        ctx.on_stop(None)


def _cancel_leftovers(loop: asyncio.AbstractEventLoop, ctx: JobContext) -> bool:
    """Cancel what the coroutine left running and wait for it, for ``LEFTOVER_GRACE`` at most.
    Returns whether the loop is clean."""
    leftovers = [t for t in asyncio.all_tasks(loop) if not t.done()]
    if not leftovers:
        return True
    for leftover in leftovers:
        leftover.cancel()
    _, pending = loop.run_until_complete(asyncio.wait(leftovers, timeout=LEFTOVER_GRACE))
    if pending:
        log.warning(
            "job %s left %d tasks that did not end %gs after they were cancelled; they are "
            "abandoned with their event loop",
            ctx.job_id,
            len(pending),
            LEFTOVER_GRACE,
        )
        return False
    return True


def _loop_running_here() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _on_helper_thread(coro: Coroutine[Any, Any, Any], ctx: JobContext) -> Any:
    """Run ``coro`` on a new loop in a helper thread, with this thread's context variables."""
    context = contextvars.copy_context()
    outcome: dict[str, Any] = {}

    def run() -> None:
        loop = asyncio.new_event_loop()
        try:
            outcome["value"] = context.run(_run_on, loop, coro, ctx)
        except BaseException as exc:  # handed to the waiting thread, which raises it
            outcome["error"] = exc
        finally:
            if _cancel_leftovers(loop, ctx):
                loop.close()
            else:
                _abandoned.append(loop)

    helper = threading.Thread(target=run, name="ratchet-async-job", daemon=True)
    helper.start()
    helper.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")
