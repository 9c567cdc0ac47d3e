"""A PgBouncer in transaction pooling mode in front of a PostgreSQL server, on a free loopback
port: what the pooler tests and the pooler benchmark run through.

    python -m bench.pgbouncer [--pg URL]    # pickup latency through PgBouncer

Debian's ``pgbouncer`` package (``make system-deps`` installs it). Started as root, it drops to
``nobody`` (it refuses to run as root) after reading its file.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa

#: Where Debian installs it.
BINARY = "/usr/sbin/pgbouncer"


class PgBouncerError(RuntimeError):
    """PgBouncer is missing, or did not start."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def running_pgbouncer(server_url: str, home: Path, pool_size: int = 10) -> Iterator[int]:
    """Run PgBouncer (``pool_mode = transaction``) in front of the server of ``server_url``,
    any database name passed through, its file and log in ``home``; yield its port."""
    binary = shutil.which("pgbouncer") or BINARY
    if not os.path.exists(binary):
        raise PgBouncerError("pgbouncer is not installed: `make system-deps` installs it")
    server = sa.make_url(server_url)
    port = free_port()
    config = home / "pgbouncer.ini"
    config.write_text(
        "[databases]\n"
        f"* = host={server.host or '127.0.0.1'} port={server.port or 5432} "
        f"user={server.username or 'root'}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        "auth_type = any\npool_mode = transaction\n"
        f"max_client_conn = 500\ndefault_pool_size = {pool_size}\n"
    )
    config.chmod(0o644)
    command = [binary, str(config)]
    if os.geteuid() == 0:
        command[1:1] = ["-u", "nobody"]
    log = home / "pgbouncer.log"  # what it writes to stderr, written by this process
    with log.open("wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                said = log.read_text(errors="replace")
                raise PgBouncerError(f"pgbouncer exited ({proc.returncode}): {said}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if time.monotonic() > deadline:
                raise PgBouncerError(f"pgbouncer did not listen on {port} within 30 s")
            time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def through(url: str, port: int) -> str:
    """``url`` with the pooler's port."""
    return sa.make_url(url).set(port=port).render_as_string(hide_password=False)


def main() -> None:
    from bench.enqueue_claim import DEFAULT_PG, fresh_database
    from bench.worker import percentile, pickup

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg", default=DEFAULT_PG)
    parser.add_argument("--pickups", type=int, default=200)
    args = parser.parse_args()
    direct = fresh_database(args.pg, "ratchet_bench_pgbouncer")
    rows = []
    with tempfile.TemporaryDirectory() as home, running_pgbouncer(args.pg, Path(home)) as port:
        os.chmod(home, 0o755)
        pooled = through(direct, port)
        for label, listen in (("LISTEN on a direct URL", direct), ("polling only", "")):
            os.environ["BENCH_POOLED"] = "1"
            os.environ["BENCH_LISTEN_URL"] = listen
            got = pickup(pooled, args.pickups)
            rows.append((label, got))
    print(f"{'through PgBouncer (transaction mode)':<40} {'p50':>8} {'p95':>8} {'p99':>8}")
    for label, got in rows:
        p50, p95, p99 = (percentile(got, p) for p in (0.5, 0.95, 0.99))
        print(f"{label:<40} {p50:>6.1f}ms {p95:>6.1f}ms {p99:>6.1f}ms")


if __name__ == "__main__":
    main()
