"""``async def`` tasks the tests run in real worker processes (imported by tests.apps)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from flask import current_app

from flask_ratchet import Backoff, JobContext
from tests.apps import ratchet


@ratchet.task
async def async_add(a: int, b: int) -> dict[str, Any]:
    """Awaits, then reports what it saw: the app context and its JobContext."""
    await asyncio.sleep(0.01)
    ctx = JobContext.current()
    ctx.logger.info("adding %d and %d", a, b)
    ctx.set_progress(1, 1, "added")
    return {
        "sum": a + b,
        "app": current_app.name,
        "setting": current_app.config.get("RATCHET_HEARTBEAT_INTERVAL"),
        "job_id": str(ctx.job_id),
        "attempt": ctx.attempt,
    }


@ratchet.task(max_retries=2, backoff=Backoff.FIXED, backoff_base=0.5)
async def async_fail_until(attempt_that_works: int) -> int:
    await asyncio.sleep(0)
    attempt = JobContext.current().attempt
    if attempt < attempt_that_works:
        raise ConnectionError(f"async attempt {attempt} failed")
    return attempt


@ratchet.task(max_retries=0)
async def async_sleep(seconds: float, marker: str) -> str:
    """Sleeps on the loop; records in ``marker`` that it started, and whether it was cancelled."""
    path = Path(marker)
    path.write_text("started")
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        path.write_text("cancelled")
        raise
    return "slept"


@ratchet.task(max_retries=0)
async def async_leaves_a_stubborn_task() -> str:
    """Starts a task that ignores cancellation, and returns without awaiting it."""

    async def stubborn() -> None:
        while True:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                continue

    asyncio.get_running_loop().create_task(stubborn())
    await asyncio.sleep(0)
    return "returned"
