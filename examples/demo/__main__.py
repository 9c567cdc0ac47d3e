"""``python -m examples.demo``: the example app under gunicorn, a worker, and a trickle of sign-ups.

Open http://127.0.0.1:5000/ratchet to watch the jobs. Ctrl-C stops everything. If the web server
or the worker cannot start, or stops, the demo stops too and says why (its exit code is 1):
a demo without its worker would only pile up pending jobs.

``DEMO_PORT`` (default 5000), ``DEMO_INSTANCE`` (the SQLite file's folder, default ./instance),
``DEMO_SECONDS`` (stop after that long) and ``DEMO_WORKER_ARGS`` (more worker options) are for
tests and the curious.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request

from examples.demo.app import create_app

APP = "examples.demo.app:create_app()"
#: How long the web server and the worker get to come up.
START_TIMEOUT = 30.0


class DemoStopped(Exception):
    """A process of the demo could not start or stopped; the message says which and why."""


def start(args: list[str]) -> subprocess.Popen[bytes]:
    """Start one of the demo's processes, writing to this terminal."""
    return subprocess.Popen(args, env=os.environ | {"PYTHONUNBUFFERED": "1"})


def check(processes: dict[str, subprocess.Popen[bytes]]) -> None:
    """Raise :class:`DemoStopped` if any process has exited."""
    for name, proc in processes.items():
        if proc.poll() is not None:
            raise DemoStopped(
                f"the {name} exited with code {proc.returncode} (its output is above)"
            )


def wait_until_up(host: str, processes: dict[str, subprocess.Popen[bytes]]) -> None:
    """Wait until the web server answers and the worker has started, or raise why not."""
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        check(processes)
        try:
            urllib.request.urlopen(f"http://{host}/", timeout=10).close()
            return
        except OSError:  # not listening yet, a timeout, an error page while tables are created
            if time.monotonic() > deadline:
                why = f"the web server did not answer within {START_TIMEOUT:.0f} s"
                raise DemoStopped(why) from None
            time.sleep(0.3)


def sign_ups(
    host: str, processes: dict[str, subprocess.Popen[bytes]], seconds: float | None
) -> None:
    """POST a sign-up every 0.5 s (each enqueues a chain, jobs and now and then a batch, inside
    the request's transaction), checking that every process still runs."""
    started = time.monotonic()
    n = 0
    while seconds is None or time.monotonic() - started < seconds:
        check(processes)
        n += 1
        data = urllib.parse.urlencode({"email": f"user{n}@example.com"}).encode()
        try:
            urllib.request.urlopen(f"http://{host}/signup", data=data, timeout=10).close()
        except OSError as exc:  # the web server's own log says more; the demo goes on
            print(f"  a sign-up failed: {exc}", file=sys.stderr, flush=True)
        time.sleep(0.5)


def main() -> int:
    host = f"127.0.0.1:{os.environ.get('DEMO_PORT', '5000')}"
    python = sys.executable
    extra = shlex.split(os.environ.get("DEMO_WORKER_ARGS", ""))
    # The app's tables, made once here: three processes each making them at the same moment
    # would race between "is it there?" and CREATE TABLE.
    create_app()
    processes = {
        "web server": start([python, "-m", "gunicorn", "--bind", host, "--workers", "2", APP]),
        "worker": start(
            [python, "-m", "flask", "--app", APP, "ratchet", "worker", "--concurrency", "4", *extra]
        ),
    }
    seconds = float(os.environ["DEMO_SECONDS"]) if "DEMO_SECONDS" in os.environ else None
    code = 0
    try:
        wait_until_up(host, processes)
        print(f"\n  Demo running: http://{host}/  ·  console: http://{host}/ratchet/\n", flush=True)
        sign_ups(host, processes, seconds)
    except DemoStopped as exc:
        print(f"\n  The demo stopped: {exc}\n", file=sys.stderr, flush=True)
        code = 1
    except KeyboardInterrupt:
        pass
    finally:
        for proc in processes.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in processes.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
    return code


if __name__ == "__main__":
    sys.exit(main())
