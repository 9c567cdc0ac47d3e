"""The queues page's chart: the last hour's runs of the busiest queues the page lists, one
horizontal bar each (succeeded, then failed), laid out here and drawn by ``queues.html`` as SVG
in the overview chart's style (the same axis of round values, no script).

Pure layout from the figures the page has read already: it costs no statement.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .present import axis
from .reads.queues import QueueRow

#: The most bars drawn: the busiest queues listed.
MAX_BARS = 20
#: Room left of the bars for the queue names and right of them for the last value's label,
#: the height of a bar's row, room above them.
LABEL_WIDTH = 150
RIGHT = 16
ROW_HEIGHT = 16
TOP = 4
#: The longest name written out in full; a longer one is cut (its bar's title holds it all).
NAME_CHARS = 24


@dataclass(frozen=True, slots=True)
class QueueBar:
    """One queue's bar, in SVG user units."""

    name: str
    shown_name: str
    y: float
    height: float
    ok_width: float
    failed_x: float
    failed_width: float
    label: str


@dataclass(frozen=True, slots=True)
class RunTick:
    """A value on the chart's x axis, with its gridline's place in SVG user units."""

    value: int
    x: float
    label: str


@dataclass(frozen=True, slots=True)
class QueueChart:
    """Horizontal stacked bars from :attr:`left` to :attr:`width`, names left of them, values
    under them; no bars when no queue listed ran a job in the last hour."""

    width: int
    left: int
    top: int
    bottom: int
    bars: list[QueueBar]
    ticks: list[RunTick]
    #: How many queues listed ran jobs (more than :data:`MAX_BARS` are left out).
    busy: int


def chart(rows: Sequence[QueueRow], width: int = 720) -> QueueChart:
    """Lay out the busiest :data:`MAX_BARS` of ``rows`` (by runs in the last hour, then by
    name), each bar scaled to the right end of an axis of round values."""
    busy = [r for r in rows if r.succeeded_last_hour + r.failed_last_hour]
    busy.sort(key=lambda r: (-(r.succeeded_last_hour + r.failed_last_hour), r.name))
    shown = busy[:MAX_BARS]
    peak = max((r.succeeded_last_hour + r.failed_last_hour for r in shown), default=0)
    ticks_at = axis(peak)
    scale = (width - LABEL_WIDTH - RIGHT) / ticks_at[-1]
    bars = []
    for i, r in enumerate(shown):
        ok = r.succeeded_last_hour * scale
        name = r.name if len(r.name) <= NAME_CHARS else r.name[: NAME_CHARS - 1] + "…"
        bars.append(
            QueueBar(
                name=r.name,
                shown_name=name,
                y=TOP + i * ROW_HEIGHT + 2,
                height=ROW_HEIGHT - 4,
                ok_width=round(ok, 2),
                failed_x=round(LABEL_WIDTH + ok, 2),
                failed_width=round(r.failed_last_hour * scale, 2),
                label=f"{r.name}: {r.succeeded_last_hour:,} succeeded, "
                f"{r.failed_last_hour:,} failed in the last hour",
            )
        )
    return QueueChart(
        width=width,
        left=LABEL_WIDTH,
        top=TOP,
        bottom=TOP + len(bars) * ROW_HEIGHT,
        bars=bars,
        ticks=[RunTick(v, round(LABEL_WIDTH + v * scale, 2), f"{v:,}") for v in ticks_at],
        busy=len(busy),
    )
