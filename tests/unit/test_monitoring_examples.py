"""The example alert rules and Grafana dashboard (docs/monitoring) use only metrics flask-ratchet
serves, with labels those metrics have: every query is parsed with a real PromQL parser and each
series it selects is looked up among the worker's and the cluster's metrics."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml
from prometheus_client import Metric

from flask_ratchet.console.metrics import FAMILIES
from flask_ratchet.worker.metrics import WorkerMetrics

DOCS = Path(__file__).resolve().parents[2] / "docs" / "monitoring"
#: Labels a query may name: the metrics' own, the histogram buckets', and those Prometheus adds
#: to every scraped series.
LABELS = {"task", "queue", "status", "le", "instance", "job"}


def served() -> set[str]:
    """Every series name a worker or the cluster endpoint serves."""
    registry = WorkerMetrics(lambda: 0, lambda: 0, lambda: 0).registry
    names = set(FAMILIES) | {"up"}  # Prometheus' own, for every target it scrapes
    metric: Metric
    for metric in registry.collect():
        suffixes = {
            "counter": ("_total",),
            "histogram": ("_bucket", "_sum", "_count"),
        }.get(metric.type, ("",))
        names.update(metric.name + suffix for suffix in suffixes)
        names.update(sample.name for sample in metric.samples)
    return names


def selected(expr: Any) -> list[tuple[str, set[str]]]:
    """The series names ``expr`` selects, each with the label names it matches on or groups by."""
    found: list[tuple[str, set[str]]] = []
    grouped: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            labels = {m.name for m in node.matchers.matchers} - {"__name__"}
            found.append((node.name, labels))
        elif isinstance(node, promql_parser.MatrixSelector):
            walk(node.vector_selector)
        elif isinstance(node, promql_parser.AggregateExpr):
            if node.modifier is not None:
                grouped.update(node.modifier.labels)
            walk(node.expr)
        elif isinstance(node, promql_parser.BinaryExpr):
            walk(node.lhs)
            walk(node.rhs)
        elif isinstance(node, promql_parser.Call):
            for arg in node.args:
                walk(arg)
        elif isinstance(node, (promql_parser.ParenExpr, promql_parser.UnaryExpr)):
            walk(node.expr)
        elif isinstance(node, promql_parser.SubqueryExpr):
            walk(node.expr)

    walk(expr)
    return [(name, labels | grouped) for name, labels in found]


def check(query: str, where: str) -> int:
    """Parse ``query`` and check its series; return how many it selects."""
    # Grafana's interval macro is not PromQL: Grafana replaces it before querying.
    expr = promql_parser.parse(query.replace("$__rate_interval", "5m"))
    series = selected(expr)
    known = served()
    for name, labels in series:
        assert name in known, f"{where}: {name} is not a metric flask-ratchet serves"
        assert labels <= LABELS, f"{where}: {name} has no label {labels - LABELS}"
    return len(series)


def rules() -> list[dict[str, Any]]:
    loaded = yaml.safe_load((DOCS / "alerts.yml").read_text())
    return [rule for group in loaded["groups"] for rule in group["rules"]]


def test_every_alert_rule_is_valid_promql_over_served_metrics() -> None:
    alerts = rules()
    assert {r["alert"] for r in alerts} >= {
        "RatchetNoLiveWorkers",
        "RatchetOldestDueJobTooOld",
        "RatchetDeadLetters",
    }
    for rule in alerts:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule["alert"]
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}
        assert rule["annotations"]["summary"]
        assert check(rule["expr"], rule["alert"]) >= 1
        if "for" in rule:
            assert re.fullmatch(r"\d+[smh]", rule["for"]), rule["alert"]


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def test_every_dashboard_query_is_valid_promql_over_served_metrics() -> None:
    dashboard = json.loads((DOCS / "grafana-dashboard.json").read_text())
    queries = 0
    ids = []
    for panel in panels(dashboard):
        ids.append(panel["id"])
        for target in panel.get("targets", []):
            queries += check(target["expr"], panel["title"])
    assert queries >= 20
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    (variable,) = [v for v in dashboard["templating"]["list"] if v["name"] == "queue"]
    name = re.fullmatch(r"label_values\((\w+), queue\)", variable["definition"])
    assert name is not None and name.group(1) in served()


def test_the_checker_refuses_a_metric_that_does_not_exist() -> None:
    with pytest.raises(AssertionError, match="ratchet_jobs_lost_total is not a metric"):
        check("rate(ratchet_jobs_lost_total[5m])", "a made-up panel")
    with pytest.raises(AssertionError, match="no label"):
        check('ratchet_queue_due_jobs{job_id="x"}', "a panel by job id")
    with pytest.raises(AssertionError, match="no label"):
        check("sum by (job_id) (ratchet_queue_due_jobs)", "a panel grouped by job id")
    assert check("ratchet_queue_due_jobs", "a real one") == 1
