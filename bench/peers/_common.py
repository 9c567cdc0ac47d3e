"""What the peer drivers share: their arguments, the timed worker process, pickup stamps.

The drivers run with the peers' own interpreter (``bench/.peers``), so this module imports
nothing from flask-ratchet; they import it as a sibling script module.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# The same figures bench/worker.py and bench/enqueue_claim.py use for ratchet.
IDLE_SECONDS = 3.0  # let the worker start and go idle before the first pickup job
BULK_CHUNK = 5000  # jobs per bulk-enqueue transaction
WARMUP = 100  # single enqueues before the timed ones, to warm connections and statement caches


def parse_args(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--what", choices=["drain", "enqueue", "pickup"], required=True)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--db", required=True, help="PostgreSQL URL, or the SQLite file for Huey")
    parser.add_argument("--spacing", type=float, default=0.02, help="seconds between pickup jobs")
    # The driver starts itself again as the worker process; that copy is told so here.
    parser.add_argument("--role", choices=["bench", "worker"], default="bench")
    return parser.parse_args()


def spawn_worker(args: argparse.Namespace, capture: bool) -> subprocess.Popen[bytes]:
    """This driver again, as the one worker process, with the same arguments."""
    cmd = [
        sys.executable,
        os.path.abspath(sys.argv[0]),
        "--role",
        "worker",
        "--what",
        args.what,
        "--jobs",
        str(args.jobs),
        "--concurrency",
        str(args.concurrency),
        "--db",
        args.db,
    ]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE if capture else subprocess.DEVNULL)


def time_drain(args: argparse.Namespace) -> dict[str, Any]:
    """Time one worker process from its start until it exits with every job done."""
    began = time.perf_counter()
    proc = spawn_worker(args, capture=True)
    out, _ = proc.communicate(timeout=1800)
    wall = time.perf_counter() - began
    if proc.returncode != 0:
        raise SystemExit(f"worker exited {proc.returncode}")
    ran = json.loads(out.decode().strip().splitlines()[-1])["ran"]
    if ran != args.jobs:
        raise SystemExit(f"worker ran {ran} of {args.jobs} jobs")
    return {
        "what": "drain",
        "jobs": args.jobs,
        "concurrency": args.concurrency,
        "wall_s": wall,
        "jobs_per_s": args.jobs / wall,
    }


def ran_report(ran: int) -> None:
    """The worker's last stdout line: how many jobs its own process executed."""
    print(json.dumps({"ran": ran}), flush=True)


def stamp_file() -> str:
    fd, path = tempfile.mkstemp(prefix="bench-stamps-", suffix=".txt")
    os.close(fd)
    return path


def record_stamp(path: str, enqueued: float) -> None:
    """Called first thing in a pickup job: its start minus its enqueue time, in ms."""
    started = time.time()
    with open(path, "a") as f:
        f.write(f"{(started - enqueued) * 1000:.3f}\n")


def read_stamps(path: str, n: int, timeout: float = 60.0) -> list[float]:
    """Wait until ``n`` pickup jobs have stamped (or the timeout); their latencies, sorted."""
    deadline = time.monotonic() + timeout
    lines: list[str] = []
    while time.monotonic() < deadline:
        lines = Path(path).read_text().splitlines()
        if len(lines) >= n:
            break
        time.sleep(0.05)
    os.unlink(path)
    return sorted(float(x) for x in lines)


def pickup_result(latencies: list[float], n: int, concurrency: int) -> dict[str, Any]:
    return {"what": "pickup", "jobs": n, "concurrency": concurrency, "latencies_ms": latencies}


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def emit(result: dict[str, Any]) -> None:
    """The driver's one JSON object on stdout."""
    print(json.dumps(result), flush=True)
