"""Where the suite's CPU goes, by tier and by file: a pytest plugin, off unless asked for.

    python -m pytest -p tests.cpu_report --cpu-report DIR -n 4 --dist worksteal

Each test's CPU is measured around its whole run (setup, call, teardown) with ``getrusage``:
what its test process used itself, and what the processes it started and reaped used (the
workers, CLI commands and browsers it ran). The database servers' CPU is not counted. Every
test process writes its figures to ``DIR`` at its end; the run's controller then prints the
seconds of each tier (``tests/<tier>/``) and the files that used the most. Nothing is
asserted: it is for measuring the suite, as ``bench/`` is for the package.
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections import defaultdict
from collections.abc import Generator
from pathlib import Path

import pytest

from tests import preloaded

#: (node id, own CPU seconds, children's CPU seconds, wall seconds) of each test run here.
_measured: list[tuple[str, float, float, float]] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cpu-report",
        metavar="DIR",
        help="write each test's CPU to DIR and print the CPU of each tier at the end",
    )


def _now() -> tuple[float, float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (
        own.ru_utime + own.ru_stime,
        # The workers a launcher forked are its children, not this process's: it reports
        # their CPU as each ends (tests.preloaded).
        children.ru_utime + children.ru_stime + preloaded.children_cpu(),
        time.monotonic(),
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, None, None]:
    if item.config.getoption("cpu_report") is None:
        yield
        return
    own, children, began = _now()
    yield
    own_after, children_after, ended = _now()
    _measured.append((item.nodeid, own_after - own, children_after - children, ended - began))


def pytest_sessionstart(session: pytest.Session) -> None:
    """In the run's controller: the figures of an earlier run in ``DIR`` are removed."""
    folder = session.config.getoption("cpu_report")
    if folder is not None and not os.environ.get("PYTEST_XDIST_WORKER"):
        for old in Path(folder).glob("cpu-*.json"):
            old.unlink()


def pytest_sessionfinish(session: pytest.Session) -> None:
    folder = session.config.getoption("cpu_report")
    if folder is None or not _measured:
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    process = os.environ.get("PYTEST_XDIST_WORKER", "main")
    (Path(folder) / f"cpu-{process}.json").write_text(json.dumps(_measured))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    folder = terminalreporter.config.getoption("cpu_report")
    if folder is None or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    rows = [
        row for f in sorted(Path(folder).glob("cpu-*.json")) for row in json.loads(f.read_text())
    ]
    by_tier: defaultdict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    by_file: defaultdict[str, float] = defaultdict(float)
    for node, own, children, wall in rows:
        path = node.split("::")[0]
        tier = by_tier[path.split("/")[1] if path.count("/") >= 2 else path]
        tier[0], tier[1], tier[2] = tier[0] + own, tier[1] + children, tier[2] + wall
        by_file[path] += own + children
    write = terminalreporter.write_line
    terminalreporter.section("CPU by tier (seconds: tests' own, their processes', wall)")
    for name, (own, children, wall) in sorted(by_tier.items()):
        write(f"{name:12} own {own:8.1f}  processes {children:8.1f}  wall {wall:8.1f}")
    write("most CPU, by file:")
    for path, seconds in sorted(by_file.items(), key=lambda kv: -kv[1])[:10]:
        write(f"  {seconds:8.1f}  {path}")
