"""Procrastinate on PostgreSQL (psycopg 3 connector), for bench/compare.py.

    bench/.peers/bin/python bench/peers/procrastinate_bench.py --what drain|enqueue|pickup \
        --db postgresql://root@127.0.0.1:5432/bench_peer_procrastinate [--jobs N] [--concurrency C]

Expects a fresh, empty database: applies procrastinate's schema to it, then measures and prints
one JSON object. ``--concurrency`` is the worker's ``concurrency`` (async job slots); the drain
worker runs with ``wait=False``, so it exits once the queue is empty.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
from typing import Any

import _common
import procrastinate

RAN = [0]  # jobs this process executed, reported by the drain worker

# procrastinate warns when its App is created in ``__main__`` because it then derives task names
# from "__main__"; both roles of this script are ``__main__`` and every task names itself.
logging.getLogger("procrastinate.blueprints").setLevel(logging.ERROR)


def build(url: str) -> tuple[procrastinate.App, Any, Any]:
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

    # Async tasks: procrastinate runs sync ones in a thread, and its concurrency is meant for
    # coroutines, so this is its fast path.
    @app.task(name="noop")
    async def noop(i: int) -> None:
        RAN[0] += 1

    @app.task(name="stamp")
    async def stamp(enqueued: float, path: str) -> None:
        _common.record_stamp(path, enqueued)

    return app, noop, stamp


async def bulk(noop: Any, n: int) -> None:
    for start in range(0, n, _common.BULK_CHUNK):
        stop = min(n, start + _common.BULK_CHUNK)
        await noop.batch_defer_async(*({"i": i} for i in range(start, stop)))


async def worker(args: argparse.Namespace) -> None:
    app, _, _ = build(args.db)
    async with app.open_async():
        if args.what == "drain":
            await app.run_worker_async(concurrency=args.concurrency, wait=False)
            _common.ran_report(RAN[0])
        else:  # pickup: wait for jobs until the bench stops this process
            await app.run_worker_async(concurrency=args.concurrency)


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    app, noop, stamp = build(args.db)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        if args.what == "drain":
            await bulk(noop, args.jobs)
        elif args.what == "enqueue":
            for i in range(_common.WARMUP):
                await noop.defer_async(i=i)
            began = time.perf_counter()
            for i in range(args.jobs):
                await noop.defer_async(i=i)  # one statement, so one transaction, per job
            single = args.jobs / (time.perf_counter() - began)
            began = time.perf_counter()
            await bulk(noop, args.jobs)
            many = args.jobs / (time.perf_counter() - began)
            return {"what": "enqueue", "jobs": args.jobs, "single": single, "bulk": many}
        else:
            path = _common.stamp_file()
            proc = _common.spawn_worker(args, capture=False)
            try:
                await asyncio.sleep(_common.IDLE_SECONDS)
                for _ in range(args.jobs):
                    await stamp.defer_async(enqueued=time.time(), path=path)
                    await asyncio.sleep(args.spacing)
                latencies = _common.read_stamps(path, args.jobs)
            finally:
                _common.stop(proc)
            return _common.pickup_result(latencies, args.jobs, args.concurrency)
    # drain: the enqueuing process's pool is closed before the worker is timed
    return _common.time_drain(args)


def main() -> None:
    args = _common.parse_args(__doc__.splitlines()[0])
    if args.role == "worker":
        asyncio.run(worker(args))
    else:
        _common.emit(asyncio.run(bench(args)))


if __name__ == "__main__":
    main()
