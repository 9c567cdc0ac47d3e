"""Typed tasks: ``mypy --strict`` judges calls to ``.enqueue`` (and ``.delay``), ``.schedule``
and ``.builder`` as it judges calls to the function itself (tests/typing/task_calls.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CALLS = ROOT / "tests" / "typing" / "task_calls.py"
CACHE = ROOT / ".mypy_cache"


def cache_dir(tmp_path: Path) -> Path:
    """The project's mypy cache (``make lint`` fills it: the libraries' types are read once)
    when the test runs in the project's virtualenv; else a cache of its own: the lowest-versions
    run has another mypy, which must not rewrite that cache while the other run reads it."""
    if Path(sys.prefix).resolve() == (ROOT / ".venv").resolve():
        return CACHE
    return tmp_path


@pytest.mark.timeout(600)
def test_mypy_refuses_exactly_the_wrong_calls(tmp_path: Path) -> None:
    lines = CALLS.read_text().splitlines()
    wrong = {n for n, line in enumerate(lines, 1) if "# wrong:" in line}
    assert len(wrong) == 12  # the file is what this test thinks it is
    checked = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--cache-dir",
            str(cache_dir(tmp_path)),
            str(CALLS),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert checked.returncode == 1, checked.stdout + checked.stderr
    flagged = {
        int(found.group(1))
        for found in re.finditer(r"task_calls\.py:(\d+): error:", checked.stdout)
    }
    assert flagged == wrong, checked.stdout
