"""ratchet side by side with Procrastinate, PgQueuer (PostgreSQL) and Huey (SQLite), in one run,
and ratchet on MariaDB.

    python -m bench.compare [--jobs 20000] [--enqueue 10000] [--pickups 200] [--quick]
                            [--only drain,enqueue,pickup] [--encryption]
                            [--pg postgresql://root@127.0.0.1:5432/]
                            [--mariadb mariadb+pymysql://root@127.0.0.1:3306/test]
                            [--redis redis://127.0.0.1:6379/0]

The peers are installed, at the versions pinned in ``PINS``, into their own virtualenv
``bench/.peers`` (made on the first run, reused while the pins stay the same) and measured by the
drivers in ``bench/peers/``, each in a fresh database of its own (``bench_peer_<name>``, made anew
for every measurement and dropped at the end; Huey gets a new SQLite file each time). ratchet is
measured with ``bench.worker`` and ``bench.enqueue_claim``, in ``bench_peer_ratchet``:

- drain ``--jobs`` no-op jobs enqueued in bulk: one worker process at concurrency 1 and 10 (or
  the peer's equivalent), timed from its start until every job is done; jobs/s;
- enqueue ``--enqueue`` jobs singly (a transaction each) and in bulk (5,000 per transaction);
- idle pickup: ``--pickups`` jobs 20 ms apart to an idle worker (concurrency 4); latency is the
  job function's start minus the moment before its enqueue call, for every system alike
  (``bench/stamp.py``); ratchet's own ``bench.worker.pickup`` figure is shown beside it.

ratchet on MariaDB has no peer here (no Python job queue runs on it); its idle pickup is measured
twice, polling alone and with wake-ups through Redis (``RATCHET_WAKEUP_URL``).

``--only`` takes the named measurements alone (the others' cells stay empty), e.g. ``--only
enqueue`` for the enqueue rows of every system in a minute.

``--encryption`` measures ratchet alone on PostgreSQL and SQLite, every job clear and then
every job encrypted (``RATCHET_ENCRYPT_ALL``): what payload encryption costs enqueue and drain.

Claim cost with 10k vs 1M pending is ratchet's alone: ``python -m bench.enqueue_claim``.
Prints one Markdown table. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import sqlalchemy as sa

from bench import stamp, worker
from bench.enqueue_claim import (
    DEFAULT_MARIADB,
    bulk,
    db,
    fresh_database,
    make_app,
    ratchet,
    rate,
    single,
)
from bench.peers._common import WARMUP

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / "bench" / ".peers"
DRIVERS = ROOT / "bench" / "peers"
PINS = (
    "procrastinate==3.10.0",
    "psycopg[binary,pool]==3.3.9",
    "pgqueuer==1.6.0",
    "asyncpg==0.32.0",
    "huey==3.5.4",
)
PICKUP_CONCURRENCY = 4  # what bench.worker.pickup gives ratchet's idle worker

PG_COLUMNS = ("ratchet (PG)", "Procrastinate", "PgQueuer")
MARIADB_COLUMNS = ("ratchet (MariaDB)", "ratchet (MariaDB, Redis)")
LITE_COLUMNS = ("ratchet (SQLite)", "Huey")
DRIVER = {"Procrastinate": "procrastinate", "PgQueuer": "pgqueuer", "Huey": "huey"}

Figures = dict[str, str]  # row key -> formatted figure
FAILED: list[str] = []  # measurements that raised, named under the table


def peers_python() -> Path:
    """The peers' interpreter; installs them first unless this set of pins already is."""
    python = VENV / "bin" / "python"
    key = hashlib.sha256("\n".join(PINS).encode()).hexdigest()[:12]
    marker = VENV / f".installed-{key}"
    if marker.exists():
        return python
    if not python.exists():
        base = shutil.which("python3") or sys.executable
        subprocess.run([base, "-m", "venv", str(VENV)], check=True)
    note(f"installing {', '.join(PINS)} into {VENV.relative_to(ROOT)}")
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", *PINS], check=True)
    for old in VENV.glob(".installed-*"):
        old.unlink()
    marker.touch()
    return python


