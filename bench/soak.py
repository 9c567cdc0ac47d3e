"""A soak: steady enqueue and drain for minutes on end, sampled every minute.

    python -m bench.soak --minutes N [--rate 50] [--workers 2] [--concurrency 10] [--pg URL]
                         [--own-server] [--out DIR] [--no-plot] [--sample-seconds 60] [--keep]

In a PostgreSQL database of its own (``bench_soak``, dropped at the end unless ``--keep``): a
producer thread enqueues ``--rate`` jobs a second, one transaction each as a web request would;
``--fail-rate`` of them fail their first attempt and retry a second later, ``--dead-rate`` fail
for good (the dead-letter queue), one in ten writes a log line; three recurring masters fire
every 2, 5 and 10 seconds; retention archives jobs ``--retention-seconds`` after they ended and
runs every ``--retention-interval`` seconds, so the tables reach their steady state within
minutes. ``--workers`` real ``flask ratchet worker`` processes drain it.

Every ``--sample-seconds`` it records: the claims' p50 and p99 over the interval (the deltas of
the workers' ``ratchet_worker_claim_seconds`` histograms: bucket upper bounds), the pickup p99
(``ratchet_execution.queue_wait_ms`` of the runs that started in it), the producer's enqueue
p99, the attempts ended, pending and running jobs, every ``ratchet_*`` table's size (with its
indexes, and theirs alone), live and dead tuples and autovacuum runs (``pg_stat_user_tables``),
ended jobs retention should have archived and has not, each worker's resident memory
(``VmRSS``) and the machine's load average. At the end the producer stops, the workers drain
and a last sample is taken. Written to ``--out``: ``samples.csv`` (a row per sample),
``tables.csv`` (a row per sample and table), ``summary.md`` (printed too) and, unless
``--no-plot``, ``soak.png``. Nothing is asserted here (``tests/acceptance/test_soak.py`` runs
two minutes of it and does).

A flat line is the goal: what the workers hold, the hot table and the retained tables grow to a
size set by the rate and the horizon and stay there. ``ratchet_job_archive`` is where retention
puts ended jobs: it grows by design, at the rate of ended jobs.

That needs vacuum: a server with autovacuum off (as a CI server may be; the summary says which)
never reuses the space of ended jobs, and every table grows with every job. ``--own-server``
runs on a server made for the soak with initdb's defaults (autovacuum on), with
``--server-setting NAME=VALUE`` added (``tests/replica.py``'s ``running_server``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import threading
import time
import urllib.request
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from flask import Flask

from bench.enqueue_claim import DEFAULT_PG, db, fresh_database, make_app
from bench.pgbouncer import free_port
from bench.soak_report import report
from bench.soak_sample import Sample, Sampler
from bench.worker import worker
from flask_ratchet import Backoff, DoNotRetry, JobContext, Ratchet

#: The soak's own tasks and masters, apart from the other benchmarks' ``ratchet``.
soak = Ratchet()

#: The workers' app: the settings travel in this variable (JSON), the URL in ``BENCH_URL``.
SETTINGS_VARIABLE = "BENCH_SOAK"


@soak.task(max_retries=2, backoff=Backoff.FIXED, backoff_base=1.0)
def work(i: int, fate: str, ms: float, ctx: JobContext) -> None:
    """A job of the soak: ``ms`` of waiting; ``fate`` ``once`` fails its first attempt (retried
    a second later), ``dead`` fails for good, ``log`` writes a log line."""
    time.sleep(ms / 1000)
    if fate == "once" and ctx.attempt == 1:
        raise RuntimeError(f"job {i} fails its first attempt")
    if fate == "dead":
        raise DoNotRetry(f"job {i} fails for good")
    if fate == "log":
        ctx.logger.info("job %d ran", i)


@soak.recurring(every=timedelta(seconds=2))
def every_2s() -> None:
    """A recurring master of the soak."""


@soak.recurring(every=timedelta(seconds=5))
def every_5s() -> None:
    """A recurring master of the soak."""


@soak.recurring(every=timedelta(seconds=10))
def every_10s() -> None:
    """A recurring master of the soak."""


#: How many masters the soak declares: at most one child of each is live at a time.
MASTERS = 3


@dataclass(frozen=True)
class Settings:
    """One soak's parameters (the command line's options)."""

    minutes: float = 60.0
    rate: float = 50.0
    workers: int = 2
    concurrency: int = 10
    work_ms: float = 2.0
    fail_rate: float = 0.1
    dead_rate: float = 0.005
    log_rate: float = 0.1
    retention_seconds: float = 120.0
    retention_interval: float = 30.0
    sample_seconds: float = 60.0
    #: After the drain, how long to wait before the last sample (retention's archiving of the
    #: last jobs shows in it).
    settle_seconds: float = 0.0
    #: The longest the drain may take before the last sample is taken anyway.
    drain_timeout: float = 300.0
    pg: str = DEFAULT_PG
    database: str = "bench_soak"
    keep: bool = False
    out: Path = Path("bench/.soak")
    plot: bool = True
    seed: int = 1
    #: Run on a PostgreSQL server of its own, made for the run (initdb's defaults: autovacuum
    #: on), with ``server_settings`` (``postgresql.conf`` lines) added.
    own_server: bool = False
    server_settings: str = ""

    @property
    def warmup(self) -> float:
        """Seconds after which the tables can be in their steady state: ended jobs have been
        archived for a while and a default autovacuum (a pass a minute) has been by."""
        return self.retention_seconds + 2 * self.retention_interval + 60

    def fate(self, roll: float) -> str:
        """What becomes of a job, for ``roll`` drawn uniformly from [0, 1)."""
        for fate, share in (
            ("dead", self.dead_rate),
            ("once", self.fail_rate),
            ("log", self.log_rate),
        ):
            if roll < share:
                return fate
            roll -= share
        return "ok"

    def app_config(self) -> dict[str, Any]:
        """The ``RATCHET_*`` settings of the producer's and the workers' app: retention short."""
        days = self.retention_seconds / 86400
        return {
            "RATCHET_RETENTION_DAYS": days,
            "RATCHET_LOG_RETENTION_DAYS": days,
            "RATCHET_DLQ_RETENTION_DAYS": days,
            "RATCHET_RETENTION_INTERVAL": self.retention_interval,
        }


def soak_app() -> Flask:
    """The app the soak's workers load (``--app bench.soak:soak_app()``)."""
    config = json.loads(os.environ[SETTINGS_VARIABLE])
    return make_app(os.environ["BENCH_URL"], config, soak)


