"""What ``bench.soak`` records every interval: the workers' metrics, the database, /proc."""

from __future__ import annotations

import os
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families


class TableStats(NamedTuple):
    """One table's figures in one sample (sizes in bytes)."""

    total: int  # with its indexes and TOAST
    heap: int
    indexes: int
    live: int
    dead: int
    autovacuums: int
    autoanalyzes: int


@dataclass
class Sample:
    """What one sample saw; counts and percentiles are over the interval since the last one."""

    elapsed: float
    phase: str  # start, soak, drain (the last sample, after the workers drained)
    seconds: float  # the interval's length
    load1: float
    enqueued: int
    enqueue_p99_ms: float
    ended: int  # attempts that ended (succeeded or failed)
    retried: int
    dead: int
    claims: int
    claim_p50_ms: float
    claim_p99_ms: float
    pickup_p99_ms: float
    runs: int  # executions that started in the interval
    pending: int
    running: int
    cold_rows: int
    archive_rows: int
    overdue: int  # ended jobs retention should have archived by now
    rss_mb: list[float]
    tables: dict[str, TableStats] = field(default_factory=dict)


def percentile(values: list[float], p: float) -> float:
    """The ``p`` quantile of ``values`` (nearest rank), NaN if there are none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


#: The outcome counters read from the workers, by their sample names.
COUNTERS = {
    "ratchet_jobs_succeeded_total": "succeeded",
    "ratchet_jobs_failed_total": "failed",
    "ratchet_jobs_retried_total": "retried",
    "ratchet_jobs_dead_lettered_total": "dead",
}


@dataclass
class Scrape:
    """The workers' claim histogram buckets and outcome counters, summed over workers."""

    claim: dict[float, float] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)

    def grown(self, before: Scrape, name: str) -> int:
        return int(self.counters.get(name, 0.0) - before.counters.get(name, 0.0))


def scrape(ports: list[int]) -> Scrape:
    """Read every worker's ``/metrics``."""
    summed = Scrape()
    for port in ports:
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        except OSError:
            continue  # a worker that is gone: its share is missing from this interval
        for family in text_string_to_metric_families(text.decode()):
            for s in family.samples:
                if s.name == "ratchet_worker_claim_seconds_bucket":
                    le = float(s.labels["le"])
                    summed.claim[le] = summed.claim.get(le, 0.0) + s.value
                elif s.name in COUNTERS:
                    name = COUNTERS[s.name]
                    summed.counters[name] = summed.counters.get(name, 0.0) + s.value
    return summed


def claim_quantiles(before: Scrape, after: Scrape) -> tuple[int, float, float]:
    """Claims in the interval, and their p50 and p99 in milliseconds (the upper bound of the
    bucket each falls in), from the histograms' growth between two scrapes."""
    grown = {le: n - before.claim.get(le, 0.0) for le, n in after.claim.items()}
    total = grown.get(float("inf"), 0.0)

    def upper(p: float) -> float:
        for le in sorted(grown):
            if total > 0 and grown[le] >= p * total:
                return le * 1000
        return float("nan")

    return int(total), upper(0.5), upper(0.99)


def rss_mb(pid: int) -> float:
    """A process's resident memory in MB (``VmRSS``), NaN once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


TABLES_SQL = """
SELECT c.relname, pg_total_relation_size(c.oid), pg_relation_size(c.oid),
       pg_indexes_size(c.oid), s.n_live_tup, s.n_dead_tup, s.autovacuum_count,
       s.autoanalyze_count
FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE c.relkind = 'r' AND starts_with(c.relname, 'ratchet_')
ORDER BY c.relname
"""


def read_database(conn: sa.Connection, late: float, since: float) -> dict[str, Any]:
    """The database's side of a sample: jobs per status, rows, ended jobs older than ``late``
    seconds (retention's to archive), the pickup p99 of the runs started in the last ``since``
    seconds, and every ratchet table's figures."""
    statuses: dict[str, int] = dict(
        conn.exec_driver_sql("SELECT status, count(*) FROM ratchet_job_queue GROUP BY status").all()
    )
    cold, overdue, archive = conn.exec_driver_sql(
        "SELECT (SELECT count(*) FROM ratchet_job), "
        "(SELECT count(*) FROM ratchet_job WHERE terminal_status IS NOT NULL "
        f" AND finished_at < now() - interval '{late:.0f} seconds'), "
        "(SELECT count(*) FROM ratchet_job_archive)"
    ).one()
    # A run's row is written when it ends: one still running is counted in the next interval.
    runs, pickup = conn.exec_driver_sql(
        "SELECT count(*), percentile_disc(0.99) WITHIN GROUP (ORDER BY queue_wait_ms) "
        f"FROM ratchet_execution WHERE started_at >= now() - interval '{since:.3f} seconds'"
    ).one()
    tables = {
        row[0]: TableStats(*(int(v or 0) for v in row[1:]))
        for row in conn.exec_driver_sql(TABLES_SQL).all()
    }
    conn.rollback()  # the statistics are read once per transaction: a new one next time
    return {
        "pending": int(statuses.get("PENDING", 0)),
        "running": int(statuses.get("RUNNING", 0)),
        "cold_rows": int(cold),
        "overdue": int(overdue),
        "archive_rows": int(archive),
        "runs": int(runs),
        "pickup_p99_ms": float("nan") if pickup is None else float(pickup),
        "tables": tables,
    }


class Sampler:
    """Takes the samples of one soak: ``ports`` are the workers' metrics, ``pids`` their
    processes, ``late`` the age past which an ended job should have been archived."""

    def __init__(self, url: str, ports: list[int], pids: list[int], late: float) -> None:
        self.engine = sa.create_engine(url, pool_size=1)
        self.ports = ports
        self.pids = pids
        self.late = late
        self.started = time.monotonic()
        self.last_at = self.started
        self.last_scrape = scrape(ports)
        self.last_enqueued = 0

    def take(self, phase: str, enqueued: int, took: list[float]) -> Sample:
        """A sample; ``enqueued`` is how many jobs the producer enqueued so far, ``took`` how
        long each enqueue since the last sample took (seconds)."""
        now = time.monotonic()
        seconds = now - self.last_at
        after, before = scrape(self.ports), self.last_scrape
        claims, p50, p99 = claim_quantiles(before, after)
        with self.engine.connect() as conn:
            seen = read_database(conn, self.late, max(seconds, 0.001))
        sample = Sample(
            elapsed=now - self.started,
            phase=phase,
            seconds=seconds,
            load1=os.getloadavg()[0],
            enqueued=enqueued - self.last_enqueued,
            enqueue_p99_ms=percentile(took, 0.99) * 1000,
            ended=after.grown(before, "succeeded") + after.grown(before, "failed"),
            retried=after.grown(before, "retried"),
            dead=after.grown(before, "dead"),
            claims=claims,
            claim_p50_ms=p50,
            claim_p99_ms=p99,
            rss_mb=[rss_mb(pid) for pid in self.pids],
            **seen,
        )
        self.last_at, self.last_scrape, self.last_enqueued = now, after, enqueued
        return sample

    def drained(self) -> bool:
        """Whether only recurring children are live: every other job ended."""
        with self.engine.connect() as conn:
            left = conn.exec_driver_sql(
                "SELECT count(*) FROM ratchet_job_queue q JOIN ratchet_job j USING (job_id) "
                "WHERE j.recurring_id IS NULL"
            ).scalar_one()
        return int(left) == 0

    def server(self) -> str:
        """The server's autovacuum settings, as the summary names them."""
        with self.engine.connect() as conn:
            on = conn.exec_driver_sql("SHOW autovacuum").scalar_one()
            nap = conn.exec_driver_sql("SHOW autovacuum_naptime").scalar_one()
        return f"autovacuum {on}" + (f" (naptime {nap})" if on == "on" else "")

    def close(self) -> None:
        self.engine.dispose()