def note(message: str) -> None:
    """Progress goes to stderr, so stdout is the table alone."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def database_url(server: str, name: str) -> str:
    return sa.make_url(server).set(database=name).render_as_string(hide_password=False)


def recreate(server: str, name: str, drop_only: bool = False) -> str:
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        if not drop_only:
            conn.execute(f"CREATE DATABASE {name}")
    return database_url(server, name)


def run_driver(python: Path, peer: str, what: str, db_ref: str, jobs: int, conc: int) -> Any:
    script = DRIVERS / f"{DRIVER[peer]}_bench.py"
    note(f"{peer}: {what} {jobs:,} jobs, concurrency {conc}")
    args = ["--what", what, "--jobs", str(jobs), "--concurrency", str(conc), "--db", db_ref]
    done = subprocess.run(
        [str(python), str(script), *args], cwd=DRIVERS, stdout=subprocess.PIPE, timeout=3600
    )
    if done.returncode != 0:
        raise RuntimeError(f"{script.name} --what {what} exited {done.returncode}")
    return json.loads(done.stdout.decode().strip().splitlines()[-1])


def jobs_per_s(value: float) -> str:
    return f"{value:,.0f}"


def add_pickup(
    figures: Figures, label: str, latencies: list[float], n: int, prefix: str = ""
) -> None:
    if len(latencies) < n:  # the percentiles would silently leave out the slowest jobs
        note(f"{label}: only {len(latencies)} of {n} jobs ran in time")
        FAILED.append(f"{label} ({len(latencies)} of {n} jobs ran)")
    for p in ("50", "95", "99"):
        figures[f"{prefix}p{p}"] = f"{worker.percentile(latencies, int(p) / 100):.1f}"


def measure(label: str, fn: Callable[[], None]) -> None:
    """One measurement; a failure leaves its cells empty, is named under the table, and the
    run goes on."""
    try:
        fn()
    except Exception:
        traceback.print_exc()
        note(f"{label}: failed")
        FAILED.append(label)


def peer(python: Path, name: str, args: argparse.Namespace, fresh: Callable[[], str]) -> Figures:
    """Every measurement of one peer, each in a fresh database from ``fresh()``."""
    figures: Figures = {}

    def drain(conc: int) -> None:
        r = run_driver(python, name, "drain", fresh(), args.jobs, conc)
        figures[f"drain{conc}"] = jobs_per_s(r["jobs_per_s"])

    def enqueue() -> None:
        r = run_driver(python, name, "enqueue", fresh(), args.enqueue, 1)
        figures["single"] = jobs_per_s(r["single"])
        figures["bulk"] = jobs_per_s(r["bulk"])

    def pickup() -> None:
        r = run_driver(python, name, "pickup", fresh(), args.pickups, PICKUP_CONCURRENCY)
        add_pickup(figures, f"{name} pickup", r["latencies_ms"], args.pickups)

    if "drain" in args.only:
        for conc in (1, 10):
            measure(f"{name} drain, concurrency {conc}", lambda c=conc: drain(c))
    if "enqueue" in args.only:
        measure(f"{name} enqueue", enqueue)
    if "pickup" in args.only:
        measure(f"{name} pickup", pickup)
    return figures


def ours(
    url: str, args: argparse.Namespace, pickup_only: bool = False, pickups: bool = True
) -> Figures:
    """ratchet's figures on one store (its schema already in place at ``url``)."""
    figures: Figures = {}

    def drain(conc: int) -> None:
        note(f"ratchet: drain {args.jobs:,} jobs, concurrency {conc}")
        _, wall = worker.drain(url, args.jobs, conc)
        figures[f"drain{conc}"] = jobs_per_s(args.jobs / wall)

    def enqueue() -> None:
        note(f"ratchet: enqueue {args.enqueue:,} jobs")
        worker.reset(url)
        app = make_app(url)
        with app.app_context():
            single(WARMUP)
            figures["single"] = jobs_per_s(rate(args.enqueue, lambda: single(args.enqueue)))
            figures["bulk"] = jobs_per_s(rate(args.enqueue, lambda: bulk(args.enqueue)))
            db.engine.dispose()

    def pickup() -> None:
        note(f"ratchet: pickup {args.pickups} jobs")
        latencies = stamp.pickup(url, args.pickups, concurrency=PICKUP_CONCURRENCY)
        add_pickup(figures, "ratchet pickup", latencies, args.pickups)

    def pickup_db() -> None:
        note("ratchet: pickup, bench.worker's own measurement")
        latencies = worker.pickup(url, args.pickups)
        add_pickup(figures, "ratchet pickup (bench.worker)", latencies, args.pickups, "db ")

    if not pickup_only:
        if "drain" in args.only:
            for conc in (1, 10):
                measure(f"ratchet drain, concurrency {conc}", lambda c=conc: drain(c))
        if "enqueue" in args.only:
            measure("ratchet enqueue", enqueue)
    if pickups and "pickup" in args.only:
        measure("ratchet pickup", pickup)
        measure("ratchet pickup (bench.worker)", pickup_db)
    return figures


