"""The documentation's pages as the tests read them: their Python blocks, and a section's.

A page is a Markdown file of ``docs/`` (MyST) or the README. A Python block is a fenced
```` ```python ```` block, at any indentation (inside a list item too). A block that cannot run
in a test says so in its first line, ``# not-run: <why>``; everything else runs.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"

_FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```python[ \t]*\n(?P<body>.*?)^(?P=indent)```", re.M | re.S
)
#: What a page's blocks run as (``__name__``, so their tasks' names): ``% docs-test-module: shop``
#: in a MyST page, ``<!-- docs-test-module: shop -->`` in the README.
_MODULE = re.compile(r"^(?:% |<!-- )docs-test-module: (?P<name>\w+)", re.M)
NOT_RUN = "# not-run:"


@dataclass(frozen=True)
class Block:
    """One Python block of a page."""

    page: Path
    line: int
    source: str

    @property
    def not_run(self) -> str | None:
        """Why this block does not run, or ``None`` if it runs."""
        first = self.source.lstrip().split("\n", 1)[0]
        return first[len(NOT_RUN) :].strip() if first.startswith(NOT_RUN) else None


def pages() -> list[Path]:
    """Every Markdown page of the site (the included architecture map and changelog too), and
    the README."""
    found = sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)
    return [*found, README]


def blocks(page: Path) -> list[Block]:
    """The page's Python blocks, in order."""
    text = page.read_text()
    return [
        Block(page, text.count("\n", 0, m.start()) + 1, textwrap.dedent(m.group("body")))
        for m in _FENCE.finditer(text)
    ]


def module_name(page: Path) -> str:
    """The ``__name__`` the page's blocks run as."""
    found = _MODULE.search(page.read_text())
    if found:
        return found.group("name")
    return "docs_" + re.sub(r"\W", "_", page.stem)


def section_blocks(page: Path, heading: str) -> list[str]:
    """The Python blocks of one section of ``page``: from ``heading`` (a whole line) to the next
    heading of the same or a higher level (a ``#`` line inside a code block is no heading)."""
    lines = page.read_text().split("\n")
    assert heading in lines, f"no {heading!r} in {page}"
    level = len(heading) - len(heading.lstrip("#"))
    start = lines.index(heading) + 1
    end, fenced = len(lines), False
    for number in range(start, len(lines)):
        line = lines[number]
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(rf"#{{1,{level}}} ", line):
            end = number
            break
    body = "\n".join(lines[start:end])
    return [textwrap.dedent(m.group("body")) for m in _FENCE.finditer(body)]


def section_block(page: Path, heading: str) -> str:
    """The first Python block of a section."""
    found = section_blocks(page, heading)
    assert found, f"no python block under {heading!r} in {page}"
    return found[0]
