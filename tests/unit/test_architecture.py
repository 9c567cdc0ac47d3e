"""The map in docs/architecture.md and the layer rules in pyproject.toml hold for the code as it
is: every module is on the map, every top-level module is in a layer, and no import cycle is
larger than the one pair the rules allow."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]


def mapped() -> set[str]:
    """The module paths of the architecture page's module table."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text.split("## Modules", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([^`]+\.py)`", table, flags=re.MULTILINE))


def modules() -> set[str]:
    """Every module file, as the table names it."""
    library = {
        str(p.relative_to(ROOT / "flask_ratchet")) for p in ROOT.glob("flask_ratchet/**/*.py")
    }
    # flask_ratchet/console is a symlink to console/, which a glob's ** may not follow.
    console = {str(p.relative_to(ROOT)) for p in ROOT.glob("console/**/*.py")}
    return library | console


def test_every_module_is_on_the_map() -> None:
    assert modules() - mapped() == set(), "add these to the table in docs/architecture.md"
    assert mapped() - modules() == set(), "these are gone: take them off the table"


def test_every_top_level_module_is_in_a_layer() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c["layers"] for c in config["contracts"] if c["type"] == "layers"]
    named = {m.strip() for layer in layers for m in re.split(r"[|:]", layer)}
    top = {
        f"flask_ratchet.{p.stem if p.is_file() else p.name}"
        for p in (ROOT / "flask_ratchet").iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()
    }
    assert top - named == set(), "put these in a layer of pyproject.toml's contract"


def test_no_import_cycle_is_larger_than_a_pair() -> None:
    graph = grimp.build_graph("flask_ratchet")
    components = strongly_connected(graph)
    assert [c for c in components if len(c) > 2] == []
    pairs = sorted(sorted(c) for c in components if len(c) == 2)
    assert pairs == [["flask_ratchet.api.chains", "flask_ratchet.api.submit"]]


def strongly_connected(graph: grimp.ImportGraph) -> list[set[str]]:
    """Tarjan's components of the graph of the packages' own imports (those inside functions and
    under ``TYPE_CHECKING`` included); a package's ``__init__`` importing its own modules is not
    an edge back up."""
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w.startswith(v + "."):
                continue  # a package importing its own modules
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            found.append(component)

    for v in sorted(graph.modules):
        if v not in index:
            visit(v)
    return found
