"""The one cursor codec of find_jobs and the console's lists."""

from __future__ import annotations

import uuid

import pytest

from flask_ratchet.paging import cursor, cursor_id, read_cursor


def test_a_cursor_reads_back_as_the_keys_it_was_made_of() -> None:
    job_id = uuid.uuid4()
    assert cursor_id(cursor("b", job_id), "b") == job_id
    assert read_cursor(cursor("p", 3, job_id), "p", int, uuid.UUID) == (3, job_id)


ANY_ID = uuid.UUID("0190f0a0-0000-7000-8000-00000000002a")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "b",
        "c.not-a-uuid",
        # Fixed ids: parallel test runs collect the same parameters in every process.
        f"c.{ANY_ID}",
        f"b.{ANY_ID}.extra",
        f"p.x.{ANY_ID}",
    ],
)
def test_a_cursor_of_another_list_or_none_at_all_is_refused(text: str) -> None:
    kind, types = ("p", (int, uuid.UUID)) if text.startswith("p") else ("b", (uuid.UUID,))
    with pytest.raises(ValueError, match="does not belong to this list"):
        read_cursor(text, kind, *types)
