"""The reference names everything public: each name of ``flask_ratchet.__all__`` and
``flask_ratchet.testing.__all__``, every ``RATCHET_*`` key, every command of ``flask ratchet``,
every event and every metric. Checked on a real build of the site (warnings are errors there
too), against the code's own lists, so a new name without its documentation fails here."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import warnings
from pathlib import Path

import click
import pytest
from sphinx.cmd.build import build_main
from sphinx.util.inventory import InventoryFile

import flask_ratchet
import flask_ratchet.testing
from flask_ratchet import events
from flask_ratchet.cli import ratchet_cli
from flask_ratchet.config import _VALIDATORS, PREFIX
from flask_ratchet.console.metrics import FAMILIES
from tests.docs.pages import DOCS, README, ROOT, pages

#: ``make docs``'s site, and the mark it leaves after a build without a warning.
BUILT = DOCS / "_build" / "html"
CLEAN = DOCS / "_build" / "html.clean"


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built as ``make docs`` builds it, once for the whole run: the first test
    process to ask builds it under a lock while the others wait for it (the tests of this
    module are spread over the processes of a parallel run, and each build costs 10 s of CPU).

    From a copy of ``make docs``'s last build when it had no warning (as before ``make test``):
    Sphinx then reads again only the pages changed since and those generated from code that
    changed, and warns about them (3 s instead of 15 to 40); else from nothing."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")  # set in the workers of a parallel run
    if run is None:  # one test process: none to share it with
        out = tmp_path_factory.mktemp("site") / "html"
        assert _build(out) == 0, "the docs build failed: run `make docs` to see why"
        return out
    # The parent of a worker's temporary folder is shared by every worker of the run.
    shared = tmp_path_factory.getbasetemp().parent / f"site-{run}"
    shared.mkdir(exist_ok=True)
    out, status_file = shared / "html", shared / "status"
    with (shared / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
        if not status_file.exists():
            status = 1  # a build that raised: the others fail too, and do not build again
            try:
                status = _build(out)
            finally:
                status_file.write_text(str(status))
        status = int(status_file.read_text())
    assert status == 0, "the docs build failed: run `make docs` to see why"
    return out


def _build(out: Path) -> int:
    """Build the site into ``out`` (see :func:`site`); Sphinx's exit status."""
    if CLEAN.exists() and BUILT.is_dir():
        shutil.copytree(BUILT, out)
    with warnings.catch_warnings():
        # Python's deprecation warnings of Sphinx's API that extensions still use (MyST's
        # include reads env.app): not the docs' warnings, which -W turns into a failed build.
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        status: int = build_main(
            ["-W", "--keep-going", "-n", "-q", "-b", "html", str(DOCS), str(out)]
        )
    return status


def documented(site: Path) -> set[str]:
    """Every Python object the site documents, by its full name."""
    with (site / "objects.inv").open("rb") as f:
        inventory = InventoryFile.load(f, "", lambda base, uri: uri)
    return {name for role, names in inventory.items() if role.startswith("py:") for name in names}


def text_of(site: Path, page: str) -> str:
    """A built page's text, its tags left out."""
    return re.sub(r"<[^>]+>", "", (site / page).read_text())


def test_every_public_name_is_in_the_reference(site: Path) -> None:
    found = documented(site)
    for name in flask_ratchet.__all__:
        assert f"flask_ratchet.{name}" in found, f"flask_ratchet.{name} is not in docs/reference"
    for name in flask_ratchet.testing.__all__:
        public = getattr(flask_ratchet, name, None) is getattr(flask_ratchet.testing, name)
        assert f"flask_ratchet.testing.{name}" in found or (
            public and f"flask_ratchet.{name}" in found
        ), f"flask_ratchet.testing.{name} is not in docs/reference"


def test_every_config_key_is_in_the_reference(site: Path) -> None:
    page = text_of(site, "reference/config.html")
    keys = [f"{PREFIX}{name.upper()}" for name in _VALIDATORS]  # what init_app validates
    missing = [key for key in keys if key not in page]
    assert not missing, f"keys missing from the configuration reference: {missing}"


