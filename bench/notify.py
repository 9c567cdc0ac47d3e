"""Where to send the wake-up NOTIFY: inside each enqueuing transaction, or after its commit?

    python -m bench.notify [--pg URL] [--processes 1] [--threads 8] [--seconds 5]

``--threads`` threads enqueue one job per transaction for ``--seconds`` in three modes:

- ``after commit``: what flask-ratchet does. The job is one autocommit statement and the process's
  notifier sends ``NOTIFY`` afterwards, coalescing requests that arrive while it sends;
- ``in transaction``: ``BEGIN; insert; SELECT pg_notify(...); COMMIT``: every commit takes
  PostgreSQL's global notification lock;
- ``none``: no wake-up at all, the baseline.

Prints enqueues/s per mode and how many NOTIFYs were sent.
"""

from __future__ import annotations

import argparse
import multiprocessing
import threading
import time
from collections.abc import Callable

from bench.enqueue_claim import DEFAULT_PG, db, fresh_database, make_app, noop, ratchet
from flask_ratchet.wakeups.channels import WAKEUP, PgChannels
from flask_ratchet.wakeups.notices import Notifier


def run(app, threads: int, seconds: float, submit: Callable[[int], None]) -> int:  # type: ignore[no-untyped-def]
    stop = time.monotonic() + seconds
    counts = [0] * threads

    def loop(k: int) -> None:
        with app.app_context():
            while time.monotonic() < stop:
                submit(counts[k])
                counts[k] += 1

    workers = [threading.Thread(target=loop, args=(k,)) for k in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    return sum(counts)


def measure(url: str, mode: str, threads: int, seconds: float, out: object) -> None:
    """One process: enqueue in ``mode`` for ``seconds``; put (jobs, notifies) on ``out``."""
    app = make_app(url)
    app.config["SQLALCHEMY_ENGINE_OPTIONS"] = {"pool_size": threads + 2}
    with app.app_context():
        runtime = ratchet.runtime
        runtime.ensure_schema()
        notifier = Notifier(PgChannels(runtime.engine.url))
        if mode == "after commit (shipped)":
            runtime.wakeups.notifier = lambda: notifier.request  # type: ignore[method-assign]
            n = run(app, threads, seconds, lambda i: ratchet.enqueue_now(noop, i) and None)
        elif mode == "in transaction":
            runtime.wakeups.notifier = lambda: None  # type: ignore[method-assign]

            def in_transaction(i: int) -> None:
                with ratchet.transaction() as conn:
                    ratchet.enqueue_now(noop, i)
                    conn.exec_driver_sql(f"SELECT pg_notify('{WAKEUP}', '')")

            n = run(app, threads, seconds, in_transaction)
            notifier.sent = n
        else:
            runtime.wakeups.notifier = lambda: None  # type: ignore[method-assign]
            n = run(app, threads, seconds, lambda i: ratchet.enqueue_now(noop, i) and None)
        db.engine.dispose()
    out.put((n, notifier.sent))  # type: ignore[attr-defined]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg", default=DEFAULT_PG)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    url = fresh_database(args.pg, "ratchet_bench_notify")
    ctx = multiprocessing.get_context("spawn")
    for mode in ("after commit (shipped)", "in transaction", "none"):
        out = ctx.Queue()
        procs = [
            ctx.Process(target=measure, args=(url, mode, args.threads, args.seconds, out))
            for _ in range(args.processes)
        ]
        for p in procs:
            p.start()
        results = [out.get() for _ in procs]
        for p in procs:
            p.join()
        jobs, sent = sum(r[0] for r in results), sum(r[1] for r in results)
        print(f"{mode:<24} {jobs / args.seconds:>8,.0f} enqueues/s   {sent:>7,} NOTIFYs sent")


if __name__ == "__main__":
    main()
