"""Reference tables generated from the code, so that they cannot drift from it.

``ratchet-config``
    Every ``RATCHET_*`` key (a ``confval`` each): the fields of
    :class:`flask_ratchet.config.RatchetConfig` (the one table ``init_app`` reads), each with
    its type, default and ``#:`` comment.
``ratchet-events``
    Every signal of :mod:`flask_ratchet.events` (``events.SIGNALS``) with its ``#:`` comment.
``ratchet-metrics``
    ``:source: worker``: the series a worker serves on ``--metrics-port`` (read from a
    ``WorkerMetrics`` registry); ``:source: cluster``: the families of ``/ratchet/metrics``
    (``console.metrics.FAMILIES``).

A key, event or metric without a comment fails the build: its meaning must be written where it
is defined.
"""

from __future__ import annotations

import enum
import importlib.util
from collections.abc import Callable, Iterator
from dataclasses import MISSING, Field, dataclass, fields
from typing import Any, ClassVar

from docutils import nodes
from docutils.parsers.rst import directives
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.pycode import ModuleAnalyzer
from sphinx.util.docutils import SphinxDirective


@dataclass(frozen=True)
class Row:
    """One line of a generated table."""

    name: str
    kind: str
    default: str
    meaning: str


def _comments(module: str) -> dict[tuple[str, str], list[str]]:
    return ModuleAnalyzer.for_module(module).find_attr_docs()


def _meaning(docs: dict[tuple[str, str], list[str]], key: tuple[str, str], what: str) -> str:
    lines = [line for line in docs.get(key, []) if line.strip()]
    if not lines:
        raise ExtensionError(f"{what} has no '#:' comment saying what it means")
    return " ".join(line.strip() for line in lines)


def _default(field: Field[Any]) -> str:
    value = field.default_factory() if field.default is MISSING else field.default  # type: ignore[misc]
    if isinstance(value, enum.Enum):
        return f"``{type(value).__name__}.{value.name}``"
    return f"``{value!r}``"


def config_rows() -> Iterator[Row]:
    """Every ``RATCHET_*`` key ``RatchetConfig.from_mapping`` reads, in the table's order."""
    from flask_ratchet.config import PREFIX, RatchetConfig

    docs = _comments("flask_ratchet.config")
    for field in fields(RatchetConfig):
        if not field.init:
            continue
        key = f"{PREFIX}{field.name.upper()}"
        meaning = _meaning(docs, ("RatchetConfig", field.name), key)
        yield Row(key, f"``{field.type}``", _default(field), meaning)


def event_rows() -> Iterator[Row]:
    """Every signal of ``flask_ratchet.events``."""
    from flask_ratchet import events

    docs = _comments("flask_ratchet.events")
    by_signal = {id(v): k for k, v in vars(events).items() if not k.startswith("_")}
    for signal_name, signal in events.SIGNALS.items():
        name = by_signal[id(signal)]
        yield Row(name, signal_name, "", _meaning(docs, ("", name), f"events.{name}"))


def worker_metric_rows() -> Iterator[Row]:
    """Every ``ratchet_*`` series of a worker's registry (the process collectors left out)."""
    from prometheus_client import metrics as prom

    from flask_ratchet.worker.metrics import WorkerMetrics

    made = WorkerMetrics(lambda: 0.0, lambda: 0.0, lambda: 0.0)
    # Every metric registered on the worker's registry (some are kept by no attribute).
    registered = made.registry._collector_to_names
    found = [m for m in registered if isinstance(m, prom.MetricWrapperBase)]
    for metric in sorted(found, key=lambda m: m._name):
        name = metric._name + ("_total" if metric._type == "counter" else "")
        labels = ", ".join(metric._labelnames)
        yield Row(name, metric._type, labels, metric._documentation)


def cluster_metric_rows() -> Iterator[Row]:
    """Every family ``GET /ratchet/metrics`` reports (all gauges)."""
    from flask_ratchet.console.metrics import FAMILIES

    for name, (doc, labels) in FAMILIES.items():
        yield Row(name, "gauge", ", ".join(labels), doc)


#: The modules the generated parts read: a page that uses them is rebuilt when one changes.
SOURCES = (
    "flask_ratchet.config",
    "flask_ratchet.events",
    "flask_ratchet.worker.metrics",
    "flask_ratchet.console.metrics",
    "flask_ratchet.states",
)


def _note_sources(directive: SphinxDirective) -> None:
    for module in SOURCES:
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.origin:
            directive.env.note_dependency(spec.origin)


class _Generated(SphinxDirective):
    has_content = False

    def lines(self) -> list[str]:
        raise NotImplementedError

    def run(self) -> list[nodes.Node]:
        _note_sources(self)
        node = nodes.container()
        self.state.nested_parse(StringList(self.lines(), "<generated>"), self.content_offset, node)
        return node.children