def test_every_key_the_docs_name_exists() -> None:
    """A key the pages mention that init_app does not know would be a dead instruction."""
    known = {f"{PREFIX}{name.upper()}" for name in _VALIDATORS}
    for page in [*pages(), *DOCS.rglob("*.rst")]:
        for key in set(re.findall(r"\bRATCHET_[A-Z_]*[A-Z]\b", page.read_text())):
            if key.startswith(("RATCHET_TEST_", "RATCHET_KEY_", "RATCHET_DEFAULT_")):
                continue  # the suite's servers, an example's secret, the defaults' family name
            if key == "RATCHET_AUTOCOMMIT_ENQUEUE":
                continue  # named to say there is no such switch
            assert key in known, f"{page.relative_to(ROOT)} names {key}, which is no config key"


def commands(group: click.Group, prefix: str) -> list[str]:
    found = []
    for name, command in group.commands.items():
        found.append(f"{prefix} {name}")
        if isinstance(command, click.Group):
            found += commands(command, f"{prefix} {name}")
    return found


def test_every_command_is_in_the_reference(site: Path) -> None:
    page = text_of(site, "reference/cli.html")
    for command in commands(ratchet_cli, "flask ratchet"):
        assert command in page, f"{command} is not in the command-line reference"
        for param in ratchet_cli.commands[command.split()[2]].params:
            for option in getattr(param, "opts", []):
                if command.count(" ") == 2:
                    assert option in page, f"{command} {option} is not in the reference"


def test_every_event_is_in_the_reference(site: Path) -> None:
    found = documented(site)
    for attribute, signal in vars(events).items():
        if signal in events.SIGNALS.values():
            assert f"flask_ratchet.events.{attribute}" in found, f"events.{attribute}"
    named = [s for s in vars(events).values() if s in events.SIGNALS.values()]
    assert len(named) == len(events.SIGNALS)


def test_every_metric_is_in_the_reference(site: Path) -> None:
    from prometheus_client import generate_latest

    from flask_ratchet.worker.metrics import WorkerMetrics

    page = text_of(site, "reference/metrics.html")
    # The worker's series as a scrape names them (a counter's with ``_total``).
    scraped = generate_latest(WorkerMetrics(lambda: 0, lambda: 0, lambda: 0).registry).decode()
    # (``*_created`` is prometheus_client's creation time of a series, no metric of ours.)
    names = [n for n in re.findall(r"^# TYPE (ratchet_\w+) ", scraped, re.M) if "_created" not in n]
    assert names
    for name in [*names, *FAMILIES]:
        assert name in page, f"{name} is not in the metrics reference"


def test_the_readme_links_to_pages_that_exist() -> None:
    for target in re.findall(r"\]\(([^)#:]+)\)", README.read_text()):
        assert (ROOT / target).exists(), f"the README links to {target}, which does not exist"


def test_every_metric_and_event_the_guides_list_exists() -> None:
    """The observability guide's tables (a row per metric or event, with what it means) name
    only metrics and events that exist, so a renamed one cannot linger there."""
    from prometheus_client import generate_latest

    from flask_ratchet.worker.metrics import WorkerMetrics

    scraped = generate_latest(WorkerMetrics(lambda: 0, lambda: 0, lambda: 0).registry).decode()
    metrics = {*re.findall(r"^# TYPE (ratchet_\w+) ", scraped, re.M), *FAMILIES}
    signals = {name for name, s in vars(events).items() if s in events.SIGNALS.values()}
    guide = (DOCS / "guides" / "observability.md").read_text()
    for row in re.findall(r"^\| (`[^|]*)\|", guide, re.M):
        for name in re.findall(r"`(\w+)`", row):
            if name.startswith("ratchet_"):
                assert name in metrics, f"the observability guide lists {name}: no such metric"
            elif name.startswith(("job", "batch_", "chain_", "branch_")):
                assert name in signals, f"the observability guide lists {name}: no such event"
