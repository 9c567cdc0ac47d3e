"""Where an idle pickup's time goes, on PostgreSQL: one row per stage, p50/p95/p99.

    python -m bench.pickup_profile [--pg URL] [--pickups 200] [--rounds 2] [--spacing 0.02]

The pickup of ``bench.stamp`` (200 jobs 20 ms apart, or ``--spacing`` seconds, to an idle worker
at concurrency 4), with every hand-off stamped on the machine's monotonic clock
(``time.perf_counter``, shared by all processes here), each as milliseconds after the moment
just before the enqueue call:

- ``enqueue returned``: the client's ``enqueue_now`` (its own transaction) is back;
- ``NOTIFY sent`` / ``NOTIFY answered``: the client's wake-up sender starts and ends its NOTIFY;
- ``worker woken``: the worker's LISTEN thread has the notification;
- ``claim sent`` / ``claim answered``: the poller starts and ends the claim that took the job;
- ``job started``: the job function's first line.

The worker is a real ``flask ratchet worker`` whose app (:func:`profiled_app`) wraps the LISTEN
callback and the store's claim to write those stamps; nothing in the package is changed.

Then, for scale, the same machine's bare round trips on one psycopg connection, back to back
and after 20 ms idle (as a pickup finds the machine): ``SELECT 1`` and a one-row INSERT that
commits. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import sqlalchemy as sa
from flask import Flask

from bench.enqueue_claim import DEFAULT_PG, db, fresh_database, make_app, ratchet
from bench.peers._common import IDLE_SECONDS, stamp_file, stop
from bench.worker import percentile, reset, warm_client, worker
from flask_ratchet.store.postgres import PostgresDialect
from flask_ratchet.wakeups.hub import Hub

STAGES = (
    ("enqueue returned", "enqueued"),
    ("NOTIFY sent", "notify_sent"),
    ("NOTIFY answered", "notify_answered"),
    ("worker woken", "woken"),
    ("claim sent", "claim_sent"),
    ("claim answered", "claim_answered"),
    ("job started", "started"),
)

_stamps_lock = threading.Lock()
#: (start, end) of each NOTIFY this process sent, once :func:`_watch_notifies` is on.
NOTIFIES: list[tuple[float, ...]] = []


def _stamp(kind: str, at: float, extra: str = "") -> None:
    """One line in the worker's stamp file (``BENCH_STAMPS``)."""
    with _stamps_lock, open(os.environ["BENCH_STAMPS"], "a") as f:
        f.write(f"{kind} {at:.6f} {extra}\n")


@ratchet.task
def profiled(i: int) -> None:
    """The pickup job: stamps its start."""
    _stamp("started", time.perf_counter(), str(i))


def profiled_app() -> Flask:
    """The worker's app (``--app bench.pickup_profile:profiled_app()``), stamping its wake-ups
    and claims."""
    attach = Hub.attach

    def attach_stamped(self: Hub, on_wake: Callable[[], None], stop: threading.Event) -> None:
        def woken() -> None:
            _stamp("woken", time.perf_counter())
            on_wake()

        attach(self, woken, stop)

    claim_due = PostgresDialect.claim_due

    def claim(self: PostgresDialect, *args: Any) -> Any:
        sent = time.perf_counter()
        claimed = claim_due(self, *args)
        if claimed:
            _stamp("claim", sent, f"{time.perf_counter():.6f}")
        return claimed

    Hub.attach = attach_stamped  # type: ignore[method-assign]
    PostgresDialect.claim_due = claim  # type: ignore[method-assign,assignment]
    return make_app(os.environ["BENCH_URL"])