class Producer(threading.Thread):
    """Enqueues ``rate`` jobs a second, singly, each in a transaction of its own."""

    def __init__(self, app: Flask, settings: Settings) -> None:
        super().__init__(name="soak-producer", daemon=True)
        self.app = app
        self.settings = settings
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.count = 0
        self.took: list[float] = []  # enqueue times since the last take()
        self.error: Exception | None = None

    def run(self) -> None:
        s = self.settings
        pick = random.Random(s.seed)
        start = time.monotonic()
        i = 0
        try:
            with self.app.app_context():
                while not self.stopping.is_set():
                    # A fixed schedule, not a fixed pause: a slow enqueue is caught up on.
                    wait = start + i / s.rate - time.monotonic()
                    if wait > 0 and self.stopping.wait(wait):
                        break
                    began = time.perf_counter()
                    soak.enqueue_now(work, i, s.fate(pick.random()), s.work_ms)
                    took = time.perf_counter() - began
                    with self.lock:
                        self.count += 1
                        self.took.append(took)
                    i += 1
        except Exception as exc:  # reported by the sampler, which stops the soak
            self.error = exc

    def take(self) -> tuple[int, list[float]]:
        """Jobs enqueued so far, and the enqueue times since the last call."""
        with self.lock:
            took, self.took = self.took, []
            return self.count, took


@dataclass
class Result:
    """A soak's samples, in order, and where they were written."""

    settings: Settings
    samples: list[Sample]
    server: str  # its autovacuum settings
    drained: bool
    summary: str = ""
    files: list[Path] = field(default_factory=list)


def run(settings: Settings, echo: bool = False) -> Result:
    """Run one soak as ``settings`` say (on a server of its own with ``own_server``); write
    its files to ``settings.out``; ``echo`` prints a line per sample."""
    with ExitStack() as stack:
        if settings.own_server:
            from tests.replica import running_server

            port = stack.enter_context(running_server(settings.server_settings))
            pg = f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
            settings = replace(settings, pg=pg)
        result = soak_on(settings, echo)
    result.summary, result.files = report(result)
    return result


