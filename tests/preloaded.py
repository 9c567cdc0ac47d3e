"""Worker processes forked from an interpreter that has already imported the libraries.

A test process starts hundreds of ``flask ratchet worker`` processes. A new interpreter spends
half of a worker's start-up CPU importing Flask, SQLAlchemy and psycopg, the same modules each
time. So each test process starts one launcher (``python -m tests.preloaded``) that imports
them once and then forks a child per worker, like gunicorn's ``--preload``: the child sets the
environment, working directory and output it was given, and runs ``python -m flask`` with the
test's arguments, exactly as a new interpreter would from there (its own pid, signals and exit
status; the app itself is imported in the child, from the test's environment).

The child is the launcher's, not the test's: :class:`Process` gives a test the methods of
:class:`subprocess.Popen` it uses, with the exit status the launcher reports.

The protocol is one JSON object a line: the test writes ``{"argv", "env", "cwd", "log"}`` to
the launcher's standard input; the launcher answers ``{"started": pid}`` and, when a child
ends, ``{"ended": pid, "returncode": code, "cpu": seconds}`` on its standard output.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[1]

#: What every worker of the test apps imports before it runs its first job. Nothing optional
#: (Sentry, the OpenTelemetry SDK, prometheus_client): a test may check a worker never loads it.
PRELOAD = (
    "flask.cli",
    "flask_ratchet.cli",
    "flask_ratchet.worker",
    "flask_ratchet.worker.runner",
    "psycopg",
    "pymysql",
    "sqlalchemy.dialects.postgresql.psycopg",
    "sqlalchemy.dialects.mysql.pymysql",
    "sqlalchemy.dialects.sqlite.pysqlite",
    "tests.apps",
)


# -- the test's side ------------------------------------------------------------------------------


class Process:
    """A child of the launcher, as much of :class:`subprocess.Popen` as the tests use."""

    def __init__(self, launcher: Launcher, pid: int, args: list[str]) -> None:
        self._launcher = launcher
        self.pid = pid
        self.args = args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._launcher.returncode(self.pid, timeout=0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._launcher.returncode(self.pid, timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # as Popen: never signal a pid that may be another's by now
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


#: The environment the launcher imports in: the test process's as it started, never one a test
#: has changed for itself (each child gets the environment its test gives it).
_ENVIRONMENT = dict(os.environ)


class Launcher:
    """The launcher process of this test process, started on first use."""

    def __init__(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tests.preloaded"],
            cwd=ROOT,
            env=_ENVIRONMENT | {"PYTHONPATH": str(ROOT)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._requests: IO[bytes] = self._proc.stdin
        self._answers: IO[bytes] = self._proc.stdout
        self._changed = threading.Condition()
        self._started: list[int] = []
        self._ended: dict[int, int] = {}
        self._gone = False
        #: CPU seconds of the children that have ended (``tests.cpu_report`` counts them).
        self.children_cpu = 0.0
        self._start_lock = threading.Lock()
        threading.Thread(target=self._read, name="launcher-answers", daemon=True).start()

    def _read(self) -> None:
        for line in self._answers:
            answer = json.loads(line)
            with self._changed:
                if "started" in answer:
                    self._started.append(answer["started"])
                else:
                    self._ended[answer["ended"]] = answer["returncode"]
                    self.children_cpu += answer["cpu"]
                self._changed.notify_all()
        with self._changed:
            self._gone = True
            self._changed.notify_all()

    def start(self, argv: list[str], env: dict[str, str], cwd: Path, log: Path) -> Process:
        """Fork a child that runs ``python -m flask *argv``, writing to ``log``."""
        log.touch()
        request = {"argv": argv, "env": env, "cwd": str(cwd), "log": str(log)}
        with self._start_lock:
            self._requests.write(json.dumps(request).encode() + b"\n")
            self._requests.flush()
            with self._changed:
                self._changed.wait_for(lambda: self._started or self._gone, timeout=60)
                if not self._started:
                    raise RuntimeError("the worker launcher did not answer (see its stderr)")
                pid = self._started.pop()
        return Process(self, pid, [sys.executable, "-m", "flask", *argv])

    def returncode(self, pid: int, timeout: float | None) -> int | None:
        """``pid``'s exit status once it has ended, waiting up to ``timeout`` seconds."""
        with self._changed:
            self._changed.wait_for(lambda: pid in self._ended or self._gone, timeout=timeout)
            if pid not in self._ended and self._gone:
                raise RuntimeError(f"the worker launcher ended before its child {pid}")
            return self._ended.get(pid)

    def close(self) -> None:
        """End the launcher (its children end with their tests) and reap it, so that its CPU
        counts as this process's children's."""
        self._requests.close()
        self._proc.wait(30)


