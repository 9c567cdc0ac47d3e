"""``BatchContext``: a follow-up reads its batch's children a keyset page at a time, only as far
as it iterates (a 100,000-child batch is never held at once). The pages come from a stand-in for
the worker's side, which serves them from a list and records each request; the SQL behind the
real one runs on every database in tests/integration/test_batch_results.py."""

from __future__ import annotations

import uuid
from itertools import islice
from typing import Any

import pytest

from flask_ratchet import BatchChild, BatchContext, BatchProgress, JobContext, JobStatus
from flask_ratchet.ids import uuid7

TOTAL = 100_000


class Pages:
    """The worker's side of a context, over children kept in a list (ids in order)."""

    def __init__(self, total: int) -> None:
        self.children = [BatchChild(uuid7(), JobStatus.SUCCEEDED, i) for i in range(total)]
        self.index = {c.id: n for n, c in enumerate(self.children)}
        self.requests: list[tuple[uuid.UUID | None, int]] = []
        self.batch = BatchProgress(uuid7(), "big", total, total, 0, finished=True)

    def batch_children(
        self, batch_id: uuid.UUID, after: uuid.UUID | None, limit: int
    ) -> list[BatchChild]:
        assert batch_id == self.batch.batch_id
        self.requests.append((after, limit))
        start = 0 if after is None else self.index[after] + 1
        return self.children[start : start + limit]

    def batch_of(self, batch_id: uuid.UUID) -> BatchProgress | None:
        return self.batch if batch_id == self.batch.batch_id else None

    def report_progress(self, job_id: uuid.UUID, progress: dict[str, Any]) -> None: ...
    def still_running(self, job_id: uuid.UUID) -> bool:
        return True

    def signal_payload_of(self, job_id: uuid.UUID) -> Any:
        return None

    def result_of(self, job_id: uuid.UUID) -> Any:
        return None


def test_only_the_pages_iterated_are_read() -> None:
    pages = Pages(TOTAL)
    batch = BatchContext(pages.batch, pages)
    assert list(islice(batch.results(), 3)) == [0, 1, 2]
    assert pages.requests == [(None, 500)]  # one page of 500, not 100,000 rows
    assert list(islice(batch.results(page_size=1000), 1500)) == list(range(1500))
    assert len(pages.requests) == 1 + 2


def test_the_whole_iteration_is_every_child_in_order_by_keyset_pages() -> None:
    pages = Pages(TOTAL)
    results = BatchContext(pages.batch, pages).results(page_size=10_000)
    assert sum(results) == sum(range(TOTAL))
    assert len(pages.requests) == 11  # ten full pages, and the empty one that ends it
    afters = [after for after, _ in pages.requests]
    assert afters[1:] == [pages.children[n * 10_000 - 1].id for n in range(1, 11)]


def test_page_sizes_are_checked() -> None:
    pages = Pages(3)
    batch = BatchContext(pages.batch, pages)
    for bad in (0, 10_001):
        with pytest.raises(ValueError, match="from 1 to 10000"):
            next(batch.results(page_size=bad))
    with pytest.raises(TypeError):
        next(batch.children(page_size=True))
    assert list(batch.results(page_size=1)) == [0, 1, 2]


def test_a_job_context_finds_its_batch_once_and_none_elsewhere() -> None:
    pages = Pages(2)
    follow_up = JobContext(uuid7(), "t", 1, {}, depends_on=pages.batch.batch_id)
    follow_up._supervisor = pages
    found = follow_up.batch
    assert found is not None and found.id == pages.batch.batch_id
    assert follow_up.batch is found  # read once
    step = JobContext(uuid7(), "t", 1, {}, depends_on=uuid7(), _supervisor=pages)
    assert step.batch is None  # it follows a job that is no batch
    assert JobContext(uuid7(), "t", 1, {}).batch is None
