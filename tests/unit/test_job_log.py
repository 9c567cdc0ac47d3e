"""What one attempt's log keeps: lines cut and masked, at most a byte budget in all, and a note
of what was dropped."""

from __future__ import annotations

import logging
import uuid

from flask_ratchet.context import (
    MAX_LOG_BYTES,
    MAX_LOG_LINE,
    MAX_LOG_LINES,
    CaptureHandler,
    JobContext,
    LogLine,
)


def logged(*messages: str) -> list[LogLine]:
    """The lines one attempt stores after logging ``messages`` through the job's logger."""
    ctx = JobContext(job_id=uuid.uuid4(), task="t", attempt=1, params={})
    handler = CaptureHandler()
    logger = ctx.logger.logger
    logger.addHandler(handler)
    try:
        with ctx.bound():
            for message in messages:
                ctx.logger.warning("%s", message)
    finally:
        logger.removeHandler(handler)
    return ctx.take_lines()


def stored_bytes(lines: list[LogLine]) -> int:
    return sum(len(line.message.encode()) for line in lines)


def test_an_attempt_stores_at_most_its_byte_budget() -> None:
    lines = logged(*(f"{i} " + "é" * 5000 for i in range(MAX_LOG_LINES + 1)))
    assert stored_bytes(lines) <= MAX_LOG_BYTES
    kept, note = lines[:-1], lines[-1]
    assert kept and all(len(line.message) <= MAX_LOG_LINE for line in kept)
    assert [line.message.split()[0] for line in kept] == [str(i) for i in range(len(kept))]
    assert note.level == "WARNING"
    assert note.message.startswith(f"{MAX_LOG_LINES + 1 - len(kept)} more log lines were dropped")


def test_the_line_count_limit_still_holds() -> None:
    lines = logged(*("short" for _ in range(MAX_LOG_LINES + 5)))
    assert len(lines) == MAX_LOG_LINES + 1
    assert lines[-1].message.startswith("5 more log lines were dropped")


def test_a_huge_line_is_cut_and_its_secrets_masked() -> None:
    (line,) = logged("connect postgresql://u:secret@h/db password=hunter2 " + "x" * 10_000_000)
    assert len(line.message) <= MAX_LOG_LINE and line.message.endswith("more]")
    assert line.message.startswith("connect postgresql://u:***@h/db password=***")


def test_nul_characters_are_replaced() -> None:
    (line,) = logged("a\x00b")
    assert line.message == "a\ufffdb"


def test_the_budget_is_per_attempt() -> None:
    ctx = JobContext(job_id=uuid.uuid4(), task="t", attempt=1, params={})
    record = logging.LogRecord("t", logging.INFO, __file__, 1, "y" * 1500, None, None)
    for _ in range(100):
        ctx.record(record)
    first = ctx.take_lines()
    ctx.record(record)
    assert first[-1].message.endswith("KiB of log text)")
    assert [line.message for line in ctx.take_lines()] == ["y" * 1500]


def test_lines_written_while_the_attempt_runs_count_towards_its_limits() -> None:
    ctx = JobContext(job_id=uuid.uuid4(), task="t", attempt=1, params={})
    handler = CaptureHandler()
    logger = ctx.logger.logger
    logger.addHandler(handler)
    early: list[LogLine] = []
    try:
        with ctx.bound():
            for i in range(MAX_LOG_LINES + 5):
                ctx.logger.warning("line %d", i)
                if i % 100 == 99:  # the worker's early writes, every few seconds
                    early += ctx.take_lines(final=False)
            unstored = ctx.take_lines(final=False)
            ctx.give_back_lines(unstored)  # the database did not take them: kept, in order
            ctx.logger.warning("after")
    finally:
        logger.removeHandler(handler)
    last = ctx.take_lines()
    kept = [line.message for line in [*early, *last]]
    assert kept[:-1] == [f"line {i}" for i in range(MAX_LOG_LINES)]
    assert kept[-1].startswith("6 more log lines were dropped")  # five, and "after"
    # The next attempt starts with its limits afresh.
    with ctx.bound():
        logger.addHandler(handler)
        ctx.logger.warning("next attempt")
        logger.removeHandler(handler)
    assert [line.message for line in ctx.take_lines()] == ["next attempt"]
