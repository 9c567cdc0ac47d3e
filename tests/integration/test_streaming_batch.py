"""Streaming batches: children written chunk by chunk in one transaction, in flat memory."""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from flask import Flask

from flask_ratchet import JobStatus
from tests.apps import db, ratchet
from tests.flow_tasks import batch_item, follow_up


def items(n: int, fail_at: int | None = None) -> Iterator[int]:
    for i in range(n):
        if i == fail_at:
            raise RuntimeError(f"the source broke at item {i}")
        yield i


def counted(table: str) -> int:
    with db.engine.connect() as conn:
        return int(conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one())


def rss() -> int:
    """This process's resident memory, in bytes (Linux)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def stream_peak(n: int) -> tuple[int, int]:
    """Stream ``n`` children; return how far resident memory rose meanwhile (sampled every
    5 ms) and the batch's total."""
    gc.collect()
    base = rss()
    peak = base
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.005):
            peak = max(peak, rss())

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        handle = (
            ratchet.streaming_batch(f"stream-{n}")
            .from_iterable(items(n))
            .process(batch_item)
            .with_chunk_size(1000)
            .on_success(follow_up, "streamed")
            .start()
        )
    finally:
        done.set()
        sampler.join()
    return max(peak, rss()) - base, handle.total


@pytest.mark.slow
def test_streaming_100k_children_keeps_memory_flat(app: Flask) -> None:
    small_peak, small_total = stream_peak(10_000)
    big_peak, big_total = stream_peak(100_000)
    assert (small_total, big_total) == (10_000, 100_000)
    # Ten times the items, about the same rise: memory follows the chunk, not the iterable
    # (holding 100,000 jobs would take hundreds of megabytes).
    assert big_peak < small_peak * 1.5 + 10_000_000, (small_peak, big_peak)
    assert big_peak < 60_000_000, big_peak
    assert counted("ratchet_job") == 10_000 + 100_000 + 2 * 2  # children + parents, follow-ups
    progress = ratchet.batch_progress(
        ratchet.find_jobs(task="flask_ratchet:batch", limit=2).items[0].id
    )
    assert progress is not None and progress.total == 100_000 and not progress.finished


def test_an_iterable_that_raises_leaves_nothing_behind(app: Flask) -> None:
    stream = (
        ratchet.streaming_batch("broken-source")
        .from_iterable(items(20_000, fail_at=15_000))  # fifteen chunks written, then undone
        .process(batch_item)
        .with_chunk_size(1000)
    )
    with pytest.raises(RuntimeError, match="the source broke at item 15000"):
        stream.start()
    for table in (
        "ratchet_job",
        "ratchet_job_queue",
        "ratchet_batch",
        "ratchet_workflow_condition",
    ):
        assert counted(table) == 0, table


def test_a_streamed_batch_without_items_succeeds_at_once(app: Flask) -> None:
    handle = ratchet.streaming_batch("empty").from_iterable([]).process(batch_item).start()
    assert handle.total == 0
    found = ratchet.get_job(handle.id)
    assert found is not None and found.status == JobStatus.SUCCEEDED


def test_streaming_needs_a_source_and_a_task(app: Flask) -> None:
    with pytest.raises(ValueError, match="from_iterable"):
        ratchet.streaming_batch("x").process(batch_item).start()
    with pytest.raises(TypeError, match="from_iterable"):
        ratchet.streaming_batch("x").add(batch_item, 1)
    with pytest.raises(ValueError, match="chunk size"):
        ratchet.streaming_batch("x").with_chunk_size(0)
