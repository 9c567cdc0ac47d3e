"""What ``bench.soak`` writes: its CSV files, its Markdown summary and its plot."""

from __future__ import annotations

import csv
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from bench.soak_sample import Sample, TableStats

if TYPE_CHECKING:
    from bench.soak import Result

#: The hot table: a live job's row, deleted when the job ends.
HOT = "ratchet_job_queue"
#: The tables retention keeps short, besides the hot one.
RETAINED = ("ratchet_job", "ratchet_execution", "ratchet_job_log", "ratchet_dlq_alert")
#: Where retention moves ended jobs: it grows by design.
ARCHIVE = "ratchet_job_archive"


def kb(sample: Sample, table: str, part: str = "total") -> float:
    stats = sample.tables.get(table)
    return getattr(stats, part) / 1024 if stats else float("nan")


def tuples(sample: Sample, table: str, part: str) -> float:
    stats = sample.tables.get(table)
    return float(getattr(stats, part)) if stats else float("nan")


def per_second(count: Callable[[Sample], float]) -> Callable[[Sample], float]:
    return lambda x: count(x) / x.seconds if x.seconds else float("nan")


#: The summary's series: a label and how to read it from a sample.
SERIES: list[tuple[str, Callable[[Sample], float]]] = [
    ("jobs enqueued / s", per_second(lambda x: x.enqueued)),
    ("attempts ended / s", per_second(lambda x: x.ended)),
    ("claim p50 (ms, bucket bound)", lambda x: x.claim_p50_ms),
    ("claim p99 (ms, bucket bound)", lambda x: x.claim_p99_ms),
    ("pickup p99 (ms)", lambda x: x.pickup_p99_ms),
    ("enqueue p99 (ms)", lambda x: x.enqueue_p99_ms),
    ("pending jobs", lambda x: x.pending),
    ("running jobs", lambda x: x.running),
    (f"{HOT} size (kB)", lambda x: kb(x, HOT)),
    (f"{HOT} indexes (kB)", lambda x: kb(x, HOT, "indexes")),
    (f"{HOT} dead tuples", lambda x: tuples(x, HOT, "dead")),
    ("ratchet_job rows", lambda x: x.cold_rows),
    ("ratchet_job size (kB)", lambda x: kb(x, "ratchet_job")),
    ("ratchet_job indexes (kB)", lambda x: kb(x, "ratchet_job", "indexes")),
    ("ratchet_job dead tuples", lambda x: tuples(x, "ratchet_job", "dead")),
    ("ratchet_execution size (kB)", lambda x: kb(x, "ratchet_execution")),
    ("ratchet_execution dead tuples", lambda x: tuples(x, "ratchet_execution", "dead")),
    ("ratchet_job_log size (kB)", lambda x: kb(x, "ratchet_job_log")),
    ("ended jobs past retention", lambda x: x.overdue),
    (
        "other ratchet tables (kB)",
        lambda x: (
            sum(t.total for n, t in x.tables.items() if n not in (HOT, ARCHIVE, *RETAINED)) / 1024
        ),
    ),
    (f"{ARCHIVE} rows (grows by design)", lambda x: x.archive_rows),
    ("autovacuum runs, ratchet tables", lambda x: sum(t.autovacuums for t in x.tables.values())),
    ("load average (1 min)", lambda x: x.load1),
]


def rss_series(samples: list[Sample]) -> list[tuple[str, Callable[[Sample], float]]]:
    workers = max((len(x.rss_mb) for x in samples), default=0)
    return [(f"worker {n} RSS (MB)", worker_rss(n)) for n in range(workers)]


def worker_rss(n: int) -> Callable[[Sample], float]:
    return lambda x: x.rss_mb[n] if n < len(x.rss_mb) else float("nan")


def table_figure(name: str, part: str, scale: float = 1.0) -> Callable[[Sample], float]:
    """A table's ``part`` (a :class:`TableStats` field) divided by ``scale``; NaN if absent."""

    def read(x: Sample) -> float:
        stats = x.tables.get(name)
        return getattr(stats, part) / scale if stats else float("nan")

    return read


def figure(value: float) -> str:
    if math.isnan(value):
        return "—"
    return f"{value:,.0f}" if abs(value) >= 100 or value == int(value) else f"{value:,.1f}"


