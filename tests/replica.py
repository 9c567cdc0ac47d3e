"""A PostgreSQL primary and its streaming replica on loopback ports, in temporary directories:
what the read-replica tests (``RATCHET_READ_URL``) read from, usable from a benchmark too.

The machine's own server is left alone (its ``pg_hba.conf`` allows no replication): this makes
a primary of its own with ``initdb`` (trust on 127.0.0.1 for connections and replication),
copies it with ``pg_basebackup -R`` and starts the copy as a hot standby, each on a free port
with its Unix socket in its own directory. Run as root, the servers run as ``postgres``
(``runuser``), which owns their directories.

    with running_replica() as pair:
        pair.primary_url()   # postgresql+psycopg://postgres@127.0.0.1:<port>/app
        pair.replica_url()

:func:`running_server` starts a server alone, with initdb's defaults: autovacuum runs there
(the soak, ``bench.soak --own-server``, needs it; the machine's server may have it off).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

#: Where Debian's PostgreSQL 15 puts its server programs.
BIN = Path(os.environ.get("RATCHET_PG_BIN", "/usr/lib/postgresql/15/bin"))
#: The role the servers run as and the tests connect as.
USER = "postgres"
#: The database made on the primary (and so on the replica) besides ``postgres``.
DATABASE = "app"
#: How long a server may take to start, and the replica to reach recovery.
START_TIMEOUT = 60.0

_HBA = (
    "local all all trust\n"
    "host all all 127.0.0.1/32 trust\n"
    "host replication all 127.0.0.1/32 trust\n"
)
_SETTINGS = (
    "listen_addresses = '127.0.0.1'\n"
    "fsync = off\n"  # a test's server: nothing here must survive a crash
    "synchronous_commit = off\n"
    "full_page_writes = off\n"
    "wal_level = replica\n"
    "max_wal_senders = 4\n"
    "hot_standby = on\n"
    "shared_buffers = 16MB\n"
    "max_connections = 40\n"
)


class ReplicaError(RuntimeError):
    """A server did not start, or the replica did not reach recovery."""


@dataclass(frozen=True, slots=True)
class ReplicaPair:
    """The ports of the primary and of its streaming replica."""

    primary_port: int
    replica_port: int

    def primary_url(self, database: str = DATABASE) -> str:
        """A URL of ``database`` on the primary."""
        return f"postgresql+psycopg://{USER}@127.0.0.1:{self.primary_port}/{database}"

    def replica_url(self, database: str = DATABASE) -> str:
        """A URL of ``database`` on the replica."""
        return f"postgresql+psycopg://{USER}@127.0.0.1:{self.replica_port}/{database}"


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_postgres(*command: str | Path, log: Path | None = None) -> None:
    """Run a server program as ``postgres`` (through ``runuser`` when this process is root)."""
    args = [str(c) for c in command]
    if os.geteuid() == 0:
        args = ["runuser", "-u", USER, "--", *args]
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        said = done.stdout + done.stderr
        if log is not None and log.exists():
            said += log.read_text(errors="replace")
        raise ReplicaError(f"{' '.join(args)} exited {done.returncode}: {said}")


def _start(data: Path, port: int) -> None:
    _as_postgres(
        BIN / "pg_ctl",
        "start",
        "-w",
        "-t",
        str(int(START_TIMEOUT)),
        "-D",
        data,
        "-l",
        data.parent / f"{data.name}.log",
        "-o",
        f"-p {port} -k {data.parent}",
        log=data.parent / f"{data.name}.log",
    )


def _stop(data: Path) -> None:
    if (data / "postmaster.pid").exists():
        try:
            _as_postgres(BIN / "pg_ctl", "stop", "-m", "immediate", "-D", data)
        except ReplicaError:
            pass  # already gone: the directory is removed all the same


@contextmanager
def running_replica() -> Iterator[ReplicaPair]:
    """Start a primary and a streaming replica of it in a new directory of the system's
    temporary one (``postgres``'s: a pytest or ``TemporaryDirectory`` folder is root's alone);
    yield their ports once the replica is in recovery; stop both and remove their files."""
    if not (BIN / "initdb").exists():
        raise ReplicaError(f"PostgreSQL's server programs are not in {BIN} (RATCHET_PG_BIN)")
    home = _home("ratchet_replica_")
    primary, replica = home / "primary", home / "replica"
    pair = ReplicaPair(free_port(), free_port())
    try:
        _initdb(primary, _SETTINGS)
        _start(primary, pair.primary_port)
        _as_postgres(
            BIN / "createdb", "-h", "127.0.0.1", "-p", str(pair.primary_port), "-U", USER, DATABASE
        )
        _as_postgres(
            BIN / "pg_basebackup",
            "-h",
            "127.0.0.1",
            "-p",
            str(pair.primary_port),
            "-U",
            USER,
            "-D",
            replica,
            "-R",  # standby.signal and primary_conninfo: a streaming standby
            "-X",
            "stream",
            "-c",
            "fast",
            "--no-sync",
        )
        _start(replica, pair.replica_port)
        _wait_for_recovery(pair.replica_url())
        yield pair
    finally:
        for data in (replica, primary):
            _stop(data)
        shutil.rmtree(home, ignore_errors=True)


@contextmanager
def running_server(settings: str = "") -> Iterator[int]:
    """Start a PostgreSQL server alone, with initdb's defaults (autovacuum on, as in
    production) and ``settings`` (``postgresql.conf`` lines) added, in a new directory of the
    system's temporary one; yield its port (``postgres`` trusted on 127.0.0.1, its database
    ``postgres``); stop it and remove its files."""
    if not (BIN / "initdb").exists():
        raise ReplicaError(f"PostgreSQL's server programs are not in {BIN} (RATCHET_PG_BIN)")
    home = _home("ratchet_server_")
    data, port = home / "server", free_port()
    try:
        _initdb(data, "listen_addresses = '127.0.0.1'\n" + settings)
        _start(data, port)
        yield port
    finally:
        _stop(data)
        shutil.rmtree(home, ignore_errors=True)


def _home(prefix: str) -> Path:
    """A new directory for servers' files, ``postgres``'s alone."""
    home = Path(tempfile.mkdtemp(prefix=prefix))
    shutil.chown(home, USER, USER)
    home.chmod(0o700)
    return home


def _initdb(data: Path, settings: str) -> None:
    """A new cluster in ``data``: trust on loopback, ``settings`` added to its configuration."""
    _as_postgres(BIN / "initdb", "-D", data, "-U", USER, "-A", "trust", "-E", "UTF8", "--no-sync")
    (data / "pg_hba.conf").write_text(_HBA)
    with (data / "postgresql.conf").open("a") as conf:
        conf.write(settings)


def _wait_for_recovery(url: str) -> None:
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    deadline = time.monotonic() + START_TIMEOUT
    try:
        while True:
            try:
                with engine.connect() as conn:
                    if conn.execute(sa.text("SELECT pg_is_in_recovery()")).scalar_one():
                        return
            except sa.exc.OperationalError:
                pass  # still starting
            if time.monotonic() > deadline:
                raise ReplicaError(f"the replica was not in recovery within {START_TIMEOUT} s")
            time.sleep(0.05)
    finally:
        engine.dispose()


def wait_for_replay(primary_url: str, replica_url: str, timeout: float = 30.0) -> None:
    """Return once the replica has replayed everything the primary had written when called."""
    with sa.create_engine(primary_url, poolclass=sa.NullPool).connect() as conn:
        # The insert position, not the write position: a commit made with synchronous_commit
        # off (a worker's claims) may not be written out yet, and the write one is short of it.
        target = conn.execute(sa.text("SELECT pg_current_wal_insert_lsn()")).scalar_one()
    engine = sa.create_engine(replica_url, poolclass=sa.NullPool)
    deadline = time.monotonic() + timeout
    try:
        while True:
            with engine.connect() as conn:
                behind = conn.execute(
                    sa.text("SELECT pg_wal_lsn_diff(:target, pg_last_wal_replay_lsn()) > 0"),
                    {"target": target},
                ).scalar_one()
            if not behind:
                return
            if time.monotonic() > deadline:
                raise ReplicaError(f"the replica did not replay up to {target} in {timeout} s")
            time.sleep(0.02)
    finally:
        engine.dispose()


if __name__ == "__main__":
    began = time.perf_counter()
    with running_replica() as ports:
        up = time.perf_counter()
        print(f"primary :{ports.primary_port}, replica :{ports.replica_port}: {up - began:.2f} s")
    print(f"stopped and removed: {time.perf_counter() - began:.2f} s in all")