@contextlib.contextmanager
def wakeups_through(redis_url: str) -> Iterator[None]:
    """Wake-ups through Redis for the apps and workers made inside (``bench.enqueue_claim``)."""
    os.environ["BENCH_WAKEUP_URL"] = redis_url
    try:
        yield
    finally:
        del os.environ["BENCH_WAKEUP_URL"]


def sqlite_store(directory: str) -> str:
    """The URL of a new SQLite file in ``directory`` with ratchet's tables."""
    url = f"sqlite:///{Path(directory) / 'ratchet.db'}"
    app = make_app(url)
    with app.app_context():
        ratchet.runtime.ensure_schema()
        db.engine.dispose()
    return url


@contextlib.contextmanager
def encrypted() -> Iterator[None]:
    """Every job sealed, for the apps and workers made inside (``bench.enqueue_claim``)."""
    os.environ["BENCH_ENCRYPT"] = "1"
    try:
        yield
    finally:
        del os.environ["BENCH_ENCRYPT"]


def encryption_cost(args: argparse.Namespace) -> dict[str, Figures]:
    """ratchet's enqueue and drain with every job clear, then encrypted, on PostgreSQL and
    SQLite (no pickups: a job's size does not change how soon it is heard of)."""
    columns: dict[str, Figures] = {}
    alchemy = args.pg.replace("postgresql://", "postgresql+psycopg://", 1)
    for label, sealed in (("clear", contextlib.nullcontext()), ("encrypted", encrypted())):
        with sealed:
            pg = fresh_database(alchemy, "bench_encryption")
            columns[f"PG, {label}"] = ours(pg, args, pickups=False)
            recreate(args.pg, "bench_encryption", drop_only=True)
            with tempfile.TemporaryDirectory() as tmp:
                columns[f"SQLite, {label}"] = ours(sqlite_store(tmp), args, pickups=False)
    return columns


def run(args: argparse.Namespace) -> dict[str, Figures]:
    python = peers_python()
    columns: dict[str, Figures] = {}
    names = {"ratchet (PG)": "bench_peer_ratchet"} | {
        peer_: f"bench_peer_{DRIVER[peer_]}" for peer_ in ("Procrastinate", "PgQueuer")
    }
    alchemy = args.pg.replace("postgresql://", "postgresql+psycopg://", 1)
    try:
        columns["ratchet (PG)"] = ours(fresh_database(alchemy, names["ratchet (PG)"]), args)
        for name in ("Procrastinate", "PgQueuer"):
            columns[name] = peer(python, name, args, lambda n=name: recreate(args.pg, names[n]))
    finally:
        for name in names.values():
            recreate(args.pg, name, drop_only=True)
    maria = fresh_database(args.mariadb, "bench_ratchet")
    columns["ratchet (MariaDB)"] = ours(maria, args)
    with wakeups_through(args.redis):
        columns["ratchet (MariaDB, Redis)"] = ours(maria, args, pickup_only=True)
    with tempfile.TemporaryDirectory() as tmp:
        columns["ratchet (SQLite)"] = ours(sqlite_store(tmp), args)
        files = itertools.count()
        columns["Huey"] = peer(python, "Huey", args, lambda: f"{tmp}/huey-{next(files)}.db")
    return columns


