"""How values look on the page: masked JSON and text, durations, times, counts, the throughput
chart, batch bars, flow conditions, waiting counts and failure rates.

Pure functions, registered as Jinja filters by :mod:`.views`. Nothing here marks text as safe:
Jinja's autoescape escapes everything these return.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from flask_ratchet import runtime
from flask_ratchet.job import BatchProgress, Job
from flask_ratchet.payload import Sealed, Unreadable
from flask_ratchet.redact import MASK as MASK
from flask_ratchet.redact import masked as masked
from flask_ratchet.redact import masked_arguments, stored_text_masked
from flask_ratchet.redact import mentions_secret as mentions_secret
from flask_ratchet.redact import secret_key as secret_key
from flask_ratchet.retry import sanitize

from .reads.batches import WaitsOn
from .reads.jobs import Count
from .reads.overview import Bucket, Window
from .reads.resources import WAITING_CAP, Waiting

# The masking rules (MASK, masked, mentions_secret, secret_key, imported above) live in the
# library, which shows stored values outside the console too.

#: Characters that change how text around them reads without being seen: bidirectional
#: embeddings, overrides and isolates (a "\u202e" turns ``exe.txt`` into ``txt.exe``), marks,
#: and zero-width spaces and joiners. Shown as their ``\uXXXX`` escapes wherever the console
#: shows text a job or a task wrote.
INVISIBLE = re.compile("[\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")


def visible(text: str) -> str:
    """``text`` with its invisible and direction-changing characters shown as escapes."""
    return INVISIBLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def masked_text(text: object) -> str:
    """Stored free text (an error, a traceback, a log line) as the console shows it: secrets
    masked, invisible characters shown."""
    return visible(stored_text_masked(text))


#: What an absent value shows.
NONE = "\N{EM DASH}"


def pretty_json(value: Any) -> str:
    """Masked, indented JSON text (escaped by the template like any other text).

    A stored value that is not readable JSON is shown as stored, after why it is unreadable,
    with credentials and ``password=``-style values redacted as in errors.
    """
    if isinstance(value, Sealed):  # the console holds no keys: it never shows the clear text
        return f"{value.reason}: the console does not decrypt"
    if isinstance(value, Unreadable):
        return visible(
            f"{value.reason}; as stored:\n{sanitize(value.text, limit=UNREADABLE_SHOWN)}"
        )
    return visible(
        json.dumps(masked(value), indent=2, ensure_ascii=False, sort_keys=True, default=str)
    )


#: How much of an unreadable stored value a page shows (characters).
UNREADABLE_SHOWN = 16_000

#: How much of a long value's text (a job's arguments, its result) its page shows before a link to
#: the whole of it (characters): a megabyte of arguments would make the page slow to draw.
SHOWN_AT_FIRST = 4096


@dataclass(frozen=True)
class Head:
    """What a page shows of a long text: ``text``, ``cut`` short or whole, ``kept`` and the
    whole ``size`` in KB as shown."""

    text: str
    cut: bool
    kept: str
    size: str


def head(text: str, whole: bool = False, limit: int = SHOWN_AT_FIRST) -> Head:
    """The first ``limit`` characters of ``text``, or all of it when ``whole``."""
    size = _kb(len(text.encode()))
    if whole or len(text) <= limit:
        return Head(text, False, size, size)
    return Head(text[:limit], True, _kb(len(text[:limit].encode())), size)


def _kb(size: int) -> str:
    return f"{math.ceil(size / 1024):,} KB"


def arguments(job: Job) -> Any:
    """A job's call as the page shows it: ``{"args": [...], "kwargs": {...}}``, or the
    :class:`Unreadable` ``payload`` column."""
    if isinstance(job.args, Unreadable):
        return job.args
    names = runtime.current().registry.parameter_names(job.task)
    return {"args": masked_arguments(job.args, names), "kwargs": job.kwargs}


def audit_filter(target: str) -> str:
    """The filter of a filter action's audit target (``{"filter": …, "changed": […]}``)."""
    try:
        value = json.loads(target)
    except (ValueError, RecursionError):
        return target
    if isinstance(value, dict) and isinstance(value.get("filter"), dict):
        return " ".join(f"{k}={v}" for k, v in sorted(value["filter"].items()))
    return target


