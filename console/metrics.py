"""The cluster's Prometheus metrics, read from the database, so that one scrape sees every
worker and every queue.

Served by the console at ``GET <prefix>/metrics`` under its access rule (the ``read`` role is
enough), and offered as :class:`ClusterCollector` to a host app that serves ``/metrics`` itself.
Each worker serves its own counters and histograms on its ``--metrics-port``
(:mod:`flask_ratchet.worker.metrics`); these are the gauges no single worker can know. Needs
``prometheus_client`` (``pip install "flask-ratchet[prometheus]"``).

Labels are queue names and job statuses only, so the number of series is bounded by the app's
queues (at most :data:`~.reads.queues.MAX_QUEUES`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

from flask import Flask, abort, current_app, request
from sqlalchemy.exc import SQLAlchemyError
from werkzeug.wrappers import Response

from flask_ratchet.errors import SchemaNotReady
from flask_ratchet.states import JobStatus

from .pages import current_runtime, live_after
from .reads.cluster import ClusterFigures, cluster_figures

if TYPE_CHECKING:
    from prometheus_client.core import GaugeMetricFamily

log = logging.getLogger(__name__)

#: name: (help, labels) of every family a scrape reports.
FAMILIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "ratchet_cluster_up": (
        "1 if the database answered this scrape with ratchet's tables ready, else 0.",
        (),
    ),
    "ratchet_jobs": (
        "Jobs per status: exact up to 10,000, past that PostgreSQL's estimate (else 10,000).",
        ("status",),
    ),
    "ratchet_dead_letter_jobs": (
        "Jobs that failed for good (the dead-letter queue), counted as ratchet_jobs is.",
        (),
    ),
    "ratchet_queue_pending_jobs": ("PENDING jobs of a queue.", ("queue",)),
    "ratchet_queue_due_jobs": (
        "PENDING jobs of a queue whose time has come.",
        ("queue",),
    ),
    "ratchet_queue_oldest_due_age_seconds": (
        "How long a queue's oldest due job has waited; 0 when none is due.",
        ("queue",),
    ),
    "ratchet_queue_paused": ("1 if the queue is paused, else 0.", ("queue",)),
    "ratchet_live_nodes": ("Worker nodes whose last heartbeat is recent.", ()),
    "ratchet_batches_running": ("Batches not finished, among the newest 10,000.", ()),
    "ratchet_replica_lag_seconds": (
        "How far behind the read replica these figures come from is (RATCHET_READ_URL): 0 when "
        "it has replayed all it received. Reported only with a read URL and a known lag.",
        (),
    ),
}
#: The family a scrape reports only with a read replica.
REPLICA_LAG = "ratchet_replica_lag_seconds"


class ClusterCollector:
    """A ``prometheus_client`` collector of the cluster's gauges, read from ``app``'s database
    at each scrape. Register it on any registry::

        from prometheus_client import REGISTRY
        REGISTRY.register(ClusterCollector(app))

    A scrape the database does not answer, or whose tables are missing or older than this
    version needs (a deploy before ``flask ratchet db upgrade``), reports
    ``ratchet_cluster_up 0`` (and logs why) instead of failing the registry's other metrics.
    """

    def __init__(self, app: Flask) -> None:
        self._app = app

    def describe(self) -> list[GaugeMetricFamily]:
        """The families without values, so registering reads nothing from the database."""
        return [_family(name) for name in FAMILIES]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Read the figures and yield every family."""
        try:
            figures = self.read()
        except (SQLAlchemyError, SchemaNotReady) as exc:
            log.warning("cluster metrics not read: %s", _why(exc))
            up = _family("ratchet_cluster_up")
            up.add_metric([], 0)
            yield up
            return
        yield from families(figures)

    def read(self) -> ClusterFigures:
        """The figures, in an app context of the collector's app; from the read replica when
        there is one (``RATCHET_READ_URL``)."""
        with self._app.app_context():
            runtime = current_runtime()
            with runtime.read_connection() as conn:
                now = runtime.store.now(conn)
                figures = cluster_figures(
                    conn, runtime.store.dialect, runtime.store.queues, now, live_after(runtime)
                )
                if runtime.replica is None:
                    return figures
                lag = runtime.store.replica_lag(conn)
        behind = 0.0 if lag.in_sync or not lag.replica else lag.seconds
        return replace(figures, replica_lag=behind)


def _why(exc: Exception) -> str:
    """What a log line says of a failed read: for tables not ready, the message (it names the
    revisions and the command, and holds no secret); else that the database did not answer."""
    if isinstance(exc, SchemaNotReady):
        return str(exc)
    return f"the database did not answer ({exc.__class__.__name__})"


def families(figures: ClusterFigures) -> Iterator[GaugeMetricFamily]:
    """``figures`` as Prometheus gauge families."""
    made = {name: _family(name) for name in FAMILIES}
    made["ratchet_cluster_up"].add_metric([], 1)
    for status, count in figures.jobs.items():
        made["ratchet_jobs"].add_metric([str(status)], count.value)
    failed = figures.jobs.get(JobStatus.FAILED)
    made["ratchet_dead_letter_jobs"].add_metric([], 0 if failed is None else failed.value)
    for q in figures.queues:
        made["ratchet_queue_pending_jobs"].add_metric([q.name], q.pending.value)
        made["ratchet_queue_due_jobs"].add_metric([q.name], q.due.value)
        made["ratchet_queue_oldest_due_age_seconds"].add_metric([q.name], q.oldest_due_age)
        made["ratchet_queue_paused"].add_metric([q.name], 1 if q.paused else 0)
    made["ratchet_live_nodes"].add_metric([], figures.live_nodes)
    made["ratchet_batches_running"].add_metric([], figures.running_batches)
    if figures.replica_lag is not None:
        made[REPLICA_LAG].add_metric([], figures.replica_lag)
    else:
        del made[REPLICA_LAG]
    yield from made.values()


def _family(name: str) -> GaugeMetricFamily:
    from prometheus_client.core import GaugeMetricFamily

    doc, labels = FAMILIES[name]
    return GaugeMetricFamily(name, doc, labels=labels)


def metrics() -> Response:
    """GET …/metrics: the cluster's gauges in the format the scraper asks for (Prometheus
    text or OpenMetrics)."""
    try:
        from prometheus_client import CollectorRegistry
        from prometheus_client.exposition import choose_encoder
    except ImportError:
        abort(
            501,
            'cluster metrics need prometheus_client: pip install "flask-ratchet[prometheus]"',
        )
    registry = CollectorRegistry()
    registry.register(ClusterCollector(current_app._get_current_object()))  # type: ignore[attr-defined]
    encode, content_type = choose_encoder(request.headers.get("Accept", ""))
    return Response(encode(registry), content_type=content_type)
