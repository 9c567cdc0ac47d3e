"""A sample app's own test suite (examples/shop) uses the testing kit and the pytest plugin,
run as its team would: ``pytest`` in the project's folder, in a subprocess."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def pytest_in(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_sample_apps_suite_passes_with_the_plugin(tmp_path: Path) -> None:
    shop = tmp_path / "shop"
    shutil.copytree(ROOT / "examples" / "shop", shop)
    done = pytest_in(shop)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "6 passed" in done.stdout, done.stdout
    # The plugin comes from the package's entry point: left out, its fixtures are unknown.
    without = pytest_in(shop, "-p", "no:flask_ratchet", "-k", "fixture")
    assert without.returncode != 0
    assert "fixture 'ratchet_jobs' not found" in without.stdout, without.stdout
