"""A batch's follow-up reads its children's results (Celery's chord) on every database: in the
order they were added, a keyset page at a time, through ``JobContext.batch``; run by the testing
kit's ``run_jobs`` and by a real worker."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from flask import Flask

from flask_ratchet import JobStatus
from flask_ratchet.testing import run_jobs
from flask_ratchet.worker.runner import Worker
from tests.apps import db, ratchet
from tests.flow_tasks import batch_item, batch_of_step, gather, produce

#: Not in numeric order: the results come back in the order the children were added.
ITEMS = [7, 3, 11, 5, 2, 13, 8, 1, 9, 4]


def follow_up_of(batch_id: uuid.UUID) -> Any:
    """The ended follow-up job of a batch (there is one in these tests)."""
    (job,) = [j for j in ratchet.find_jobs(task=gather).items if j.depends_on == batch_id]
    return job


def test_the_store_pages_children_in_submission_order(app: Flask) -> None:
    batch = ratchet.enqueue_batch("paged")
    for i in ITEMS:
        batch.add(batch_item, i)
    handle = batch.submit()
    db.session.commit()
    run_jobs(app)
    store = ratchet.runtime.store.flows.batches
    pages = []
    after = None
    with ratchet.runtime.engine.connect() as conn:
        while True:
            page = store.children(conn, handle.id, after, 4)
            pages.append([c.result for c in page])
            if len(page) < 4:
                break
            after = page[-1].id
        ids = [c.id for c in store.children(conn, handle.id, None, 100)]
    assert pages == [ITEMS[:4], ITEMS[4:8], ITEMS[8:]]
    assert ids == sorted(ids)  # the keyset: ids in the order the children were added
    assert [ratchet.get_job(i).args for i in ids] == [[i] for i in ITEMS]  # type: ignore[union-attr]


def test_a_success_callback_gets_the_results_in_order(app: Flask) -> None:
    batch = ratchet.enqueue_batch("chord")
    for i in ITEMS:
        batch.add(batch_item, i)
    handle = batch.on_success(gather, "chord").submit()
    db.session.commit()
    run_jobs(app, raise_errors=True)
    done = follow_up_of(handle.id)
    assert done.status == JobStatus.SUCCEEDED
    assert done.result == {
        "label": "chord",
        "batch": str(handle.id),
        "total": len(ITEMS),
        "results": ITEMS,  # 10 children, 4 pages of 3
        "statuses": ["SUCCEEDED"] * len(ITEMS),
    }


def test_a_failure_callback_sees_which_children_failed(app: Flask) -> None:
    batch = ratchet.enqueue_batch("some fail")
    for i in ITEMS:
        batch.add(batch_item, i, 4)  # 8 and 4 fail for good
    handle = batch.on_failure(gather, "failed").submit()
    db.session.commit()
    run_jobs(app)
    done = follow_up_of(handle.id)
    assert done.result["results"] == [None if i % 4 == 0 else i for i in ITEMS]
    assert done.result["statuses"] == ["FAILED" if i % 4 == 0 else "SUCCEEDED" for i in ITEMS]


def test_a_streamed_batch_gives_its_results_in_the_order_it_read_them(app: Flask) -> None:
    streamed = ratchet.streaming_batch("streamed").from_iterable(iter(ITEMS)).process(batch_item)
    handle = streamed.with_chunk_size(3).on_success(gather, "streamed").start()
    db.session.commit()
    run_jobs(app, raise_errors=True)
    assert follow_up_of(handle.id).result["results"] == ITEMS


def test_a_job_that_follows_no_batch_sees_none(app: Flask) -> None:
    flow = ratchet.enqueue(produce, 1).then(batch_of_step).submit()
    alone = ratchet.enqueue_now(batch_of_step)
    db.session.commit()
    run_jobs(app, raise_errors=True)
    assert ratchet.get_job(flow.ids[-1]).result is False  # type: ignore[union-attr]
    assert ratchet.get_job(alone.id).result is False  # type: ignore[union-attr]


def test_a_worker_runs_the_callback_with_the_results(app: Flask) -> None:
    batch = ratchet.enqueue_batch("worker chord")
    for i in range(40):
        batch.add(batch_item, i)
    handle = batch.on_success(gather, "worker").submit()
    db.session.commit()
    worker = Worker(app, concurrency=4)
    thread = threading.Thread(target=worker.run, name="test-worker")
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not [j for j in ratchet.find_jobs(task=gather, status="SUCCEEDED").items]:
            assert time.monotonic() < deadline, "timed out waiting for the batch's callback"
            time.sleep(0.05)
    finally:
        worker.request_stop()
        thread.join(30)
    assert not thread.is_alive()
    assert follow_up_of(handle.id).result["results"] == list(range(40))