def summary(result: Result) -> str:
    """The Markdown summary: each series at the first sample, at the first once the tables
    could have reached their steady state (see ``Settings.warmup``), at the last, its highest,
    and after the drain."""
    s = result.settings
    soaked = [x for x in result.samples if x.phase == "soak"]
    drained = [x for x in result.samples if x.phase == "drain"]
    warm = next((x for x in soaked if x.elapsed >= s.warmup), soaked[-1] if soaked else None)
    lines = [
        f"Soak: {s.minutes:g} min, {s.rate:g} jobs/s enqueued singly, {s.workers} workers x "
        f"{s.concurrency} threads, jobs of {s.work_ms:g} ms ({s.fail_rate:.0%} retried once, "
        f"{s.dead_rate:.1%} dead-lettered), 3 recurring masters (2, 5, 10 s), retention "
        f"{s.retention_seconds:g} s run every {s.retention_interval:g} s, a sample every "
        f"{s.sample_seconds:g} s; PostgreSQL, {result.server}"
        + ("" if result.drained else "; the drain did NOT finish"),
        "",
    ]
    if result.server.startswith("autovacuum off"):
        lines += [
            "Autovacuum is off on this server: the space of ended jobs is never reused and the "
            "tables grow with every job (--own-server runs on a server with it on).",
            "",
        ]
    if not soaked or warm is None:
        return "\n".join([*lines, "(no sample)"])
    lines += [
        f"| series | first ({soaked[0].elapsed / 60:.1f} min) | warm ({warm.elapsed / 60:.1f} min)"
        f" | last ({soaked[-1].elapsed / 60:.1f} min) | max | after drain |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, read in [*SERIES, *rss_series(result.samples)]:
        values = [read(x) for x in soaked]
        known = [v for v in values if not math.isnan(v)]
        after = read(drained[-1]) if drained else float("nan")
        lines.append(
            f"| {label} | {figure(values[0])} | {figure(read(warm))} | {figure(values[-1])} | "
            f"{figure(max(known) if known else float('nan'))} | {figure(after)} |"
        )
    return "\n".join(lines)


def rounded(value: object) -> object:
    return round(value, 3) if isinstance(value, float) else value


def write_csv(result: Result) -> list[Path]:
    out = result.settings.out
    workers = max((len(x.rss_mb) for x in result.samples), default=0)
    plain = [
        "elapsed",
        "phase",
        "seconds",
        "load1",
        "enqueued",
        "enqueue_p99_ms",
        "ended",
        "retried",
        "dead",
        "claims",
        "claim_p50_ms",
        "claim_p99_ms",
        "pickup_p99_ms",
        "runs",
        "pending",
        "running",
        "cold_rows",
        "archive_rows",
        "overdue",
    ]
    samples_csv, tables_csv = out / "samples.csv", out / "tables.csv"
    with samples_csv.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(
            [*plain, *(f"rss_mb_{n}" for n in range(workers)), "hot_kb", "hot_index_kb", "hot_dead"]
        )
        for x in result.samples:
            w.writerow(
                [
                    *(
                        round(v, 3) if isinstance(v, float) else v
                        for v in map(x.__getattribute__, plain)
                    ),
                    *(round(r, 1) for r in x.rss_mb),
                    round(kb(x, HOT), 1),
                    round(kb(x, HOT, "indexes"), 1),
                    tuples(x, HOT, "dead"),
                ]
            )
    with tables_csv.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["elapsed", "phase", "table", *TableStats._fields])
        for x in result.samples:
            for name, stats in sorted(x.tables.items()):
                w.writerow([round(x.elapsed, 1), x.phase, name, *stats])
    return [samples_csv, tables_csv]


def plot(result: Result) -> Path:
    """Six small panels over the minutes: claims, the hot table, the retained tables, dead
    tuples, worker memory, throughput."""
    import matplotlib

    matplotlib.use("Agg")  # a file, no display
    import matplotlib.pyplot as plt

    xs = [x for x in result.samples if x.phase == "soak"]
    minutes = [x.elapsed / 60 for x in xs]
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.5), sharex=True)

    def panel(ax: object, title: str, lines: list[tuple[str, Callable[[Sample], float]]]) -> None:
        for label, read in lines:
            ax.plot(minutes, [read(x) for x in xs], marker=".", label=label)  # type: ignore[attr-defined]
        ax.set_title(title, fontsize=10)  # type: ignore[attr-defined]
        ax.set_ylim(bottom=0)  # type: ignore[attr-defined]
        ax.grid(alpha=0.3)  # type: ignore[attr-defined]
        ax.legend(fontsize=7)  # type: ignore[attr-defined]

    panel(
        axes[0][0],
        "latency (ms)",
        [
            ("claim p99", lambda x: x.claim_p99_ms),
            ("claim p50", lambda x: x.claim_p50_ms),
            ("pickup p99", lambda x: x.pickup_p99_ms),
        ],
    )
    panel(
        axes[0][1],
        f"hot table {HOT} (kB)",
        [("with indexes", lambda x: kb(x, HOT)), ("indexes", lambda x: kb(x, HOT, "indexes"))],
    )
    panel(
        axes[0][2],
        "retained tables, with indexes (MB)",
        [(name, table_figure(name, "total", 1024 * 1024)) for name in RETAINED[:3]],
    )
    panel(
        axes[1][0],
        "dead tuples",
        [(name, table_figure(name, "dead")) for name in (HOT, *RETAINED[:2])],
    )
    panel(axes[1][1], "worker RSS (MB)", rss_series(result.samples))
    panel(
        axes[1][2],
        "per second",
        [
            ("jobs enqueued", per_second(lambda x: x.enqueued)),
            ("attempts ended", per_second(lambda x: x.ended)),
        ],
    )
    for ax in axes[1]:
        ax.set_xlabel("minutes")
    s = result.settings
    fig.suptitle(
        f"flask-ratchet soak: {s.rate:g} jobs/s, {s.workers} workers, retention "
        f"{s.retention_seconds:g} s (PostgreSQL, {result.server})",
        fontsize=11,
    )
    fig.tight_layout()
    path = result.settings.out / "soak.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def report(result: Result) -> tuple[str, list[Path]]:
    """Write the CSV files, the summary and (unless told not to) the plot; the summary, and
    the files written."""
    files = write_csv(result)
    text = summary(result)
    path = result.settings.out / "summary.md"
    path.write_text(text + "\n")
    files.append(path)
    if result.settings.plot:
        files.append(plot(result))
    return text, files