def duration(seconds: float | None) -> str:
    """``0.42 s``, ``3 m 05 s``, ``2 h 10 m``, ``4 d 3 h``; an em dash for None."""
    if seconds is None:
        return NONE
    if not math.isfinite(seconds):
        return f"{seconds} s"  # a stored sum or duration of NaN or infinity, shown as it is
    if seconds < 60:
        return f"{seconds:.2f} s" if seconds < 10 else f"{seconds:.0f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} m {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes:02d} m"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


def when(value: datetime | None) -> str:
    """``2026-11-26 02:15:07`` (UTC); an em dash for None."""
    return NONE if value is None else value.strftime("%Y-%m-%d %H:%M:%S")


def iso(value: datetime) -> str:
    """``2026-11-26T02:15:07+00:00``: an instant for a ``<time datetime>`` attribute (a stored
    time without a zone is UTC, as every time ratchet writes)."""
    aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return aware.astimezone(UTC).isoformat(timespec="seconds")


def relative(value: datetime | None, now: datetime) -> str:
    """``3 min ago``, ``in 4 min``, ``just now``: how far ``value`` is from ``now`` (the
    database's clock, not the web server's), in its largest whole unit: ``s`` under a minute,
    ``min`` under an hour, ``h`` under two days, ``d`` beyond; an em dash for None."""
    if value is None:
        return NONE
    if (value.tzinfo is None) != (now.tzinfo is None):
        value, now = value.replace(tzinfo=UTC), now.replace(tzinfo=UTC)
    seconds = (value - now).total_seconds()
    gap = abs(seconds)
    if gap < 1:
        return "just now"
    if gap < 60:
        amount = f"{int(gap)} s"
    elif gap < 3600:
        amount = f"{int(gap // 60)} min"
    elif gap < 48 * 3600:
        amount = f"{int(gap // 3600)} h"
    else:
        amount = f"{int(gap // 86400)} d"
    return f"in {amount}" if seconds > 0 else f"{amount} ago"


def count(value: Count) -> str:
    """``1,234``; ``≈ 1,200,000`` when estimated; ``10,000+`` past the exact cap."""
    if value.exact:
        return f"{value.value:,}"
    if value.estimated:
        return f"≈ {value.value:,}"
    return f"{value.value:,}+"


def short_id(value: object) -> str:
    """``01a2159c…b631``: a job id's time prefix and random tail, enough to tell ids apart."""
    text = str(value)
    return f"{text[:8]}…{text[-4:]}" if len(text) > 12 else text


def first_line(text: str | None, limit: int = 120) -> str:
    """The first line of an error, shortened for a table cell."""
    if not text:
        return ""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return visible(line if len(line) <= limit else line[: limit - 1] + "…")


@dataclass(frozen=True, slots=True)
class Bar:
    """One bar of the throughput chart, in SVG user units."""

    x: float
    width: float
    ok_y: float
    ok_height: float
    failed_y: float
    failed_height: float
    label: str


@dataclass(frozen=True, slots=True)
class Tick:
    """A value on the chart's y axis, with its gridline's height in SVG user units."""

    value: int
    y: float
    label: str


@dataclass(frozen=True, slots=True)
class TimeLabel:
    """A time under the bars, at the left edge of the bar that starts then."""

    x: float
    label: str


@dataclass(frozen=True, slots=True)
class Chart:
    """Stacked bars of executions over a window, drawn by ``overview.html`` as SVG: a y axis of
    round values with gridlines on the left, the plot from :attr:`left` to :attr:`width` and
    from :attr:`top` to :attr:`bottom`, times under it."""

    width: int
    height: int
    left: int
    top: int
    bars: list[Bar]
    ticks: list[Tick]
    times: list[TimeLabel]
    peak: int
    total_ok: int
    total_failed: int
    #: What one bar covers: "minute", "30 minutes".
    per: str

    @property
    def bottom(self) -> int:
        return self.top + self.height


#: Room left of the plot for the y axis's labels, and above it for half of the top one.
CHART_LEFT = 36
CHART_TOP = 6


