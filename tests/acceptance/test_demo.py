"""The README's demo command runs what it promises, and stops saying why when its worker
cannot start (it once came up without one, silently)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.acceptance.test_forks import free_port

ROOT = Path(__file__).resolve().parents[2]


def demo(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "examples.demo"],
        cwd=ROOT,
        env=os.environ | {"DEMO_PORT": str(free_port()), "DEMO_INSTANCE": str(tmp_path), **env},
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_the_demo_fills_every_console_page(tmp_path: Path) -> None:
    run = demo(tmp_path, DEMO_SECONDS="14")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "console: http://127.0.0.1:" in run.stdout
    with sqlite3.connect(tmp_path / "demo.db") as conn:
        tasks = {t for (t,) in conn.execute("SELECT DISTINCT task FROM ratchet_job")}
        fired = conn.execute(
            "SELECT count(*) FROM ratchet_job WHERE recurring_id = 'demo.tidy-up'"
        ).fetchone()[0]
        batches = conn.execute("SELECT count(*) FROM ratchet_batch").fetchone()[0]
        limits = [r for (r,) in conn.execute("SELECT resource_name FROM ratchet_resource_limit")]
        ran = conn.execute("SELECT count(*) FROM ratchet_execution").fetchone()[0]
    prefix = "examples.demo.app:"
    for task in ("send_welcome", "sync_crm", "charge_signup_fee", "geocode", "verify_address"):
        assert prefix + task in tasks, tasks
    assert fired >= 1 and batches >= 2 and limits == ["payment-api"] and ran > 0


def test_the_demo_stops_with_the_reason_when_its_worker_cannot_start(tmp_path: Path) -> None:
    run = demo(tmp_path, DEMO_WORKER_ARGS="--concurrency 0")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "The demo stopped: the worker exited with code 2" in run.stderr, run.stderr
