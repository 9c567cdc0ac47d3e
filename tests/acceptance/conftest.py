"""Real ``flask ratchet worker`` processes against the test databases."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.preloaded import Process, launcher

ROOT = Path(__file__).resolve().parents[2]

#: SQLite: job threads of several processes commit to one file; give the jobs' own writes the
#: patient busy timeout the worker's engine has (see test_worker.py).
PATIENT = {"SQLALCHEMY_ENGINE_OPTIONS": {"connect_args": {"timeout": 30}}}
#: PostgreSQL: the job threads of a worker share four connections of the app's. Several workers
#: of eight threads each would otherwise hold half of the server's hundred connections at once,
#: and two such tests side by side in a parallel run would find none left.
SHARED = {"SQLALCHEMY_ENGINE_OPTIONS": {"pool_size": 4, "max_overflow": 0}}


def wait_until(check: Callable[[], Any], timeout: float = 120.0, what: str = "condition") -> Any:
    """Poll ``check`` until it returns something truthy; fail after ``timeout`` seconds.

    The bound only says "never": a check that comes true returns at once, and CI runs more
    test processes than this machine has CPUs, which made a 30 s bound fail jobs that take
    a few seconds on a quiet machine."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    """The most intervals that overlap at any moment (one that ends as another starts does
    not overlap it)."""
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    now = most = 0
    for _, step in edges:  # at equal times -1 sorts first: the end before the start
        now += step
        most = max(most, now)
    return most


class Workers:
    """Starts worker processes for one database and cleans them up."""

    def __init__(self, url: str, logs: Path) -> None:
        self.url = url
        self.logs = logs
        self.config: dict[str, Any] = {
            "RATCHET_HEARTBEAT_INTERVAL": 0.5,
            "RATCHET_POLL_INTERVAL": 0.2,
            "RATCHET_POLL_MAX_INTERVAL": 1,
            "RATCHET_DEEP_IDLE_AFTER": 60,
        }
        self.procs: list[subprocess.Popen[bytes] | Process] = []

    def start(
        self,
        *args: str,
        app: str = "tests.apps:create_app()",
        fresh: bool = False,
        **config: Any,
    ) -> subprocess.Popen[bytes] | Process:
        """``flask --app APP ratchet worker *args``, with ``config`` over the app's.

        Forked from this test process's launcher (:mod:`tests.preloaded`), which has imported
        the libraries already; ``fresh`` starts a new interpreter instead."""
        env = os.environ | {
            "RATCHET_TEST_URL": self.url,
            "RATCHET_TEST_CONFIG": json.dumps(self.config | config),
            "PYTHONPATH": str(ROOT),
            # A worker that will not stop is ended with SIGABRT (stop_all): it prints where
            # every thread of it stood into its log first.
            "PYTHONFAULTHANDLER": "1",
        }
        argv = ["--app", app, "ratchet", "worker", *args]
        path = self.logs / f"worker-{len(self.procs)}.log"
        proc: subprocess.Popen[bytes] | Process
        if fresh:
            with open(path, "wb") as log:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "flask", *argv],
                    cwd=ROOT,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
        else:
            proc = launcher().start(["-m", "flask", *argv], env, ROOT, path)
        self.procs.append(proc)
        return proc

    def output(self, proc: subprocess.Popen[bytes] | Process) -> str:
        return (self.logs / f"worker-{self.procs.index(proc)}.log").read_text(errors="replace")

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.send_signal(signal.SIGABRT)  # every thread's stack into its log
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)


@pytest.fixture
def workers(database_url: str, tmp_path: Path) -> Iterator[Workers]:
    pool = Workers(database_url, tmp_path)
    yield pool
    pool.stop_all()
    # Printed at teardown, so pytest shows what the workers said beside a failure (and keeps
    # it to itself otherwise).
    for proc in pool.procs:
        print(f"--- worker {pool.procs.index(proc)} (exit {proc.returncode}) ---")
        print(pool.output(proc)[-20_000:])