def chart(buckets: list[Bucket], window: Window, width: int = 720, height: int = 140) -> Chart:
    """Lay out ``buckets`` as stacked bars (succeeded below, failed on top), scaled to the top
    of a y axis of round values (:func:`axis`), with a time under every bar that starts on a
    multiple of ``window.label_every`` minutes since midnight UTC."""
    peak = max((b.succeeded + b.failed for b in buckets), default=0)
    ticks_at = axis(peak)
    scale = height / ticks_at[-1]
    bottom = CHART_TOP + height
    step = (width - CHART_LEFT) / max(len(buckets), 1)
    bars = []
    times = []
    for i, b in enumerate(buckets):
        ok_h = b.succeeded * scale
        bad_h = b.failed * scale
        x = CHART_LEFT + i * step
        bars.append(
            Bar(
                x=round(x + 1, 2),
                width=round(max(step - 2, 1), 2),
                ok_y=round(bottom - ok_h, 2),
                ok_height=round(ok_h, 2),
                failed_y=round(bottom - ok_h - bad_h, 2),
                failed_height=round(bad_h, 2),
                label=f"{_span(b)}: {b.succeeded:,} succeeded, {b.failed:,} failed",
            )
        )
        if (b.start.hour * 60 + b.start.minute) % window.label_every == 0:
            times.append(TimeLabel(round(x, 2), f"{b.start:%H:%M}"))
    return Chart(
        width=width,
        height=height,
        left=CHART_LEFT,
        top=CHART_TOP,
        bars=bars,
        ticks=[Tick(v, round(bottom - v * scale, 2), _tick_label(v)) for v in ticks_at],
        times=times,
        peak=peak,
        total_ok=sum(b.succeeded for b in buckets),
        total_failed=sum(b.failed for b in buckets),
        per="minute" if window.bucket == 1 else f"{window.bucket} minutes",
    )


