"""PgQueuer on PostgreSQL (asyncpg driver), for bench/compare.py.

    bench/.peers/bin/python bench/peers/pgqueuer_bench.py --what drain|enqueue|pickup \
        --db postgresql://root@127.0.0.1:5432/bench_peer_pgqueuer [--jobs N] [--concurrency C]

Expects a fresh, empty database: installs PgQueuer's schema in it (``Queries.install``, what
``pgq install`` runs), then measures and prints one JSON object. ``--concurrency C`` becomes
``batch_size=C`` and ``max_concurrent_tasks=2*C``: PgQueuer has no thread count, and this is
ratchet's own claim policy (C jobs running and as many again claimed and waiting), within
PgQueuer's rule that the cap be at least twice the batch. The drain worker runs in
``QueueExecutionMode.drain``, so it exits once the queue is empty.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

import _common
import asyncpg
from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver
from pgqueuer.domain.types import QueueExecutionMode
from pgqueuer.models import Job
from pgqueuer.queries import Queries

RAN = [0]  # jobs this process executed, reported by the drain worker


async def bulk(queries: Queries, n: int) -> None:
    for start in range(0, n, _common.BULK_CHUNK):
        size = min(n, start + _common.BULK_CHUNK) - start
        payloads: list[bytes | None] = [str(i).encode() for i in range(start, start + size)]
        await queries.enqueue(["noop"] * size, payloads, [0] * size)


async def worker(args: argparse.Namespace) -> None:
    connection = await asyncpg.connect(args.db)
    pgq = PgQueuer(AsyncpgDriver(connection))

    @pgq.entrypoint("noop")
    async def noop(job: Job) -> None:
        RAN[0] += 1

    @pgq.entrypoint("stamp")
    async def stamp(job: Job) -> None:
        enqueued, path = json.loads(job.payload or b"null")
        _common.record_stamp(path, enqueued)

    mode = QueueExecutionMode.drain if args.what == "drain" else QueueExecutionMode.continuous
    await pgq.qm.run(
        batch_size=args.concurrency,
        max_concurrent_tasks=2 * args.concurrency,
        mode=mode,
    )
    if args.what == "drain":
        _common.ran_report(RAN[0])


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    connection = await asyncpg.connect(args.db)
    queries = Queries(AsyncpgDriver(connection))
    try:
        await queries.install()
        if args.what == "drain":
            await bulk(queries, args.jobs)
        elif args.what == "enqueue":
            for i in range(_common.WARMUP):
                await queries.enqueue("noop", str(i).encode())
            began = time.perf_counter()
            for i in range(args.jobs):
                await queries.enqueue("noop", str(i).encode())  # autocommit: a transaction each
            single = args.jobs / (time.perf_counter() - began)
            began = time.perf_counter()
            await bulk(queries, args.jobs)
            many = args.jobs / (time.perf_counter() - began)
            return {"what": "enqueue", "jobs": args.jobs, "single": single, "bulk": many}
        else:
            path = _common.stamp_file()
            proc = _common.spawn_worker(args, capture=False)
            try:
                await asyncio.sleep(_common.IDLE_SECONDS)
                for _ in range(args.jobs):
                    await queries.enqueue("stamp", json.dumps([time.time(), path]).encode())
                    await asyncio.sleep(args.spacing)
                latencies = _common.read_stamps(path, args.jobs)
            finally:
                _common.stop(proc)
            return _common.pickup_result(latencies, args.jobs, args.concurrency)
    finally:
        await connection.close()
    return _common.time_drain(args)


def main() -> None:
    args = _common.parse_args(__doc__.splitlines()[0])
    if args.role == "worker":
        asyncio.run(worker(args))
    else:
        _common.emit(asyncio.run(bench(args)))


if __name__ == "__main__":
    main()
