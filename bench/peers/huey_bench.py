"""Huey on SQLite (``SqliteHuey``), for bench/compare.py.

    bench/.peers/bin/python bench/peers/huey_bench.py --what drain|enqueue|pickup \
        --db /tmp/huey.db [--jobs N] [--concurrency C]

Expects a SQLite file that does not exist yet (Huey creates its tables). ``--concurrency C`` is
the consumer's ``workers=C`` with ``worker_type="thread"``; everything else is Huey's default
(polling from 0.1 s backing off to 10 s when idle, ``PRAGMA synchronous`` left at SQLite's FULL).
Huey has no "stop when empty" mode, so the drain worker counts completed tasks through
Huey's ``complete`` signal and stops its consumer once it has seen all of them.
"""

from __future__ import annotations

import argparse
import threading
import time
from typing import Any

import _common
from huey import SqliteHuey
from huey.signals import SIGNAL_COMPLETE


def build(path: str) -> tuple[SqliteHuey, Any, Any]:
    huey = SqliteHuey(filename=path)

    @huey.task(name="noop")
    def noop(i: int) -> None:
        pass

    @huey.task(name="stamp")
    def stamp(enqueued: float, path: str) -> None:
        _common.record_stamp(path, enqueued)

    return huey, noop, stamp


def drain_worker(huey: SqliteHuey, jobs: int, concurrency: int) -> None:
    ran = [0]
    lock = threading.Lock()
    done = threading.Event()

    @huey.signal(SIGNAL_COMPLETE)
    def completed(signal: str, task: Any, *args: Any, **kwargs: Any) -> None:
        with lock:
            ran[0] += 1
            if ran[0] >= jobs:
                done.set()

    consumer = huey.create_consumer(workers=concurrency, worker_type="thread")
    consumer.start()
    if not done.wait(1800):
        raise SystemExit("the drain did not finish")
    consumer.stop(graceful=True)
    _common.ran_report(ran[0])


def bench(args: argparse.Namespace) -> dict[str, Any]:
    huey, noop, stamp = build(args.db)
    if args.what == "drain":
        noop.map(range(args.jobs))
        huey.storage.close()
        return _common.time_drain(args)
    if args.what == "enqueue":
        for i in range(_common.WARMUP):
            noop(i)
        began = time.perf_counter()
        for i in range(args.jobs):
            noop(i)
        single = args.jobs / (time.perf_counter() - began)
        # Huey has no batch enqueue: Task.map, its call for many jobs, commits each one.
        began = time.perf_counter()
        noop.map(range(args.jobs))
        many = args.jobs / (time.perf_counter() - began)
        return {"what": "enqueue", "jobs": args.jobs, "single": single, "bulk": many}
    path = _common.stamp_file()
    proc = _common.spawn_worker(args, capture=False)
    try:
        time.sleep(_common.IDLE_SECONDS)
        for _ in range(args.jobs):
            stamp(time.time(), path)
            time.sleep(args.spacing)
        latencies = _common.read_stamps(path, args.jobs)
    finally:
        _common.stop(proc)
    return _common.pickup_result(latencies, args.jobs, args.concurrency)


def main() -> None:
    args = _common.parse_args(__doc__.splitlines()[0])
    if args.role == "bench":
        _common.emit(bench(args))
        return
    huey, _, _ = build(args.db)
    if args.what == "drain":
        drain_worker(huey, args.jobs, args.concurrency)
    else:  # pickup: Huey's own consumer loop, until the bench stops this process
        huey.create_consumer(workers=args.concurrency, worker_type="thread").run()


if __name__ == "__main__":
    main()
