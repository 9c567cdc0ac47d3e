"""``python -m examples.demo``: the example app under gunicorn, workers, and a trickle of sign-ups.

Open http://127.0.0.1:5000/ratchet to watch the jobs. Ctrl-C stops everything.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

HOST = "127.0.0.1:5000"
APP = "examples.demo.app:create_app()"


def start(args: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(args, env=os.environ | {"PYTHONUNBUFFERED": "1"})


def sign_ups(stop_after: float | None) -> None:
    """POST a sign-up every 0.5 s: each enqueues a chain, a job and now and then a batch, all
    inside the request's transaction."""
    started = time.monotonic()
    n = 0
    while stop_after is None or time.monotonic() - started < stop_after:
        n += 1
        data = urllib.parse.urlencode({"email": f"user{n}@example.com"}).encode()
        try:
            urllib.request.urlopen(f"http://{HOST}/signup", data=data, timeout=5).close()
        except (urllib.error.URLError, ConnectionError):
            pass  # gunicorn is still starting
        time.sleep(0.5)


def main() -> None:
    Path("instance").mkdir(exist_ok=True)
    bin_dir = Path(sys.executable).parent
    web = start([str(bin_dir / "gunicorn"), "--bind", HOST, "--workers", "2", APP])
    workers = []
    flask = shutil.which("flask", path=str(bin_dir))
    if flask and _has_worker_command(flask):
        workers.append(start([flask, "--app", APP, "ratchet", "worker", "--concurrency", "4"]))
    print(f"\n  Demo running: http://{HOST}/  ·  console: http://{HOST}/ratchet/\n", flush=True)
    try:
        stop_after = float(os.environ["DEMO_SECONDS"]) if "DEMO_SECONDS" in os.environ else None
        sign_ups(stop_after)
    except KeyboardInterrupt:
        pass
    finally:
        for proc in (*workers, web):
            proc.send_signal(signal.SIGTERM)
        for proc in (*workers, web):
            proc.wait(timeout=30)


def _has_worker_command(flask: str) -> bool:
    probe = subprocess.run(
        [flask, "--app", APP, "ratchet", "--help"], capture_output=True, text=True
    )
    return " worker " in probe.stdout


if __name__ == "__main__":
    main()