def soak_on(s: Settings, echo: bool) -> Result:
    """The soak itself, on the server ``s.pg``."""
    url = fresh_database(s.pg, s.database)
    s.out.mkdir(parents=True, exist_ok=True)
    config = s.app_config()
    app = make_app(url, config, soak)
    ports = [free_port() for _ in range(s.workers)]
    env = {SETTINGS_VARIABLE: json.dumps(config)}
    procs = [
        worker(
            url,
            *("--concurrency", str(s.concurrency), "--metrics-port", str(port)),
            app="bench.soak:soak_app()",
            env=env,
            log=s.out / f"worker-{n}.log",
        )
        for n, port in enumerate(ports)
    ]
    producer = Producer(app, s)
    samples: list[Sample] = []
    drained = False
    try:
        wait_for_metrics(ports, procs)
        late = s.retention_seconds + 2 * s.retention_interval + 5
        sampler = Sampler(url, ports, [p.pid for p in procs], late)
        server = sampler.server()
        producer.start()
        samples.append(sampler.take("start", *producer.take()))
        end = sampler.started + s.minutes * 60
        while (now := time.monotonic()) < end - 0.5:
            next_at = sampler.started + len(samples) * s.sample_seconds
            time.sleep(max(0.0, min(next_at, end) - now))
            check_alive(procs, producer)
            samples.append(sampler.take("soak", *producer.take()))
            if echo:
                print(progress_line(samples[-1]), flush=True)
        producer.stopping.set()
        producer.join(30)
        deadline = time.monotonic() + s.drain_timeout
        while not (drained := sampler.drained()) and time.monotonic() < deadline:
            time.sleep(0.5)
        time.sleep(s.settle_seconds)
        samples.append(sampler.take("drain", *producer.take()))
        sampler.close()
    finally:
        producer.stopping.set()
        for proc in procs:
            proc.terminate()  # drains: SIGTERM
        for proc in procs:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
        with app.app_context():
            db.engine.dispose()
        if not s.keep:
            drop_database(s.pg, s.database)
    return Result(s, samples, server, drained)


def wait_for_metrics(ports: list[int], procs: list[Any], timeout: float = 60.0) -> None:
    """Return once every worker serves its metrics (it has started)."""
    deadline = time.monotonic() + timeout
    for port in ports:
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read()
                break
            except OSError:
                check_alive(procs, None)
                if time.monotonic() > deadline:
                    said = f"no worker metrics on port {port} after {timeout} s"
                    raise RuntimeError(said) from None
                time.sleep(0.2)


def check_alive(procs: list[Any], producer: Producer | None) -> None:
    for n, proc in enumerate(procs):
        if proc.poll() is not None:
            raise RuntimeError(f"worker {n} exited with {proc.returncode}: see worker-{n}.log")
    if producer is not None and producer.error is not None:
        raise RuntimeError("the producer stopped") from producer.error


def drop_database(server: str, name: str) -> None:
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    admin.dispose()


def progress_line(x: Sample) -> str:
    hot = x.tables.get("ratchet_job_queue")
    return (
        f"{x.elapsed / 60:6.1f} min  {x.ended / x.seconds:6.1f} jobs/s  "
        f"claim p99 {x.claim_p99_ms:5.1f} ms  pickup p99 {x.pickup_p99_ms:6.1f} ms  "
        f"pending {x.pending:4}  hot {hot.total / 1024 if hot else 0:7.0f} kB "
        f"(dead {hot.dead if hot else 0})  cold rows {x.cold_rows:6}  "
        f"rss {' '.join(f'{r:.0f}' for r in x.rss_mb)} MB  load {x.load1:.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    d = Settings()
    parser.add_argument("--minutes", type=float, required=True)
    parser.add_argument("--rate", type=float, default=d.rate, help="jobs enqueued a second")
    parser.add_argument("--workers", type=int, default=d.workers)
    parser.add_argument("--concurrency", type=int, default=d.concurrency)
    parser.add_argument("--work-ms", type=float, default=d.work_ms)
    parser.add_argument("--fail-rate", type=float, default=d.fail_rate)
    parser.add_argument("--dead-rate", type=float, default=d.dead_rate)
    parser.add_argument("--retention-seconds", type=float, default=d.retention_seconds)
    parser.add_argument("--retention-interval", type=float, default=d.retention_interval)
    parser.add_argument("--sample-seconds", type=float, default=d.sample_seconds)
    parser.add_argument("--settle-seconds", type=float, default=d.settle_seconds)
    parser.add_argument("--pg", default=d.pg)
    parser.add_argument("--database", default=d.database)
    parser.add_argument("--keep", action="store_true", help="keep the database (on --pg)")
    parser.add_argument(
        "--own-server", action="store_true", help="a server made for the run, autovacuum on"
    )
    parser.add_argument(
        "--server-setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a postgresql.conf line for --own-server (again for more)",
    )
    parser.add_argument("--out", type=Path, default=d.out)
    parser.add_argument("--no-plot", action="store_true")
    args = vars(parser.parse_args())
    lines = args.pop("server_setting")
    plot = not args.pop("no_plot")
    settings = replace(d, **args, plot=plot, server_settings="".join(f"{x}\n" for x in lines))
    result = run(settings, echo=True)
    print(result.summary)
    for path in result.files:
        print(f"wrote {path}")


if __name__ == "__main__":
    # The imported module's main: the workers know its tasks as bench.soak's, not __main__'s.
    from bench import soak as imported

    imported.main()
