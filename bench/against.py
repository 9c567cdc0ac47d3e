"""ratchet at another commit against this checkout: drain and pickup, alternated in one sitting.

    python -m bench.against REV [--runs 5] [--jobs 20000] [--store postgresql|sqlite]

What catches a regression of the worker's hot path between two commits on a noisy machine: each
side's own ``bench.worker`` (a real ``flask ratchet worker --burst`` draining ``--jobs`` no-op
jobs at concurrency 1 and 10, then the idle pickup latency of 200 jobs) runs ``--runs`` times,
REV and this checkout taking turns, so that a slow minute of the machine falls on both. Prints
the median of each figure for both sides and the change; nothing is asserted.

REV is taken with ``git archive`` into a temporary directory and laid out as its
``pyproject.toml`` installs it (``[tool.setuptools.package-dir]``: the console, templates, static
files and migrations placed inside the package). It runs on the libraries of this checkout's
virtualenv, through a throwaway virtualenv that sees them but not this checkout's own package.
Both sides' modules are compiled first, so neither pays for compiling its sources at each start.
"""

from __future__ import annotations

import argparse
import compileall
import io
import os
import re
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The figures read from ``bench.worker``'s table: a label and the pattern that finds them.
FIGURES = (
    ("drain, concurrency 1 (jobs/s)", re.compile(r"concurrency 1\s+([\d,]+) jobs/s end to end")),
    ("drain, concurrency 10 (jobs/s)", re.compile(r"concurrency 10\s+([\d,]+) jobs/s end to end")),
    ("idle pickup p50 (ms)", re.compile(r"p50 ([\d.]+) ms")),
    ("idle pickup p99 (ms)", re.compile(r"p99 ([\d.]+) ms")),
)


def checkout(rev: str, into: Path) -> Path:
    """REV's files under ``into``, its package laid out as installed; the directory to put on
    ``PYTHONPATH``."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", rev], check=True, capture_output=True
    ).stdout
    source = into / "source"
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(source, filter="data")
    tree = into / "tree"
    tree.mkdir()
    shutil.copytree(source / "flask_ratchet", tree / "flask_ratchet")
    shutil.copytree(source / "bench", tree / "bench")
    setup = tomllib.loads((source / "pyproject.toml").read_text()).get("tool", {})
    for package, folder in setup.get("setuptools", {}).get("package-dir", {}).items():
        if package.startswith("flask_ratchet.") and folder:
            target = tree.joinpath(*package.split("."))
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(source / folder, target)
    return tree


def interpreter_without_package(into: Path) -> Path:
    """A virtualenv whose ``python`` sees this checkout's libraries but not its editable
    install of flask-ratchet (a ``.pth`` line adds a directory, not the ``.pth`` files in it)."""
    venv = into / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    ours = Path(sysconfig.get_paths()["purelib"])
    theirs = next((venv / "lib").glob("python3*/site-packages"))
    (theirs / "libraries.pth").write_text(f"{ours}\n")
    return venv / "bin" / "python"


def run_side(python: Path, tree: Path, args: argparse.Namespace) -> dict[str, float]:
    """One run of ``bench.worker`` from ``tree``: its figures by label."""
    command = [str(python), "-m", "bench.worker", "--store", args.store, "--jobs", str(args.jobs)]
    if args.pg:
        command += ["--pg", args.pg]
    env = {"PYTHONPATH": str(tree)}
    out = subprocess.run(
        command, cwd=tree, env=dict(os.environ) | env, check=True, capture_output=True, text=True
    ).stdout
    figures = {}
    for label, pattern in FIGURES:
        found = pattern.search(out)
        if found:
            figures[label] = float(found.group(1).replace(",", ""))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rev", help="the commit to compare this checkout with")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--store", choices=["postgresql", "sqlite"], default="postgresql")
    parser.add_argument("--pg", default=None, help="PostgreSQL URL (default: bench.worker's)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ratchet-against-") as tmp:
        theirs = checkout(args.rev, Path(tmp))
        python = interpreter_without_package(Path(tmp))
        for tree in (theirs, ROOT):
            for folder in ("flask_ratchet", "bench"):
                compileall.compile_dir(tree / folder, quiet=1)
        sides = {args.rev: (python, theirs), "this checkout": (Path(sys.executable), ROOT)}
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
        for i in range(args.runs):
            for name, (exe, tree) in sides.items():
                runs[name].append(run_side(exe, tree, args))
                print(f"run {i + 1}/{args.runs}, {name}: {runs[name][-1]}", file=sys.stderr)
    old, new = runs[args.rev], runs["this checkout"]
    width = max(len(label) for label, _ in FIGURES)
    heading = f"median of {args.runs} runs"
    print(f"{heading:<{width}}  {args.rev:>12}  {'this':>12}  change")
    for label, _ in FIGURES:
        a = [r[label] for r in old if label in r]
        b = [r[label] for r in new if label in r]
        if not a or not b:
            continue
        before, after = statistics.median(a), statistics.median(b)
        print(f"{label:<{width}}  {before:>12,.1f}  {after:>12,.1f}  {after / before - 1:+.1%}")


if __name__ == "__main__":
    main()