class ConfigTable(_Generated):
    """Every ``RATCHET_*`` key, each a ``confval`` (``:confval:`RATCHET_EAGER```)."""

    def lines(self) -> list[str]:
        out = []
        for row in config_rows():
            out += [f".. confval:: {row.name}", f"   :type: {row.kind}"]
            out += [f"   :default: {row.default}", "", f"   {row.meaning}", ""]
        return out


class EventTable(_Generated):
    """Every lifecycle event, each a ``py:data`` target
    (``:data:`~flask_ratchet.events.job_failed```)."""

    def lines(self) -> list[str]:
        out = [".. py:currentmodule:: flask_ratchet.events", ""]
        for row in event_rows():
            out += [f".. py:data:: {row.name}", "   :type: blinker.NamedSignal", ""]
            out += [f"   ``{row.kind}``: {row.meaning}", ""]
        return out


class MetricTable(_Generated):
    """A worker's or the cluster's metrics, one entry each."""

    option_spec: ClassVar[dict[str, Callable[[str], Any]]] = {
        "source": lambda arg: directives.choice(arg, ("worker", "cluster"))
    }

    def lines(self) -> list[str]:
        source = self.options.get("source", "worker")
        made = worker_metric_rows() if source == "worker" else cluster_metric_rows()
        out = []
        for row in made:
            labels = f", labels: {row.default}" if row.default else ""
            out += [f".. describe:: {row.name}", "", f"   *{row.kind}{labels}*. {row.meaning}", ""]
        return out


#: Where a class lives (its ``__module__``, which autodoc writes) to where its project documents it.
ALIASES = {
    "flask_sqlalchemy.extension.SQLAlchemy": "flask_sqlalchemy.SQLAlchemy",
    "sqlalchemy.engine.base.Connection": "sqlalchemy.engine.Connection",
    "sqlalchemy.engine.base.Engine": "sqlalchemy.engine.Engine",
    "sqlalchemy.orm.session.Session": "sqlalchemy.orm.Session",
    "sqlalchemy.engine.url.URL": "sqlalchemy.engine.URL",
    "sqlalchemy.sql.schema.MetaData": "sqlalchemy.schema.MetaData",
    "flask.app.Flask": "flask.Flask",
    "flask.wrappers.Request": "flask.Request",
    "blinker.base.NamedSignal": "blinker.NamedSignal",
}


def _aliased(app: Sphinx, env: Any, node: Any, contnode: nodes.Node) -> nodes.Node | None:
    target = ALIASES.get(node.get("reftarget", ""))
    if target is None:
        return None
    from sphinx.ext import intersphinx

    retry = node.deepcopy()
    retry["reftarget"] = target
    return intersphinx.missing_reference(app, env, retry, contnode)


class StateDiagram(SphinxDirective):
    """The job lifecycle drawn by Graphviz from ``flask_ratchet.states.TRANSITIONS``: every
    allowed transition is an edge named after its action."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        from sphinx.ext.graphviz import graphviz

        _note_sources(self)

        from flask_ratchet.states import TRANSITIONS, Action, JobStatus

        edges: dict[tuple[str, str], list[str]] = {}
        for action, moves in TRANSITIONS.items():
            for source, target in moves.items():
                if action is Action.RESUME:
                    # PAUSED -> PAUSED in the table: a resume goes back to where it paused from.
                    for back in (JobStatus.PENDING, JobStatus.FAILED):
                        edges.setdefault((source, back), []).append("resume")
                    continue
                edges.setdefault((source, target), []).append(action.value.replace("_", " "))
        final = {JobStatus.SUCCEEDED, JobStatus.CANCELED}
        lines = [
            "digraph lifecycle {",
            '  graph [rankdir=LR, fontname="sans-serif", nodesep=0.4, ranksep=0.9];',
            '  node [shape=box, style="rounded,filled", fillcolor="#eef2f7", '
            'fontname="sans-serif"];',
            '  edge [fontname="sans-serif", fontsize=10];',
        ]
        for status in JobStatus:
            extra = ', peripheries=2, fillcolor="#e4f2e4"' if status in final else ""
            lines.append(f'  {status.value} [label="{status.value}"{extra}];')
        for (source, target), names in sorted(edges.items()):
            lines.append(f'  {source.value} -> {target.value} [label="{", ".join(names)}"];')
        lines.append("}")
        node = graphviz()
        node["code"] = "\n".join(lines)
        node["options"] = {"docname": self.env.docname}
        node["alt"] = "The job lifecycle: statuses and the actions that move a job between them"
        return [node]


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("ratchet-states", StateDiagram)
    app.connect("missing-reference", _aliased)
    app.add_directive("ratchet-config", ConfigTable)
    app.add_directive("ratchet-events", EventTable)
    app.add_directive("ratchet-metrics", MetricTable)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
