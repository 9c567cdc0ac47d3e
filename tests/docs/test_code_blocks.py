"""Every Python block of the docs and the README runs, so that no example can rot.

The blocks of one page run in order in one namespace (a page builds its example app once, then
uses it), as the page's module (``docs-test-module``), in a temporary folder: a SQLite file an
example names is created there. A block that cannot run here (it needs a server, another
package, or is a fragment of a file such as alembic's ``env.py``) starts with
``# not-run: <why>``; a test checks every such block says why.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.globals import _cv_app

from tests.docs.pages import ROOT, blocks, module_name, pages

RUN = [page for page in pages() if any(b.not_run is None for b in blocks(page))]


def _close(namespace: dict[str, Any], before: object) -> None:
    """Pop the app contexts the page pushed, and close the connections of its apps."""
    while (ctx := _cv_app.get(None)) is not None and ctx is not before:
        ctx.pop()
    for value in list(namespace.values()):
        if isinstance(value, Flask):
            with value.app_context():
                sqlalchemy = value.extensions.get("sqlalchemy")
                if sqlalchemy is not None:
                    sqlalchemy.session.remove()
                    for engine in sqlalchemy.engines.values():
                        engine.dispose()
                ratchet = value.extensions.get("ratchet")
                runtime = getattr(ratchet, "runtime", None)
                for engine in getattr(runtime, "own_engines", lambda: [])():
                    engine.dispose()


@pytest.mark.parametrize("page", RUN, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_page_runs(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    # A real module, as the page's code would be: SQLAlchemy reads a model's annotations from
    # it, and Flask takes the app's root (and instance folder) from its file, here tmp_path.
    module = types.ModuleType(module_name(page))
    module.__file__ = str(tmp_path / f"{module.__name__}.py")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    namespace: dict[str, Any] = module.__dict__
    before = _cv_app.get(None)
    try:
        for block in blocks(page):
            if block.not_run is None:
                code = compile(block.source, f"{page.relative_to(ROOT)}:{block.line}", "exec")
                exec(code, namespace)
    finally:
        _close(namespace, before)


def test_a_block_that_does_not_run_says_why() -> None:
    for page in pages():
        for block in blocks(page):
            assert block.not_run != "", f"{page}:{block.line}: say why it does not run"


def test_every_python_block_is_one_the_tests_find() -> None:
    """Blocks written another way (``py``, a ``code-block`` directive) would escape the run."""
    for page in pages():
        text = page.read_text()
        for other in ("```py\n", "```python3", "code-block:: python", "{code-block} python"):
            assert other not in text, f"{page}: write {other!r} as ```python"


def test_the_console_guide_shows_a_screenshot_of_every_page() -> None:
    """docs/screenshots.py takes them from the demo; each is committed and shown."""
    spec = importlib.util.spec_from_file_location("screenshots", ROOT / "docs" / "screenshots.py")
    assert spec is not None and spec.loader is not None
    screenshots = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(screenshots)
    guide = (ROOT / "docs" / "guides" / "console.md").read_text()
    for name in [*screenshots.PAGES, "job"]:
        assert (screenshots.OUT / f"{name}.png").is_file(), "run python docs/screenshots.py"
        assert f"../_static/screenshots/{name}.png" in guide, f"the console guide lacks {name}"
