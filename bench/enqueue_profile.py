"""Where one single enqueue's time goes: round trips, and the Python per job by stage.

    python -m bench.enqueue_profile [--store postgresql|sqlite|mariadb] [--jobs 5000]

For ``--jobs`` calls of ``ratchet.enqueue_now(noop, i)`` outside a request (a transaction
each, as ``bench.compare``'s single enqueue), in a fresh database:

- **round trips** per enqueue: messages the client waited on, counted on the wire's client
  side. PostgreSQL: libpq's protocol trace (``PGconn.trace``), every ``Sync`` and simple
  ``Query`` the app's connections sent; MariaDB: every command PyMySQL sent; SQLite: the
  statements the library ran (``sqlite3``'s trace callback: a call into the library, not a
  round trip). Taken over 200 enqueues after the warm-up, the background wake-up sender's
  own ``NOTIFY`` counted apart (it coalesces: at most one per 10 ms, whatever the rate).
- **time per enqueue**, wall, and how it splits: the cumulative time of each stage under
  ``cProfile`` (arguments checked and encoded; the job built: id, options, JSON; the
  transaction with its statement; the wake-up request; the rest), scaled to the wall time of
  the unprofiled run, so the parts add up to what a caller waits.
- **pages written to the WAL** per enqueue (SQLite): what each commit writes to the log, a
  page per table and index it touched, counted over :data:`WAL_SAMPLE` enqueues;
- **the floor**: a bare one-row ``INSERT`` (an id, a task name, a payload; a primary key and
  nothing else), committed, ``--jobs`` times on a connection of the same pool and driver: what
  any design pays per job on this database and machine before its own rows, indexes and Python.

Prints one table. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bench.enqueue_claim import (
    DEFAULT_MARIADB,
    DEFAULT_PG,
    db,
    fresh_database,
    make_app,
    noop,
    ratchet,
)

#: Stages of an enqueue, as (label, the function whose cumulative time it is: file suffix, name).
STAGES = (
    ("check the task, encode the arguments", ("api/submit.py", "make_builder")),
    ("build the job (id, options, JSON)", ("api/submit.py", "build")),
    ("principal and policy", ("api/policy.py", "stamp")),
    ("the transaction (statement, commit)", ("flask_ratchet/runtime.py", "run")),
    ("  of which on the driver (network, server)", ("store/driver.py", "execute")),
    ("events after commit, wake-up request", ("flask_ratchet/runtime.py", "announce")),
)
SAMPLE = 200  # enqueues whose round trips are counted


def enqueue(n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        ratchet.enqueue_now(noop, i)


@contextmanager
def counted_round_trips(store: str) -> Iterator[Counter[str]]:
    """Count what the app's connections send while inside, by thread: ``main`` (the caller)
    and ``other`` (the background wake-up sender). The app's pool is emptied first, so every
    connection used inside is a new one, traced from its start."""
    counts: Counter[str] = Counter()

    def who() -> str:
        return "main" if threading.current_thread() is threading.main_thread() else "other"

    engine = db.engine
    with tempfile.TemporaryDirectory() as tmp:
        traces: list[tuple[Any, Path, Any, str]] = []

        def traced(dbapi_conn: Any, _record: Any) -> None:
            if store == "sqlite":
                dbapi_conn.set_trace_callback(lambda _sql: counts.update([who()]))
            elif store == "postgresql":
                path = Path(tmp) / f"trace-{len(traces)}"
                handle = path.open("w")
                dbapi_conn.pgconn.trace(handle.fileno())
                traces.append((dbapi_conn.pgconn, path, handle, who()))

        original = None
        if store == "mariadb":
            import pymysql.connections

            original = pymysql.connections.Connection._execute_command

            def command(self: Any, *args: Any, **kwargs: Any) -> Any:
                counts.update([who()])
                return original(self, *args, **kwargs)  # type: ignore[misc]

            pymysql.connections.Connection._execute_command = command  # type: ignore[method-assign]
        engine.dispose()
        sa.event.listen(engine, "connect", traced)
        try:
            yield counts
        finally:
            sa.event.remove(engine, "connect", traced)
            if original is not None:
                import pymysql.connections

                pymysql.connections.Connection._execute_command = original  # type: ignore[method-assign]
            for pgconn, path, handle, thread in traces:
                pgconn.untrace()
                handle.close()
                for line in path.read_text().splitlines():
                    fields = line.split("\t")
                    if len(fields) > 3 and fields[1] == "F" and fields[3] in ("Sync", "Query"):
                        counts.update([thread])


def stage_times(profile: cProfile.Profile) -> dict[str, float]:
    """Cumulative seconds of each stage's function in ``profile``."""
    stats = pstats.Stats(profile)
    found: dict[str, float] = {}
    for (path, _line, name), (_cc, _nc, _tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        for label, (suffix, fn) in STAGES:
            if name == fn and path.endswith(suffix):
                found[label] = found.get(label, 0.0) + ct
    return found


def measure(url: str, store: str, jobs: int) -> list[tuple[str, str]]:
    app = make_app(url)
    rows: list[tuple[str, str]] = []
    with app.app_context():
        ratchet.runtime.ensure_schema()
        enqueue(200)  # warm up: connections, caches, prepared statements
        began = time.perf_counter()
        enqueue(jobs, 200)
        wall = (time.perf_counter() - began) / jobs
        rows.append(("jobs/s, one transaction each", f"{1 / wall:,.0f}"))
        rows.append(("µs per enqueue (wall)", f"{wall * 1e6:,.0f}"))
        ratchet.runtime.wakeups.notifier()  # the sender exists before counting starts
        time.sleep(0.1)
        with counted_round_trips(store) as counts:
            enqueue(SAMPLE, 200 + jobs)
            time.sleep(0.05)  # the last notice
        trips = "statements run" if store == "sqlite" else "round trips"
        rows.append((f"{trips} per enqueue (caller)", f"{counts['main'] / SAMPLE:.2f}"))
        if store == "sqlite":
            rows.append(("pages written to the WAL per enqueue", f"{wal_pages(url):.1f}"))
        if counts["other"]:
            rows.append(
                (f"{trips} of the wake-up sender, per enqueue", f"{counts['other'] / SAMPLE:.2f}")
            )
        profile = cProfile.Profile()
        profile.enable()
        enqueue(jobs, 200 + jobs + SAMPLE)
        profile.disable()
        total = sum(
            s.stats[k][3]
            for s in [pstats.Stats(profile)]
            for k in s.stats  # type: ignore[attr-defined]
            if k[2] == "enqueue_now"
        )
        for label, seconds in sorted(
            stage_times(profile).items(), key=lambda kv: [s[0] for s in STAGES].index(kv[0])
        ):
            share = seconds / total if total else 0.0
            rows.append((f"µs: {label}", f"{share * wall * 1e6:,.0f}"))
        bare = floor(store, jobs)
        rows.append(("µs: the floor, a bare one-row INSERT committed", f"{bare:,.0f}"))
        db.engine.dispose()
    return rows


#: Enqueues whose WAL pages are counted: fewer than SQLite's automatic checkpoint (1,000 pages)
#: would start, so that every page they write is still in the log.
WAL_SAMPLE = 50


def wal_pages(url: str) -> float:
    """Pages (WAL frames) one SQLite enqueue writes: the log emptied by a checkpoint, then
    :data:`WAL_SAMPLE` enqueues, then the log's frames counted by a passive checkpoint."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)").all()
        enqueue(WAL_SAMPLE)
        with engine.connect() as conn:
            _busy, frames, _done = conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)").one()
    finally:
        engine.dispose()
    return float(frames) / WAL_SAMPLE


#: The floor's table, and its insert in each driver's parameter style.
FLOOR_TABLE = "bench_floor"
FLOOR_INSERT = {
    "sqlite": f"INSERT INTO {FLOOR_TABLE} VALUES (?, ?, ?)",
    "postgresql": f"INSERT INTO {FLOOR_TABLE} VALUES (%s, %s, %s)",
    "mariadb": f"INSERT INTO {FLOOR_TABLE} VALUES (%s, %s, %s)",
}


def floor(store: str, jobs: int) -> float:
    """Microseconds per bare one-row insert, each committed (the driver's autocommit), on a
    DBAPI connection of the app's pool."""
    raw = db.engine.raw_connection()
    try:
        conn: Any = raw.driver_connection
        if store == "sqlite":
            conn.isolation_level = None
        else:
            conn.autocommit(True) if store == "mariadb" else setattr(conn, "autocommit", True)
        cursor = conn.cursor()
        cursor.execute(f"DROP TABLE IF EXISTS {FLOOR_TABLE}")
        cursor.execute(
            f"CREATE TABLE {FLOOR_TABLE} (id CHAR(36) PRIMARY KEY, task VARCHAR(200), payload TEXT)"
        )
        sql = FLOOR_INSERT[store]
        extra = {"prepare": True} if store == "postgresql" else {}  # as ratchet's statement
        for i in range(200):  # warm up
            cursor.execute(sql, (str(uuid.uuid4()), "noop", f"[{i}]"), **extra)
        began = time.perf_counter()
        for i in range(jobs):
            cursor.execute(sql, (str(uuid.uuid4()), "noop", f"[{i}]"), **extra)
        seconds = (time.perf_counter() - began) / jobs
        cursor.execute(f"DROP TABLE {FLOOR_TABLE}")
        cursor.close()
    finally:
        raw.close()
    return seconds * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--store", choices=("postgresql", "sqlite", "mariadb"), default="postgresql"
    )
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--pg", default=DEFAULT_PG)
    parser.add_argument("--mariadb", default=DEFAULT_MARIADB)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.store == "sqlite":
            url = f"sqlite:///{Path(tmp) / 'profile.db'}"
        else:
            url = fresh_database(
                args.pg if args.store == "postgresql" else args.mariadb, "bench_enqueue_profile"
            )
        rows = measure(url, args.store, args.jobs)
    width = max(len(r[0]) for r in rows)
    print(f"{args.store}, pid {os.getpid()}")
    for what, figure in rows:
        print(f"{what:<{width}}  {figure:>8}")


if __name__ == "__main__":
    main()
