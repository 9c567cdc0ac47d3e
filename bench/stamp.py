"""Idle pickup latency timed by the job itself: how bench/compare.py times ratchet and each peer.

``bench.worker.pickup`` reads ratchet's own columns (the job's ``created_at`` from the database's
clock, the execution's ``started_at``). The peers keep no such columns in common, so for the
side-by-side table every system's job records ``time.time()`` as its function starts, minus the
``time.time()`` taken just before the enqueue call, both on this machine's clock
(``bench/peers/_common.py`` does both, for ratchet too).
"""

from __future__ import annotations

import os
import time

from flask import Flask

from bench.enqueue_claim import db, make_app, ratchet
from bench.peers import _common
from bench.worker import reset, warm_client, worker


@ratchet.task
def stamp(enqueued: float, path: str) -> None:
    """The pickup job: writes its own latency to ``path``."""
    _common.record_stamp(path, enqueued)


def stamp_app() -> Flask:
    """The app the pickup worker loads (``--app bench.stamp:stamp_app()``), with ``stamp``."""
    return make_app(os.environ["BENCH_URL"])


def pickup(url: str, n: int = 200, spacing: float = 0.02, concurrency: int = 4) -> list[float]:
    """An idle ``flask ratchet worker``, ``n`` jobs enqueued ``spacing`` apart; sorted ms."""
    reset(url)
    proc = worker(url, "--concurrency", str(concurrency), app="bench.stamp:stamp_app()")
    path = _common.stamp_file()
    app = make_app(url)
    try:
        with app.app_context():
            warm_client()
            time.sleep(_common.IDLE_SECONDS)
            for _ in range(n):
                ratchet.enqueue_now(stamp, time.time(), path)
                time.sleep(spacing)
            latencies = _common.read_stamps(path, n)
            db.engine.dispose()
    finally:
        _common.stop(proc)
    return latencies
