"""Python processes forked from an interpreter that has already imported the libraries.

A test process starts hundreds of ``flask ratchet worker`` processes and CLI commands. A new
interpreter spends half of a worker's start-up CPU importing Flask, SQLAlchemy and psycopg, the
same modules each time. So each test process starts one launcher (``python -m tests.preloaded``)
that imports them once and then forks a child per command, like gunicorn's ``--preload``: the
child takes the environment, working directory, ``sys.path`` and output it was given, and runs
the command line (``-m module``, ``-c code`` or a script, with its arguments) as a new
interpreter would from there: its own pid, signals and exit status. The app itself is imported
in the child, from the command's environment.

The child is the launcher's, not the test's: :class:`Process` gives a test the methods of
:class:`subprocess.Popen` it uses, with the exit status the launcher reports.

The protocol is one JSON object a line: the test writes ``{"args", "env", "cwd", "stdout",
"stderr"}`` to the launcher's standard input; the launcher answers ``{"started": pid}`` and,
when a child ends, ``{"ended": pid, "returncode": code, "cpu": seconds}`` on its standard
output.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import tempfile
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

    def __init__(
        self, launcher: Launcher, pid: int, args: list[str], output: tuple[Path, Path]
    ) -> None:
        self._launcher = launcher
        self.pid = pid
        self.args = args
        self.returncode: int | None = None
        self._output = output

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

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Wait for the end; what it wrote to standard output and to standard error."""
        self.wait(timeout)
        out, err = (path.read_text(errors="replace") for path in self._output)
        return out, (err if self._output[1] != self._output[0] else "")

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
#: The launcher's $PYTHONPATH, one entry: the tests' root, so that it can import them.
_LAUNCHER_PATH = str(ROOT)


class Launcher:
    """The launcher process of this test process, started on first use."""

    def __init__(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tests.preloaded"],
            cwd=ROOT,
            env=_ENVIRONMENT | {"PYTHONPATH": _LAUNCHER_PATH},
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

    def start(
        self,
        args: list[str],
        env: dict[str, str],
        cwd: Path,
        stdout: Path,
        stderr: Path | None = None,
    ) -> Process:
        """Fork a child that runs ``python *args``, writing to ``stdout`` and ``stderr`` (the
        same file if ``None``)."""
        stdout.write_bytes(b"")
        if stderr is not None:
            stderr.write_bytes(b"")
        request = {
            "args": args,
            "env": env,
            "cwd": str(cwd),
            "stdout": str(stdout),
            "stderr": str(stderr or stdout),
        }
        with self._start_lock:
            self._requests.write(json.dumps(request).encode() + b"\n")
            self._requests.flush()
            with self._changed:
                self._changed.wait_for(lambda: self._started or self._gone, timeout=60)
                if not self._started:
                    raise RuntimeError("the launcher did not answer (see its stderr)")
                pid = self._started.pop()
        return Process(self, pid, [sys.executable, *args], (stdout, stderr or stdout))

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


def run(
    args: list[str], *, env: dict[str, str], cwd: Path, timeout: float
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run([sys.executable, *args], capture_output=True, text=True)``, forked
    from this process's launcher; its output goes through two temporary files."""
    with tempfile.TemporaryDirectory(prefix="preloaded-") as folder:
        out, err = Path(folder, "stdout"), Path(folder, "stderr")
        proc = launcher().start(args, env, cwd, out, err)
        try:
            stdout, stderr = proc.communicate(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
    return subprocess.CompletedProcess(proc.args, proc.wait(), stdout, stderr)


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
    """Turn this forked child into ``python *args`` as a new interpreter would start it."""
    import faulthandler
    import io
    import runpy

    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    out = os.open(request["stdout"], os.O_WRONLY)
    err = os.open(request["stderr"], os.O_WRONLY) if request["stderr"] != request["stdout"] else out
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.close(out)
    if err != out:
        os.close(err)
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

    # sys.path as a new interpreter builds it: where the command is, then $PYTHONPATH, then
    # the interpreter's own: the launcher's, less its first entry and its $PYTHONPATH's one.
    args = request["args"]
    base = sys.path[2:]
    extra = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    if args[0] == "-m":
        first = os.getcwd()
    elif args[0] == "-c":
        first = ""
    else:
        first = os.path.dirname(os.path.abspath(args[0]))
    sys.path[:] = [first, *extra, *base]

    if args[0] == "-m":
        sys.argv = ["-m", *args[2:]]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    elif args[0] == "-c":
        sys.argv = ["-c", *args[2:]]
        exec(compile(args[1], "<string>", "exec"), {"__name__": "__main__"})
    else:
        sys.argv = list(args)
        runpy.run_path(args[0], run_name="__main__")


if __name__ == "__main__":
    child = serve()
    if child:
        become(child)
