"""Python processes forked from an interpreter that has already imported the libraries.

A test process starts hundreds of ``flask ratchet worker`` processes and CLI commands. A new
interpreter spends half of a worker's start-up CPU importing Flask, SQLAlchemy and psycopg, the
same modules each time. So each test process starts one launcher (``python -m tests.preloaded``)
that imports them once and then forks a child per command, like gunicorn's ``--preload``: the
child takes the environment, working directory and output it was given, builds ``sys.path``
as a new interpreter would from them, and runs the command line (``-m module``, ``-c code`` or
a script, with its arguments) in a new ``__main__`` module: its own pid, signals and exit status.
The app itself is imported in the child, from the command's environment.

What still differs from a new interpreter: the modules of :data:`PRELOAD` are imported already,
every child has the launcher's hash seed (``random`` and ratchet's ids are seeded again at the
fork), standard input is ``/dev/null``, and what the interpreter reads from the environment as
it starts (``sys.flags``, ``PYTHONWARNINGS``) is the launcher's. A test that needs a new
interpreter starts one (``Workers.start(..., fresh=True)``).

The child is the launcher's, not the test's: :class:`Process` gives a test the methods of
:class:`subprocess.Popen` it uses. The launcher is the only one that reaps its children, and
it signals them itself, so that a signal can only reach a child that has not been reaped: its
pid is still its own, as with ``Popen.send_signal``.

The protocol is one JSON object a line, each request answered in turn (the test sends the next
one only once it has the answer). The test writes ``{"start": n, "args", "env", "cwd",
"stdout", "stderr"}`` or ``{"signal": n, "number": sig}`` to the launcher's standard input; the
launcher answers ``{"started": n, "pid": pid}`` (or ``{"started": n, "error": why}``) and
``{"signalled": n}``, and, whenever a child ends, ``{"ended": n, "returncode": code, "cpu":
seconds}``.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

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
        self,
        launcher: Launcher,
        number: int,
        pid: int,
        args: list[str],
        output: tuple[Path, Path | None],
    ) -> None:
        self._launcher = launcher
        self._number = number
        self.pid = pid
        self.args = args
        self.returncode: int | None = None
        self._output = output

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._launcher.returncode(self._number, timeout=0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._launcher.returncode(self._number, timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str | None]:
        """Wait for the end; what it wrote to standard output and to standard error (``None``
        if both went to one file)."""
        self.wait(timeout)
        out, err = self._output
        return out.read_text(errors="replace"), None if err is None else err.read_text(
            errors="replace"
        )

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            self._launcher.signal(self._number, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


#: The environment the launcher imports in: the test process's as it started, never one a test
#: has changed for itself (each child gets the environment its test gives it).
_ENVIRONMENT = dict(os.environ)


class Launcher:
    """The launcher process of this test process, started on first use. Its answers are read
    by whichever thread asks (no thread of its own: a test that forks must not find one)."""

    def __init__(self) -> None:
        #: Where the launcher writes its own errors (not the test's captured output).
        self.log = Path(tempfile.gettempdir(), f"ratchet-test-launcher-{os.getpid()}.log")
        with open(self.log, "wb") as log:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "tests.preloaded"],
                cwd=ROOT,
                env=_ENVIRONMENT | {"PYTHONPATH": str(ROOT)},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
            )
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._requests = self._proc.stdin
        self._answers = self._proc.stdout.fileno()
        self._unread = b""
        self._lock = threading.RLock()
        self._numbers = 0
        #: Answers by (kind, request number): a late one never answers a later request.
        self._answered: dict[tuple[str, int], dict[str, Any]] = {}
        self._ended: dict[int, int] = {}
        self.gone = False
        #: CPU seconds of the children that have ended (``tests.cpu_report`` counts them).
        self.children_cpu = 0.0

    def _read(self, timeout: float | None) -> None:
        """Take in the answers that arrive within ``timeout`` seconds (at least one, unless
        none does)."""
        ready, _, _ = select.select([self._answers], [], [], timeout)
        if not ready:
            return
        chunk = os.read(self._answers, 65536)
        if not chunk:
            self.gone = True
            return
        *lines, self._unread = (self._unread + chunk).split(b"\n")
        for line in lines:
            answer = json.loads(line)
            if "ended" in answer:
                self._ended[answer["ended"]] = answer["returncode"]
                self.children_cpu += answer["cpu"]
            else:
                kind = next(iter(answer))
                self._answered[kind, answer[kind]] = answer

    def _ask(self, request: dict[str, Any], answer: tuple[str, int]) -> dict[str, Any]:
        """Send ``request`` and return its answer: (its kind, the request's number)."""
        with self._lock:
            self._requests.write(json.dumps(request).encode() + b"\n")
            self._requests.flush()
            deadline = time.monotonic() + 60
            while answer not in self._answered:
                if self.gone or time.monotonic() > deadline:
                    raise RuntimeError(f"the test launcher did not answer: see {self.log}")
                self._read(deadline - time.monotonic())
            return self._answered.pop(answer)

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
        with self._lock:
            self._numbers += 1
            number = self._numbers
            request = {
                "start": number,
                "args": args,
                "env": env,
                "cwd": str(cwd),
                "stdout": str(stdout),
                "stderr": str(stderr or stdout),
            }
            answer = self._ask(request, ("started", number))
        if "error" in answer:
            raise RuntimeError(f"the test launcher could not start {args}: {answer['error']}")
        return Process(self, number, answer["pid"], [sys.executable, *args], (stdout, stderr))

    def signal(self, number: int, sig: int) -> None:
        """Send ``sig`` to child ``number`` unless it has ended."""
        self._ask({"signal": number, "number": sig}, ("signalled", number))

    def returncode(self, number: int, timeout: float | None) -> int | None:
        """Child ``number``'s exit status once it has ended, waiting up to ``timeout``
        seconds (reading in slices, so that another thread may start a child meanwhile)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                if number not in self._ended:
                    if self.gone:
                        raise RuntimeError(
                            f"the test launcher ended before its child: see {self.log}"
                        )
                    left = 0.1 if deadline is None else min(0.1, deadline - time.monotonic())
                    self._read(max(left, 0))
                if number in self._ended:
                    return self._ended[number]
                if deadline is not None and time.monotonic() >= deadline:
                    return None

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
    if _launcher is not None and not _launcher.gone:
        _launcher.close()


def children_cpu() -> float:
    """CPU seconds of the children of this process's launchers that have ended so far."""
    return sum(each.children_cpu for each in _all)


def launcher() -> Launcher:
    """This test process's launcher."""
    global _launcher
    with _launcher_lock:
        if _launcher is not None and _launcher.gone:
            _launcher.close()  # reaped, not left a zombie
        if _launcher is None or _launcher.gone:
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
    """Answer requests until standard input ends; in a forked child, return its request.

    One thread: it waits on the requests and on SIGCHLD (through the wake-up fd) together, and
    is the only one that reaps the children, so that a child it signals is never one that has
    been reaped (whose pid another process may have by now)."""
    import importlib
    import selectors

    # No gc.freeze() here: a worker freezes what it built itself, and a test checks it does.
    for name in PRELOAD:
        importlib.import_module(name)
    if threading.active_count() != 1:
        raise RuntimeError("a preloaded module started a thread: a forked child would lack it")

    def answer(message: dict[str, Any]) -> None:
        os.write(1, json.dumps(message).encode() + b"\n")

    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_write)
    selector = selectors.DefaultSelector()
    selector.register(0, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    live: dict[int, int] = {}  # pid: request number, of the children not yet reaped
    unread = b""
    while True:
        for key, _ in selector.select():
            if key.fileobj == wake_read:
                os.read(wake_read, 4096)
                while live:
                    pid, status, usage = os.wait4(-1, os.WNOHANG)
                    if pid == 0:
                        break
                    ended = {
                        "ended": live.pop(pid),
                        "returncode": os.waitstatus_to_exitcode(status),
                        "cpu": usage.ru_utime + usage.ru_stime,
                    }
                    answer(ended)
                continue
            chunk = os.read(0, 65536)
            if not chunk:
                return {}
            *lines, unread = (unread + chunk).split(b"\n")
            for line in lines:
                request = json.loads(line)
                if "signal" in request:
                    for pid, number in live.items():
                        if number == request["signal"]:
                            os.kill(pid, request["number"])
                    answer({"signalled": request["signal"]})
                    continue
                problem = _cannot_start(request)
                if problem:
                    answer({"started": request["start"], "error": problem})
                    continue
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    os.close(wake_read)
                    os.close(wake_write)
                    return dict(request)
                live[pid] = request["start"]
                answer({"started": request["start"], "pid": pid})


def _cannot_start(request: dict[str, Any]) -> str | None:
    """Why the child of ``request`` could not start, found before forking it."""
    if not os.path.isdir(request["cwd"]):
        return f"no folder {request['cwd']}"
    for path in {request["stdout"], request["stderr"]}:
        try:
            with open(path, "wb"):
                pass
        except OSError as exc:
            return f"cannot write {path}: {exc}"
    return None


def become(request: dict[str, Any]) -> None:
    """Turn this forked child into ``python *args`` as a new interpreter would start it."""
    import faulthandler
    import io
    import runpy
    import types

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
    # the interpreter's own (the launcher's, less its first entry and its $PYTHONPATH's one).
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

    # A __main__ of its own, which stays the command's until the process ends (atexit, the
    # threads' shutdown), as the interpreter's does.
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    if args[0] == "-m":
        sys.argv = ["-m", *args[2:]]
        runpy._run_module_as_main(args[1], alter_argv=True)  # type: ignore[attr-defined]
    elif args[0] == "-c":
        sys.argv = ["-c", *args[2:]]
        exec(compile(args[1], "<string>", "exec"), main.__dict__)
    else:
        sys.argv = list(args)
        main.__file__ = args[0]
        source = Path(args[0]).read_bytes()
        exec(compile(source, args[0], "exec"), main.__dict__)


if __name__ == "__main__":
    child = serve()
    if child:
        become(child)