_launcher: Launcher | None = None
_all: list[Launcher] = []
_launcher_lock = threading.Lock()


@atexit.register
def _close() -> None:
    if _launcher is not None and not _launcher._gone:
        _launcher.close()


def children_cpu() -> float:
    """CPU seconds of the children of this process's launchers that have ended so far."""
    return sum(each.children_cpu for each in _all)


def launcher() -> Launcher:
    """This test process's launcher."""
    global _launcher
    with _launcher_lock:
        if _launcher is None or _launcher._gone:
            _launcher = Launcher()
            _all.append(_launcher)
        return _launcher


# -- the launcher's side --------------------------------------------------------------------------


def serve() -> dict[str, Any]:
    """Fork a child for each request until standard input ends; in a child, return its request.

    One thread: it waits on the requests and on SIGCHLD (through the wake-up fd) together."""
    import importlib
    import selectors

    # No gc.freeze() here: a worker freezes what it built itself, and a test checks it does.
    for name in PRELOAD:
        importlib.import_module(name)
    if threading.active_count() != 1:
        raise RuntimeError("a preloaded module started a thread: a forked child would lack it")

    answers = sys.stdout.buffer
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_write)
    selector = selectors.DefaultSelector()
    selector.register(sys.stdin.buffer, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    requests = sys.stdin.buffer
    while True:
        for key, _ in selector.select():
            if key.fileobj is wake_read:
                os.read(wake_read, 4096)
                while True:
                    try:
                        pid, status, usage = os.wait4(-1, os.WNOHANG)
                    except ChildProcessError:
                        break
                    if pid == 0:
                        break
                    ended = {
                        "ended": pid,
                        "returncode": os.waitstatus_to_exitcode(status),
                        "cpu": usage.ru_utime + usage.ru_stime,
                    }
                    answers.write(json.dumps(ended).encode() + b"\n")
                answers.flush()
                continue
            line = requests.readline()
            if not line:
                return {}
            request = json.loads(line)
            pid = os.fork()
            if pid == 0:
                selector.close()
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                os.close(wake_read)
                os.close(wake_write)
                return dict(request)
            answers.write(json.dumps({"started": pid}).encode() + b"\n")
            answers.flush()


def become(request: dict[str, Any]) -> None:
    """Turn this forked child into ``python -m flask *argv`` as a new interpreter would start it."""
    import faulthandler
    import io
    import runpy

    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    log = os.open(request["log"], os.O_WRONLY)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    # The streams a new interpreter would open on these descriptors (-u or not).
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))

    def stream(fd: int, line_buffering: bool) -> io.TextIOWrapper:
        raw = io.FileIO(fd, "w", closefd=False)
        binary: Any = raw if unbuffered else io.BufferedWriter(raw)
        errors = "backslashreplace" if fd == 2 else "strict"
        return io.TextIOWrapper(
            binary,
            encoding="utf-8",
            errors=errors,
            line_buffering=line_buffering,
            write_through=unbuffered,
        )

    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
    sys.stdout = stream(1, line_buffering=False)
    sys.stderr = stream(2, line_buffering=True)
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
    if os.environ.get("PYTHONFAULTHANDLER"):
        faulthandler.enable(all_threads=True)
    sys.argv = ["flask", *request["argv"]]
    runpy.run_module("flask", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    child = serve()
    if child:
        become(child)