def _watch_notifies() -> None:
    """Record when this process's wake-up sender starts and ends each NOTIFY."""
    execute = psycopg.Connection.execute

    def timed(self: psycopg.Connection[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        result = execute(self, query, *args, **kwargs)
        if isinstance(query, str) and query.startswith("NOTIFY"):
            NOTIFIES.append((began, time.perf_counter()))
        return result

    psycopg.Connection.execute = timed  # type: ignore[method-assign]


def _first_from(stamps: list[tuple[float, ...]], began: float) -> tuple[float, ...] | None:
    """The first of ``stamps`` (each starting with its time) at or after ``began``."""
    return next((x for x in stamps if x[0] >= began), None)


def _row(label: str, values: list[float]) -> str:
    """A table row: ``values``' p50, p95 and p99."""
    cells = " | ".join(f"{percentile(sorted(values), p):.2f}" for p in (0.5, 0.95, 0.99))
    return f"| {label} | {cells} |"


def profile(url: str, n: int, spacing: float = 0.02) -> dict[str, list[float]]:
    """One pickup run: each stage's milliseconds after its enqueue call began, per job."""
    # The task by its importable name, as the worker knows it (not ``__main__``'s).
    from bench.pickup_profile import profiled as task

    reset(url)
    stamps = stamp_file()
    app_ref = "bench.pickup_profile:profiled_app()"
    proc = worker(url, "--concurrency", "4", app=app_ref, env={"BENCH_STAMPS": stamps})
    calls: list[tuple[float, float]] = []
    app = make_app(url)
    try:
        with app.app_context():
            warm_client()
            time.sleep(IDLE_SECONDS)
            NOTIFIES.clear()  # the warm-up's
            for i in range(n):
                began = time.perf_counter()
                ratchet.enqueue_now(task, i)
                calls.append((began, time.perf_counter()))
                time.sleep(spacing)
            time.sleep(1.0)
            db.engine.dispose()
    finally:
        stop(proc)
    started: dict[int, float] = {}
    woken: list[tuple[float, ...]] = []
    claims: list[tuple[float, ...]] = []
    for line in Path(stamps).read_text().splitlines():
        kind, at, *extra = line.split()
        if kind == "started":
            started[int(extra[0])] = float(at)
        elif kind == "woken":
            woken.append((float(at),))
        elif kind == "claim":
            claims.append((float(at), float(extra[0])))
    os.unlink(stamps)
    stages: dict[str, list[float]] = {key: [] for _, key in STAGES}
    for i, (began, returned) in enumerate(calls):
        notify = _first_from(NOTIFIES, began)
        wake = _first_from(woken, began)
        claim = _first_from(claims, began)
        if i not in started or notify is None or wake is None or claim is None:
            continue  # found by a poll rather than a wake-up: not this path
        times = {
            "enqueued": returned,
            "notify_sent": notify[0],
            "notify_answered": notify[1],
            "woken": wake[0],
            "claim_sent": claim[0],
            "claim_answered": claim[1],
            "started": started[i],
        }
        for stage, when in times.items():
            stages[stage].append((when - began) * 1000)
    return stages


def round_trips(url: str, n: int = 200) -> list[tuple[str, list[float]]]:
    """Bare psycopg round trips, back to back and after 20 ms idle: sorted ms."""
    conninfo = sa.make_url(url).set(drivername="postgresql").render_as_string(False)
    rows = []
    with psycopg.connect(conninfo, autocommit=True) as conn:
        # A table of the database, not a temporary one: its commits are written to the WAL.
        conn.execute("DROP TABLE IF EXISTS bench_rt")
        conn.execute("CREATE TABLE bench_rt (id uuid PRIMARY KEY)")
        statements: list[tuple[str, Callable[[], object]]] = [
            ("SELECT 1", lambda: conn.execute("SELECT 1").fetchall()),
            (
                "one-row INSERT, committed",
                lambda: conn.execute("INSERT INTO bench_rt VALUES (%s)", (uuid.uuid4(),)),
            ),
        ]
        for gap in (0.0, 0.02):
            for label, run in statements:
                times = []
                for _ in range(n):
                    time.sleep(gap)
                    began = time.perf_counter()
                    run()
                    times.append((time.perf_counter() - began) * 1000)
                when = "after 20 ms idle" if gap else "back to back"
                rows.append((f"{label}, {when}", sorted(times)))
        conn.execute("DROP TABLE bench_rt")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg", default=DEFAULT_PG)
    parser.add_argument("--pickups", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--spacing", type=float, default=0.02, help="seconds between jobs")
    args = parser.parse_args()
    url = fresh_database(args.pg, "ratchet_bench_pickup")
    _watch_notifies()
    print("| stage (ms after the enqueue call began) | p50 | p95 | p99 |")
    print("|---|---:|---:|---:|")
    for round_ in range(1, args.rounds + 1):
        stages = profile(url, args.pickups, args.spacing)
        woken = len(stages["started"])
        print(f"| **run {round_}** ({woken} of {args.pickups} jobs taken by a wake-up) | | | |")
        for label, key in STAGES:
            print(_row(label, stages[key]))
    print("| **bare round trips** (ms) | | | |")
    for label, values in round_trips(url):
        print(_row(label, values))


if __name__ == "__main__":
    main()