def table(args: argparse.Namespace, columns: dict[str, Figures]) -> str:
    jobs, enq, n = f"{args.jobs:,}", f"{args.enqueue:,}", f"{args.pickups:,}"
    rows = [
        ("drain1", f"drain {jobs} no-op jobs, concurrency 1 (jobs/s)"),
        ("drain10", f"drain {jobs} no-op jobs, concurrency 10 (jobs/s)"),
        ("single", f"enqueue {enq} singly, a transaction each (jobs/s)"),
        ("bulk", f"enqueue {enq} in bulk (jobs/s)"),
        ("p50", f"idle pickup p50, {n} jobs 20 ms apart (ms)"),
        ("p95", "idle pickup p95 (ms)"),
        ("p99", "idle pickup p99 (ms)"),
        ("db p50", "idle pickup p50, bench.worker's DB timestamps (ms)"),
        ("db p95", "idle pickup p95, bench.worker's DB timestamps (ms)"),
        ("db p99", "idle pickup p99, bench.worker's DB timestamps (ms)"),
    ]
    heads = [*PG_COLUMNS, *MARIADB_COLUMNS, *LITE_COLUMNS]
    if args.encryption:
        heads, rows = list(columns), rows[:4]  # ratchet clear vs encrypted: no pickups
    lines = [
        "| measurement | " + " | ".join(heads) + " |",
        "|---|" + "---:|" * len(heads),
    ]
    for key, label in rows:
        cells = [columns.get(h, {}).get(key, "—") for h in heads]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


NOTES = """\
- Concurrency: ratchet `--concurrency C` (threads); Procrastinate `concurrency=C` (async slots);
  PgQueuer `batch_size=C, max_concurrent_tasks=2C`; Huey `workers=C` threads. Drain is end to end:
  one worker process from its start until it has exited with every job done.
- Bulk enqueue: ratchet `enqueue_many`, Procrastinate `batch_defer_async`, PgQueuer `enqueue` with
  lists, all in transactions of 5,000; Huey has no batch API, so its figure is `Task.map`, which
  commits each job.
- Huey runs with its defaults: idle polling backs off from 0.1 s towards 10 s (no wake-up), and
  SQLite's `synchronous=FULL` (ratchet sets NORMAL).
- Peers: """


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg", default="postgresql://root@127.0.0.1:5432/")
    parser.add_argument("--mariadb", default=DEFAULT_MARIADB)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--jobs", type=int, default=None, help="jobs to drain (20,000)")
    parser.add_argument("--enqueue", type=int, default=None, help="jobs to enqueue (10,000)")
    parser.add_argument("--pickups", type=int, default=None, help="pickup jobs (200)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2,000 jobs, 50 pickups")
    parser.add_argument(
        "--only",
        default="drain,enqueue,pickup",
        help="the measurements to take, comma-separated (default: all three)",
    )
    parser.add_argument(
        "--encryption", action="store_true", help="ratchet alone: clear vs encrypted jobs"
    )
    args = parser.parse_args()
    args.only = {part.strip() for part in args.only.split(",") if part.strip()}
    unknown = args.only - {"drain", "enqueue", "pickup"}
    if unknown:
        parser.error(f"--only takes drain, enqueue and pickup, not {', '.join(sorted(unknown))}")
    defaults = (2000, 2000, 50) if args.quick else (20_000, 10_000, 200)
    args.jobs = args.jobs or defaults[0]
    args.enqueue = args.enqueue or defaults[1]
    args.pickups = args.pickups or defaults[2]
    columns = encryption_cost(args) if args.encryption else run(args)
    print(table(args, columns))
    if not args.encryption:
        print()
        print(NOTES + ", ".join(PINS) + ".")
    if FAILED:
        print(f"- Failed (see stderr): {'; '.join(FAILED)}.")


if __name__ == "__main__":
    main()
