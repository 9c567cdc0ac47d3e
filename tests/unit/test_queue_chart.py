"""The queues page's chart: the busiest queues listed, scaled to an axis of round values."""

from __future__ import annotations

from flask_ratchet.console import queue_chart
from flask_ratchet.console.reads.jobs import Count
from flask_ratchet.console.reads.queues import QueueRow


def row(name: str, ok: int, failed: int) -> QueueRow:
    return QueueRow(
        name=name,
        paused=False,
        pending=Count(0),
        running=0,
        dead_letters=Count(0),
        succeeded_last_hour=ok,
        failed_last_hour=failed,
        oldest_due_wait=None,
    )


def test_bars_are_the_busiest_queues_failed_after_succeeded_scaled_to_the_axis() -> None:
    rows = [row("idle", 0, 0), row("mail", 6, 1), row("reports", 2, 0), row("x" * 30, 2, 0)]
    chart = queue_chart.chart(rows, width=366)
    assert [b.name for b in chart.bars] == ["mail", "reports", "x" * 30]  # ties by name
    assert chart.busy == 3
    assert [t.value for t in chart.ticks] == [0, 2, 4, 6, 8]
    plot = 366 - queue_chart.LABEL_WIDTH - queue_chart.RIGHT  # 200 units for 8 runs
    assert chart.ticks[0].x == chart.left and chart.ticks[-1].x == chart.left + plot
    mail = chart.bars[0]
    assert mail.ok_width == 150 and mail.failed_x == chart.left + 150 and mail.failed_width == 25
    assert mail.label == "mail: 6 succeeded, 1 failed in the last hour"
    assert chart.bars[2].shown_name == "x" * 23 + "…"
    assert chart.bottom == chart.top + 3 * queue_chart.ROW_HEIGHT


def test_at_most_twenty_bars_and_none_when_nothing_ran() -> None:
    many = queue_chart.chart([row(f"q{i:02d}", i + 1, 0) for i in range(30)])
    assert len(many.bars) == queue_chart.MAX_BARS and many.busy == 30
    assert many.bars[0].name == "q29"
    assert queue_chart.chart([row("idle", 0, 0)]).bars == []
