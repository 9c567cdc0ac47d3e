"""MariaDB going away under real workers: a server killed and restarted mid-drain, and every
connection of the workers killed (``KILL CONNECTION``) again and again. Every job runs, once;
the workers reconnect by themselves. The restart is a private server of the test's own
(``mariadb-install-db`` into a temporary directory, ``mariadbd`` on a loopback port of its own),
never the shared one other tests run on."""

from __future__ import annotations

import collections
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from flask_ratchet import migrate
from tests.acceptance.conftest import Workers, wait_until
from tests.apps import create_app, db, mark_run, ratchet

JOBS = 1500


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateServer:
    """A MariaDB server of this test's own, in ``folder``, on a free loopback port."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        installed = subprocess.run(
            [
                shutil.which("mariadb-install-db") or "mariadb-install-db",
                "--no-defaults",
                f"--datadir={folder / 'data'}",
                "--auth-root-authentication-method=normal",
                "--user=root",
                "--skip-test-db",
            ],
            capture_output=True,
            timeout=120,
        )
        assert installed.returncode == 0, installed.stdout + installed.stderr
        self.start()
        admin = sa.create_engine(self.url("mysql"))
        with admin.connect() as conn:
            conn.exec_driver_sql("CREATE DATABASE ratchet")
        admin.dispose()
        engine = sa.create_engine(self.url())
        migrate.upgrade(engine)
        db.metadata.create_all(engine)  # the test app's own tables
        engine.dispose()

    def url(self, database: str = "ratchet") -> str:
        return f"mariadb+pymysql://root@127.0.0.1:{self.port}/{database}?charset=utf8mb4"

    def start(self) -> None:
        log = open(self.folder / "server.log", "ab")
        self.proc = subprocess.Popen(
            [
                "/usr/sbin/mariadbd",
                "--no-defaults",
                f"--datadir={self.folder / 'data'}",
                f"--port={self.port}",
                "--bind-address=127.0.0.1",
                f"--socket={self.folder / 'sock'}",
                "--user=root",
                "--skip-name-resolve",
                "--innodb-buffer-pool-size=64M",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                assert self.proc.poll() is None, (self.folder / "server.log").read_text()
                assert time.monotonic() < deadline, "mariadbd did not listen within 60 s"
                time.sleep(0.1)

    def kill(self) -> None:
        """Die as in a crash: no shutdown, InnoDB recovers at the next start."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)


@pytest.fixture
def private(tmp_path: Path) -> Iterator[PrivateServer]:
    server = PrivateServer(tmp_path / "mariadb")
    yield server
    server.kill()


def runs(path: Path) -> collections.Counter[str]:
    text = path.read_text() if path.exists() else ""
    return collections.Counter(line for line in text.splitlines() if line)


def enqueue_marks(url: str, path: Path) -> list[str]:
    app = create_app(url)
    with app.app_context():
        ratchet.runtime.ensure_schema()
        handles = ratchet.enqueue_many(ratchet.enqueue(mark_run, str(path)) for _ in range(JOBS))
        db.engine.dispose()
    return [str(h.id) for h in handles]


def every_job_ran_once(url: str, path: Path, ids: list[str]) -> None:
    counted = runs(path)
    assert sorted(counted) == sorted(ids), "every job ran"
    assert max(counted.values()) == 1, [i for i, n in counted.items() if n > 1][:5]
    app = create_app(url)
    with app.app_context():
        wait_until(
            lambda: ratchet.queue_health()["counts"]["SUCCEEDED"] == JOBS,
            timeout=60,
            what="every outcome to be written",
        )
        db.engine.dispose()


def drain_through(url: str, tmp_path: Path, fault: Callable[[], None]) -> None:
    """Two workers drain :data:`JOBS` jobs on ``url``; ``fault`` strikes once a fifth of them
    ran. Every job runs once, and the workers are still up: they reconnected by themselves."""
    marks = tmp_path / "runs.txt"
    ids = enqueue_marks(url, marks)
    workers = Workers(url, tmp_path)
    try:
        procs = [workers.start("--concurrency", "4") for _ in range(2)]
        wait_until(
            lambda: all(" started" in workers.output(p) for p in procs),
            timeout=120,
            what="both workers to start",
        )
        wait_until(lambda: len(runs(marks)) >= JOBS // 5, timeout=120, what="a fifth to run")
        fault()
        wait_until(lambda: len(runs(marks)) >= JOBS, timeout=240, what="every job to run")
        every_job_ran_once(url, marks, ids)
        ended = [workers.output(p)[-4000:] for p in procs if p.poll() is not None]
        assert not ended, ended
    finally:
        workers.stop_all()


def test_a_server_killed_and_restarted_mid_drain_loses_and_repeats_nothing(
    private: PrivateServer, tmp_path: Path
) -> None:
    def restart() -> None:
        private.kill()
        time.sleep(2)  # the workers meet the dead server: claims, outcomes and beats fail
        private.start()

    drain_through(private.url(), tmp_path, restart)


@pytest.mark.parametrize("database_url", ["mariadb"], indirect=True)
def test_killed_connections_lose_and_repeat_nothing(database_url: str, tmp_path: Path) -> None:
    killer = sa.create_engine(database_url)
    killed = 0

    def kill_every_connection_for_a_while() -> None:
        nonlocal killed
        with killer.connect() as conn:
            for _ in range(10):
                time.sleep(0.4)
                found = conn.exec_driver_sql(
                    "SELECT id FROM information_schema.processlist "
                    "WHERE db = DATABASE() AND id <> CONNECTION_ID()"
                ).scalars()
                for pid in list(found):
                    try:
                        conn.exec_driver_sql(f"KILL CONNECTION {int(pid)}")
                        killed += 1
                    except sa.exc.OperationalError:
                        pass  # gone already

    try:
        drain_through(database_url, tmp_path, kill_every_connection_for_a_while)
    finally:
        killer.dispose()
    assert killed > 5
