"""Refusals as a hot row keeps them: read defensively, one per node, capped."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from flask_ratchet.refusals import (
    MAX_REASON,
    MAX_REFUSALS,
    dead_letter_reason,
    read_refusals,
    with_refusal,
    write_refusals,
)


@pytest.mark.parametrize(
    "text",
    [None, "", "not json", "{}", '"a"', "[1, 2]", '[["a"]]', '[["a", 1]]', "[" * 100_000],
)
def test_what_ratchet_never_writes_reads_as_no_refusals(text: str | None) -> None:
    assert read_refusals(text) == []


def test_a_written_list_reads_back_and_keeps_the_well_formed_entries() -> None:
    refusals = [("node-a:1", "not registered"), ("node-b:2", "cannot be imported")]
    assert read_refusals(write_refusals(refusals)) == refusals
    assert read_refusals('[["n", "r"], 7, ["x"], ["m", "s"]]') == [("n", "r"), ("m", "s")]


def test_one_entry_per_node_the_newest_last_and_capped() -> None:
    refusals = with_refusal([("a", "old"), ("b", "b's")], "a", "new")
    assert refusals == [("b", "b's"), ("a", "new")]
    many: list[tuple[str, str]] = []
    for i in range(MAX_REFUSALS + 5):
        many = with_refusal(many, f"n{i}", "x" * (MAX_REASON + 50))
    assert len(many) == MAX_REFUSALS and many[-1][0] == f"n{MAX_REFUSALS + 4}"
    assert all(len(reason) == MAX_REASON for _, reason in many)
    huge = write_refusals([("n", "r")] * (MAX_REFUSALS * 3))
    assert len(read_refusals(huge)) == MAX_REFUSALS


def test_the_dead_letter_reason_names_the_task_the_grace_and_who_refused() -> None:
    since = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
    reason = dead_letter_reason("app:t", [("a:1", "not here"), ("b:2", "gone")], since, 600)
    assert reason == (
        "no worker ran task 'app:t' within 600s of the first refusal (2026-11-26 12:00:00 UTC); "
        "refused by a:1: not here; b:2: gone"
    )
