"""gunicorn ``--preload`` with an app factory that queries the database before the fork: every
request's note and job appear together, or neither does, and none answers 500."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[2]
REQUESTS = 450


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def post(url: str) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=60) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_preloaded_web_workers_never_share_a_connection(empty_engine: sa.Engine) -> None:
    port = free_port()
    gunicorn = ["-m", "gunicorn", "--preload", "-w", "4", "-b", f"127.0.0.1:{port}"]
    server = subprocess.Popen(
        [sys.executable, *gunicorn, "--log-level", "warning", "tests.preload_app:create_app()"],
        cwd=ROOT,
        env=os.environ
        | {"PRELOAD_DATABASE_URL": empty_engine.url.render_as_string(hide_password=False)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None, "gunicorn exited"
                assert time.monotonic() < deadline, "gunicorn did not listen within 60 s"
                time.sleep(0.2)
        urls = [
            f"http://127.0.0.1:{port}/notes/t{i}" + ("?fail=1" if i % 3 == 0 else "")
            for i in range(REQUESTS)
        ]
        with ThreadPoolExecutor(16) as pool:
            statuses = list(pool.map(post, urls))
    finally:
        server.terminate()
        _, err = server.communicate(timeout=60)
    assert statuses == [200] * REQUESTS, (sorted(set(statuses)), err[-2000:])
    committed = {f"t{i}" for i in range(REQUESTS) if i % 3}
    with empty_engine.connect() as conn:
        notes = set(conn.execute(sa.text("SELECT token FROM note")).scalars())
        payloads = conn.execute(
            sa.text("SELECT payload FROM ratchet_job WHERE task = 'tests.preload_app:noted'")
        ).scalars()
        jobs = [json.loads(p)["args"][0] for p in payloads]
    assert notes == committed
    assert sorted(jobs) == sorted(committed)  # each once, none of a rolled-back request
