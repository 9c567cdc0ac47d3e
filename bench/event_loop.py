"""What an ``async def`` task's event loop costs per job: a new loop per job (``asyncio.run``)
against one loop kept by each job thread (what ``flask_ratchet.worker.coroutines`` does).

    python -m bench.event_loop [--jobs 20000]

Prints microseconds per job for each. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from flask_ratchet.context import JobContext
from flask_ratchet.worker.coroutines import run_coroutine


async def noop() -> int:
    return 1


def per_job(jobs: int, run: object) -> float:
    began = time.perf_counter()
    for _ in range(jobs):
        run()  # type: ignore[operator]
    return (time.perf_counter() - began) / jobs * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    args = parser.parse_args()
    ctx = JobContext(job_id=None, task="bench", attempt=1, params={})  # type: ignore[arg-type]
    fresh = per_job(args.jobs, lambda: asyncio.run(noop()))
    kept = per_job(args.jobs, lambda: run_coroutine(noop(), ctx))
    print(f"a new event loop per job (asyncio.run): {fresh:6.1f} µs a job")
    print(f"one loop kept per job thread:           {kept:6.1f} µs a job")


if __name__ == "__main__":
    main()
