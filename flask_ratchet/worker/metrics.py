"""A worker's Prometheus metrics, served on ``--metrics-port`` (``RATCHET_METRICS_PORT``).

Needs ``prometheus_client`` (``pip install "flask-ratchet[prometheus]"``). A worker without a
port builds none of this: the hooks below are skipped where they are called (``metrics is
None``), so a worker without metrics pays nothing.

Every series is labelled by task and queue only (never by job id), so their number is bounded by
the app's tasks and queues. The registry is the worker's own, with the standard process, platform
and garbage-collector collectors, so a scrape sees this process only.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Iterable
from typing import TYPE_CHECKING

from ..errors import ConfigError
from ..store.types import ClaimedJob, Finished, Outcome

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

#: Run times and queue waits, in seconds: from a millisecond to an hour.
BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600)
#: A claim's time: a millisecond or two on a quiet database, more when claimers contend.
CLAIM_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


class WorkerMetrics:
    """The counters, histograms and gauges of one worker process."""

    def __init__(
        self,
        running: Callable[[], float],
        capacity: Callable[[], float],
        threads_busy: Callable[[], float],
    ) -> None:
        try:
            import prometheus_client as prom
        except ImportError:
            raise ConfigError(
                "worker metrics need prometheus_client: pip install "
                '"flask-ratchet[prometheus]" (or leave RATCHET_METRICS_PORT unset)'
            ) from None
        self.registry: CollectorRegistry = prom.CollectorRegistry()
        prom.ProcessCollector(registry=self.registry)
        prom.PlatformCollector(registry=self.registry)
        prom.GCCollector(registry=self.registry)
        labels = ("task", "queue")

        def counter(name: str, doc: str) -> prom.Counter:
            return prom.Counter(name, doc, labels, registry=self.registry)

        self._claimed = counter("ratchet_jobs_claimed", "Jobs this worker claimed.")
        self._succeeded = counter("ratchet_jobs_succeeded", "Attempts that succeeded.")
        self._failed = counter("ratchet_jobs_failed", "Attempts that failed (retried or not).")
        self._retried = counter("ratchet_jobs_retried", "Failed attempts that will be retried.")
        self._dead = counter(
            "ratchet_jobs_dead_lettered", "Jobs that failed for good (the dead-letter queue)."
        )
        self._deferred = counter(
            "ratchet_jobs_deferred",
            "Jobs handed back without spending an attempt (breaker, resource, unknown task).",
        )
        #: The counters each outcome moves.
        self._counters = {
            Outcome.SUCCEEDED: (self._succeeded,),
            Outcome.RETRY: (self._failed, self._retried),
            Outcome.FAILED: (self._failed, self._dead),
            Outcome.RELEASE: (self._deferred,),
        }
        self._recovered = prom.Counter(
            "ratchet_jobs_recovered",
            "RUNNING jobs of silent workers this worker's maintenance took back.",
            ("task",),
            registry=self.registry,
        )

        def histogram(name: str, doc: str) -> prom.Histogram:
            return prom.Histogram(name, doc, labels, buckets=BUCKETS, registry=self.registry)

        self._run_seconds = histogram("ratchet_job_run_seconds", "How long attempts ran.")
        self._wait_seconds = histogram(
            "ratchet_job_queue_wait_seconds", "From when a job was due to when its attempt started."
        )
        prom.Gauge(
            "ratchet_worker_running_jobs",
            "Jobs this worker holds: running, or claimed and waiting for a thread.",
            registry=self.registry,
        ).set_function(running)
        prom.Gauge(
            "ratchet_worker_capacity", "Jobs this worker takes at once.", registry=self.registry
        ).set_function(capacity)
        prom.Gauge(
            "ratchet_worker_threads_busy",
            "Share of job threads busy (0 to 1).",
            registry=self.registry,
        ).set_function(threads_busy)
        self._claim_seconds = prom.Histogram(
            "ratchet_worker_claim_seconds",
            "How long this worker's claims took (one statement on PostgreSQL), empty ones too.",
            buckets=CLAIM_BUCKETS,
            registry=self.registry,
        )
        self._last_poll = prom.Gauge(
            "ratchet_worker_last_poll_timestamp_seconds",
            "Unix time of this worker's last claim that reached the database.",
            registry=self.registry,
        )

    def serve(self, port: int, host: str = "0.0.0.0") -> None:
        """Serve ``/metrics`` on ``port`` from a daemon thread of prometheus_client's."""
        from prometheus_client import start_http_server

        start_http_server(port, host, registry=self.registry)

    # -- hooks ---------------------------------------------------------------------------------

    def polled(self, claimed: Iterable[ClaimedJob], seconds: float | None = None) -> None:
        """A claim reached the database (``claimed`` may be empty), taking ``seconds``."""
        self._last_poll.set(time.time())
        if seconds is not None:
            self._claim_seconds.observe(seconds)
        for job in claimed:
            self._claimed.labels(job.task, job.queue).inc()

    def written(self, batch: Iterable[Finished], applied: Collection[uuid.UUID]) -> None:
        """Outcomes were written; ``applied``: the ids whose write took effect. Counters move
        once per task, queue and outcome of the batch; each attempt's times are observed."""
        outcomes: Counter[tuple[str, str, Outcome]] = Counter()
        for item in batch:
            if item.job_id not in applied:
                continue
            outcomes[item.task, item.queue, item.outcome] += 1
            if item.outcome is Outcome.RELEASE:
                continue
            if item.duration_ms is not None:
                self._run_seconds.labels(item.task, item.queue).observe(item.duration_ms / 1000)
            if item.queue_wait_ms is not None:
                self._wait_seconds.labels(item.task, item.queue).observe(item.queue_wait_ms / 1000)
        for (task, queue, outcome), n in outcomes.items():
            for counter in self._counters[outcome]:
                counter.labels(task, queue).inc(n)

    def recovered(self, tasks: Iterable[str]) -> None:
        """Maintenance took back jobs of silent workers (their tasks, one per job)."""
        for task in tasks:
            self._recovered.labels(task).inc()