def axis(peak: int) -> list[int]:
    """The y axis's values for bars up to ``peak``: from 0 in a round step (1, 2 or 5 times a
    power of ten) that reaches ``peak`` in at most five steps; ``[0, 1]`` when there is nothing.

    >>> axis(7)
    [0, 2, 4, 6, 8]
    """
    magnitude = 1
    while True:
        for m in (1, 2, 5):
            step = m * magnitude
            if peak <= 5 * step:
                top = max(-(-peak // step), 1) * step
                return list(range(0, top + 1, step))
        magnitude *= 10


def _tick_label(value: int) -> str:
    """``800``, ``5,000``, ``20k``, ``1.5M``: short enough for the axis's margin."""
    if value >= 1_000_000:
        return f"{value / 1_000_000:g}M"
    if value >= 10_000:
        return f"{value / 1000:g}k"
    return f"{value:,}"


def _span(bucket: Bucket) -> str:
    """``10:23``; for a bar wider than a minute, its start and end joined by an en dash."""
    if bucket.minutes == 1:
        return f"{bucket.start:%H:%M}"
    end = bucket.start + timedelta(minutes=bucket.minutes)
    return f"{bucket.start:%H:%M}\N{EN DASH}{end:%H:%M}"


def in_zone(value: datetime | None, zone: str) -> str:
    """``2026-11-26 03:15:00 CET``: an instant as a wall-clock time in ``zone`` (an IANA name);
    an em dash for None, and UTC when the zone is unknown to this server's tz database."""
    if value is None:
        return NONE
    try:
        tz = ZoneInfo(zone)
    except (ValueError, LookupError):
        tz = ZoneInfo("UTC")
    return value.astimezone(tz).strftime("%Y-%m-%d %H:%M:%S %Z")


# -- batches and flows -------------------------------------------------------------------------

#: A share of a batch's bar that is not zero is drawn at least this wide (percent), so one failed
#: child among ten thousand still shows.
MIN_SHARE = 0.6


@dataclass(frozen=True, slots=True)
class BatchBar:
    """A batch's progress bar in percent of its width: succeeded, then failed, then the rest."""

    ok: float
    failed: float
    remaining: int
    label: str

    @property
    def failed_x(self) -> float:
        return self.ok


def batch_bar(progress: BatchProgress) -> BatchBar:
    """Lay out ``progress`` as a bar (drawn by the templates as SVG: no style attribute)."""
    total = progress.total
    remaining = progress.remaining
    label = (
        f"{progress.succeeded:,} succeeded, {progress.failed:,} failed, "
        f"{remaining:,} to go, of {total:,}"
    )
    if total <= 0:
        return BatchBar(0.0, 0.0, 0, "no children")
    failed = _share(progress.failed, total)
    ok = min(_share(progress.succeeded, total), 100.0 - failed)
    return BatchBar(ok, failed, remaining, label)


def _share(part: int, total: int) -> float:
    if part <= 0:
        return 0.0
    return round(min(100.0, max(MIN_SHARE, 100.0 * part / total)), 2)


def wall_time(progress: BatchProgress, now: datetime) -> float | None:
    """Seconds from a batch's submission to its end, or to ``now`` while it runs."""
    if progress.created_at is None:
        return None
    end = progress.finished_at or now
    return max(0.0, (end - progress.created_at).total_seconds())


def parallelism(progress: BatchProgress, now: datetime) -> str:
    """The children's summed run time over the batch's wall time (so far, while it runs),
    as ``5.7`` and the multiplication sign, then ``parallel``: about six children ran at any
    moment; below 1 they waited for each other or in queues. An em dash before any child ran."""
    wall = wall_time(progress, now)
    run = progress.child_run_ms / 1000
    if wall is None or wall <= 0 or run <= 0 or not math.isfinite(run):
        return NONE
    return f"{run / wall:,.1f}\N{MULTIPLICATION SIGN} parallel"


#: What each condition kind means, for a tooltip (see :class:`flask_ratchet.flows.Condition`).
CONDITION_MEANING = {
    "THEN": "the next step of a chain: runs once its parent succeeded",
    "ON_SUCCESS": "a branch: runs if its parent succeeded",
    "ON_FAILURE": "a branch: runs if its parent failed for good (not if canceled)",
    "WHEN": "a branch: runs if its parent succeeded and the predicate of its result holds",
    "BATCH_SUCCESS": "runs once every child of the batch succeeded",
    "BATCH_FAILURE": "runs once the batch ended with a child failed or canceled",
    "SUCCESS_RATE": "runs once the batch ended with at least this share of children succeeded",
    "FAILURE_COUNT": "runs once the batch ended with at least this many children failed",
}


def condition(waits_on: WaitsOn) -> str:
    """``THEN``, ``WHEN app:is_big(result)``, ``SUCCESS_RATE ≥ 95%``, ``FAILURE_COUNT ≥ 4``."""
    kind, threshold = waits_on.kind, waits_on.threshold
    if kind == "WHEN" and waits_on.predicate:
        return f"WHEN {waits_on.predicate}(result)"
    if kind == "SUCCESS_RATE" and threshold is not None:
        return f"SUCCESS_RATE ≥ {threshold * 100:g}%"
    if kind == "FAILURE_COUNT" and threshold is not None:
        return f"FAILURE_COUNT ≥ {threshold:g}"
    return kind


def condition_meaning(kind: str) -> str:
    """A sentence on what a condition kind means ("" for a kind this console does not know)."""
    return CONDITION_MEANING.get(kind, "")


# -- resources and circuit breakers -------------------------------------------------------------


def waiting(value: Waiting) -> str:
    """``12``; ``12+`` when not every PENDING job was looked at (a lower bound); ``1,000+``
    past :data:`~flask_ratchet.console.reads.resources.WAITING_CAP`."""
    if value.count > WAITING_CAP:
        return f"{WAITING_CAP:,}+"
    return f"{value.count:,}" if value.complete else f"{value.count:,}+"


def percent(rate: float) -> str:
    """``50 %``, ``12.5 %``, ``0 %``: a share from 0 to 1 to three significant digits."""
    return f"{rate * 100:.3g} %"


def seconds(value: float | Unreadable) -> str:
    """``2 s``, ``0.5 s``, ``90 s``: a setting in seconds, as it would be typed; a stored one
    that cannot be read, as stored."""
    if isinstance(value, Unreadable):
        return f"{value.text} s"
    return f"{value:g} s"
