"""The README's "Adding flask-ratchet to an existing app" runs as written, on SQLite and
PostgreSQL: its code block is the app, and the commands are the real CLIs in subprocesses."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## Adding flask-ratchet to an existing app"


def readme_block(section: str) -> str:
    """The first python code block after ``section`` in the README."""
    text = (ROOT / "README.md").read_text()
    after = text[text.index(section) :]
    block = re.search(r"```python\n(.*?)```", after, re.S)
    assert block is not None, f"no python block under {section!r}"
    return block.group(1)


def test_the_existing_app_section_runs_as_written(empty_engine: sa.Engine, tmp_path: Path) -> None:
    (tmp_path / "myapp.py").write_text(readme_block(SECTION))
    env = os.environ | {
        "DATABASE_URL": empty_engine.url.render_as_string(hide_password=False),
        "PYTHONPATH": str(tmp_path),
    }

    def run(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    flask = ["-m", "flask", "--app", "myapp"]
    run(*flask, "ratchet", "db", "upgrade")
    run(
        "-c",
        "from myapp import create_app, ratchet\n"
        "app = create_app()\n"
        "assert app.test_client().post('/reports/7/export').status_code == 202\n",
    )
    listed = run(*flask, "ratchet", "jobs", "list", "--status", "pending")
    assert "myapp:export_report" in listed, listed
    run(*flask, "ratchet", "worker", "--burst")
    assert "myapp:export_report" in run(*flask, "ratchet", "jobs", "list", "--status", "succeeded")
    # The app's own migrations: nothing of its own changed, and ratchet's tables are not seen.
    run(*flask, "db", "init")
    run(*flask, "db", "migrate", "-m", "nothing")
    assert list((tmp_path / "migrations" / "versions").glob("*.py")) == []
