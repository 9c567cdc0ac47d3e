"""Submission: options, keys, refusals and bulk inserts, on SQLite and PostgreSQL."""

from __future__ import annotations

import logging
import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask

from flask_ratchet import (
    Backoff,
    DuplicateBusinessKey,
    JobBuilder,
    JobStatus,
    PayloadError,
    PayloadTooLarge,
    Priority,
    TaskNotAllowed,
)
from flask_ratchet.ids import timestamp_of
from flask_ratchet.schema import job as job_table
from flask_ratchet.schema import job_queue
from tests.apps import add, charge, ratchet, unregistered
from tests.integration.helpers import count, finish, job_in, rows_written, stored_id


def test_enqueue_now_persists_a_pending_job_with_task_defaults(app: Flask) -> None:
    handle = ratchet.enqueue_now(add, 2, b=3)
    job = ratchet.get_job(handle.id)
    assert job is not None
    assert (job.status, job.task, job.args, job.kwargs) == (
        JobStatus.PENDING,
        "tests.apps:add",
        [2],
        {"b": 3},
    )
    assert (job.priority, job.attempts, job.max_retries) == (Priority.NORMAL, 0, 3)
    assert handle.created
    assert job.created_at <= datetime.now(UTC) + timedelta(seconds=1)
    assert abs((timestamp_of(handle.id) - job.created_at).total_seconds()) < 5


def _every_option(builder: JobBuilder) -> JobBuilder:
    """``builder`` with every option that has no uniqueness rule set."""
    return (
        builder.with_priority(Priority.CRITICAL)
        .with_max_retries(7)
        .with_backoff(Backoff.FIXED, timedelta(seconds=30))
        .with_timeout(timedelta(minutes=2))
        .with_tags("eu", "billing")
        .with_param("tenant", "acme")
    )


def test_registered_defaults_apply_and_every_option_is_stored(app: Flask) -> None:
    job = ratchet.get_job(ratchet.enqueue_now(charge, 7).id)
    assert job is not None
    assert (job.task, job.priority, job.max_retries, job.tags) == (
        "billing.charge",
        Priority.HIGH,
        5,
        ("billing",),
    )
    handle = (
        _every_option(ratchet.enqueue("billing.charge", 8))
        .with_resource("payment-api")
        .with_idempotency_key("req-1")
        .with_business_key("charge-8")
        .immediate()
        .submit()
    )
    job = ratchet.get_job(handle.id)
    assert job is not None
    assert job.priority == Priority.CRITICAL
    assert (job.max_retries, job.backoff, job.backoff_base, job.timeout) == (
        7,
        Backoff.FIXED,
        30.0,
        120.0,
    )
    assert job.tags == ("billing", "eu")
    assert job.params == {"tenant": "acme"}
    assert (job.resource, job.idempotency_key, job.business_key) == (
        "payment-api",
        "req-1",
        "charge-8",
    )
    with ratchet.runtime.engine.connect() as conn:
        stored = conn.exec_driver_sql(
            "SELECT j.priority, q.priority FROM ratchet_job j JOIN ratchet_job_queue q "
            "ON q.job_id = j.job_id WHERE j.idempotency_key = 'req-1'"
        ).one()
    assert tuple(stored) == (4, 4)  # CRITICAL is stored as its ordinal


def test_priority_ordinals_are_fixed() -> None:
    assert [(p.name, p.value) for p in Priority] == [
        ("LOWEST", 0),
        ("LOW", 1),
        ("NORMAL", 2),
        ("HIGH", 3),
        ("CRITICAL", 4),
    ]


def test_schedule_and_schedule_at_set_the_due_time(app: Flask) -> None:
    with ratchet.runtime.engine.connect() as conn:
        now = ratchet.runtime.store.now(conn)
    later = ratchet.get_job(ratchet.schedule(timedelta(minutes=30), add, 1, 1).submit().id)
    at = datetime(2027, 1, 1, tzinfo=UTC)
    fixed = ratchet.get_job(ratchet.schedule_at(at, add, 1, 1).submit().id)
    assert later is not None and fixed is not None
    assert abs((later.scheduled_at - now).total_seconds() - 1800) < 5
    assert fixed.scheduled_at == at
    assert ratchet.claim_due(10, "n") == []  # neither is due yet


def test_schedule_at_refuses_a_naive_datetime(app: Flask) -> None:
    with pytest.raises(ValueError, match="aware datetime"):
        ratchet.schedule_at(datetime(2027, 1, 1), add, 1, 1)


def refuse_closure() -> Any:
    def inner() -> None: ...

    return inner


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: ratchet.enqueue_now(lambda: None), TaskNotAllowed, "lambdas"),
        (lambda: ratchet.enqueue_now(refuse_closure()), TaskNotAllowed, "nested function"),
        (lambda: ratchet.enqueue_now(unregistered, 1), TaskNotAllowed, "@ratchet.task"),
        (lambda: ratchet.enqueue_now("no.such.task"), TaskNotAllowed, "no task is registered"),
        (lambda: ratchet.enqueue_now(add, datetime.now(UTC), 1), PayloadError, "argument 1"),
        (lambda: ratchet.enqueue_now(add, "x" * 200_000, 1), PayloadTooLarge, "bytes"),
        (
            lambda: ratchet.enqueue(add, 1, 2).with_param("when", object()).submit(),
            PayloadError,
            "params",
        ),
        (lambda: ratchet.enqueue(add, 1, 2).with_priority(9), ValueError, "priority"),
        (lambda: ratchet.enqueue(add, 1, 2).with_max_retries(-1), ValueError, "max_retries"),
        (lambda: ratchet.enqueue(add, 1, 2).with_business_key(""), ValueError, "business key"),
    ],
)
def test_bad_input_is_refused_and_nothing_is_written(
    app: Flask, call: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        call()
    assert rows_written() == dict.fromkeys(rows_written(), 0)


def test_allow_listed_module_functions_can_be_enqueued(database_url: str) -> None:
    from tests.apps import create_app, db

    app = create_app(database_url, RATCHET_ALLOWED_MODULES=["tests.apps"])
    with app.app_context():
        job = ratchet.get_job(ratchet.enqueue_now(unregistered, 1).id)
        assert job is not None and job.task == "tests.apps:unregistered"
        db.engine.dispose()


def test_idempotency_key_returns_the_original_and_writes_nothing(app: Flask) -> None:
    first = ratchet.enqueue(add, 1, 2).with_idempotency_key("hook-1").submit()
    before = rows_written()
    again = ratchet.enqueue(add, 5, 5).with_idempotency_key("hook-1").with_tags("x").submit()
    assert (again.id, again.created) == (first.id, False)
    assert rows_written() == before


def test_idempotency_key_is_unique_forever_even_after_completion(app: Flask) -> None:
    first = ratchet.enqueue(add, 1, 2).with_idempotency_key("pay-9").submit()
    assert ratchet.claim_due(1, "node-a")[0].job_id == first.id
    assert finish(first.id, JobStatus.SUCCEEDED)
    again = ratchet.enqueue(add, 1, 2).with_idempotency_key("pay-9").submit()
    assert (again.id, again.created) == (first.id, False)
    assert count("ratchet_job") == 1


def test_concurrent_idempotent_submissions_make_one_job(app: Flask) -> None:
    results = _race(app, lambda: ratchet.enqueue(add, 1, 2).with_idempotency_key("k").submit())
    handles = [r for r in results if not isinstance(r, BaseException)]
    assert len(handles) == 3, results
    assert len({h.id for h in handles}) == 1
    assert sorted(h.created for h in handles) == [False, False, True]
    assert count("ratchet_job") == 1


def test_business_key_is_unique_among_active_jobs(app: Flask) -> None:
    first = ratchet.enqueue(add, 1, 2).with_business_key("sync-1").submit()
    before = rows_written()
    with pytest.raises(DuplicateBusinessKey, match="sync-1"):
        ratchet.enqueue(add, 3, 4).with_business_key("sync-1").with_tags("t").submit()
    assert rows_written() == before
    ratchet.pause_job(first.id)  # PAUSED is active too
    with pytest.raises(DuplicateBusinessKey):
        ratchet.enqueue(add, 3, 4).with_business_key("sync-1").submit()


@pytest.mark.parametrize("ending", [JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELED])
def test_business_key_is_freed_when_the_job_ends(app: Flask, ending: JobStatus) -> None:
    job_in(ending, business_key="k-1")
    assert count("ratchet_business_key") == 0
    assert ratchet.enqueue(add, 1, 2).with_business_key("k-1").submit().created


def test_running_job_keeps_its_business_key(app: Flask) -> None:
    job_in(JobStatus.RUNNING, business_key="k-2")
    with pytest.raises(DuplicateBusinessKey):
        ratchet.enqueue(add, 1, 2).with_business_key("k-2").submit()


def test_retry_re_reserves_the_business_key(app: Flask) -> None:
    failed = job_in(JobStatus.FAILED, business_key="k-3")
    assert ratchet.retry_job(failed)
    with pytest.raises(DuplicateBusinessKey):
        ratchet.enqueue(add, 1, 2).with_business_key("k-3").submit()


def test_retry_is_refused_while_another_job_holds_the_key(app: Flask) -> None:
    failed = job_in(JobStatus.FAILED, business_key="k-4")
    other = ratchet.enqueue(add, 1, 2).with_business_key("k-4").submit()
    assert not ratchet.retry_job(failed)
    job = ratchet.get_job(failed)
    assert job is not None and job.status == JobStatus.FAILED
    assert count("ratchet_business_key") == 1
    assert ratchet.cancel_job(other.id) and ratchet.retry_job(failed)


def test_three_concurrent_submissions_with_one_business_key(app: Flask) -> None:
    results = _race(app, lambda: ratchet.enqueue(add, 1, 2).with_business_key("once").submit())
    ok = [r for r in results if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, DuplicateBusinessKey)]
    assert (len(ok), len(refused)) == (1, 2), results
    assert count("ratchet_job") == 1 and count("ratchet_business_key") == 1


def test_enqueue_many_is_one_all_or_nothing_transaction(app: Flask) -> None:
    builders = (ratchet.enqueue(add, i, i).with_tags("bulk") for i in range(1200))
    handles = ratchet.enqueue_many(builders)
    assert len(handles) == 1200 and len({h.id for h in handles}) == 1200
    assert count("ratchet_job_queue") == 1200 and count("ratchet_job_tag") == 1200
    before = rows_written()
    builders = [ratchet.enqueue(add, i, i).with_business_key(f"b{i % 3}") for i in range(4)]
    with pytest.raises(DuplicateBusinessKey, match="b0"):
        ratchet.enqueue_many(builders)
    assert rows_written() == before


def test_enqueue_many_stores_what_single_submissions_store(app: Flask) -> None:
    """Bulk (COPY on PostgreSQL) and single submissions write the same jobs."""
    at = datetime(2030, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)

    def builders() -> list[Any]:
        return [
            ratchet.enqueue(add, 1, b=2),
            _every_option(ratchet.enqueue("billing.charge", 8)),
            ratchet.schedule(timedelta(hours=2), add, 3, 4).with_resource("smtp"),
            ratchet.schedule_at(at, add, 5, 6),
            ratchet.enqueue(add, 7, 8).on_success(add),
        ]

    single_ids = [b.submit().id for b in builders()]
    bulk_ids = [h.id for h in ratchet.enqueue_many(builders())]
    # Every column of both rows, but the id and the times the submission itself sets.
    assert _rows(bulk_ids) == _rows(single_ids)
    singles = [ratchet.get_job(i) for i in single_ids]
    bulk = [ratchet.get_job(i) for i in bulk_ids]
    for single, many in zip(singles, bulk, strict=True):
        assert single is not None and many is not None
        assert many.id != single.id and many.created_at >= single.created_at
        wait = many.scheduled_at - many.created_at
        assert abs(wait - (single.scheduled_at - single.created_at)) < timedelta(seconds=5)
    assert bulk[3] is not None and bulk[3].scheduled_at == at
    assert count("ratchet_job_tag") == 4


def _rows(ids: list[Any]) -> list[dict[str, Any]]:
    """The cold and hot rows of ``ids`` in order, without the columns a submission fills in
    itself (ids and times)."""
    own = {"job_id", "created_at", "first_due_at", "scheduled_time", "updated_at"}
    out = []
    with ratchet.runtime.engine.connect() as conn:
        for job_id in ids:
            cold = (
                conn.execute(sa.select(job_table).where(job_table.c.job_id == job_id))
                .one()
                ._asdict()
            )
            hot = conn.execute(sa.select(job_queue).where(job_queue.c.job_id == job_id)).one()
            both = cold | {f"hot_{k}": v for k, v in hot._asdict().items()}
            out.append({k: v for k, v in both.items() if k.removeprefix("hot_") not in own})
    return out


@pytest.mark.parametrize("joined", [True, False], ids=["in-a-transaction", "on-its-own"])
def test_a_bulk_insert_the_database_refuses_raises_sqlalchemys_error_and_writes_nothing(
    app: Flask, joined: bool
) -> None:
    """Also on PostgreSQL's COPY path, in the caller's transaction or (autocommit) in a block of
    its own: two jobs for one recurring occurrence are refused by the unique (recurring_id,
    fire_time), as an IntegrityError the recurring firer handles, and nothing is written."""
    at = datetime(2030, 1, 1, tzinfo=UTC)
    jobs = [
        replace(ratchet.enqueue(add, i, i).with_tags("t").build(), recurring_id="r", fire_time=at)
        for i in range(2)
    ]
    runtime = ratchet.runtime
    own = runtime.store.single_statement(runtime.engine)
    with pytest.raises(sa.exc.IntegrityError), ratchet.transaction() if joined else own as conn:
        runtime.store.jobs.insert_jobs(conn, jobs)
    assert rows_written() == dict.fromkeys(rows_written(), 0)


def test_a_builder_never_submitted_logs_a_warning(app: Flask, caplog: Any) -> None:
    with caplog.at_level(logging.WARNING, logger="flask_ratchet"):
        ratchet.enqueue(add, 1, 2)
        import gc

        gc.collect()
    assert "tests.apps:add was built but never submitted" in caplog.text


def _race(app: Flask, submit: Any, n: int = 3) -> list[Any]:
    """Run ``submit`` in ``n`` threads at once, each in its own app context and transaction."""
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n

    def run(i: int) -> None:
        with app.app_context():
            barrier.wait()
            try:
                results[i] = submit()
            except BaseException as exc:
                results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_database_now_is_used_for_due_times(app: Flask, dialect: str) -> None:
    handle = ratchet.enqueue_now(add, 1, 1)
    with ratchet.runtime.engine.connect() as conn:
        db_now = ratchet.runtime.store.now(conn)
        due = conn.execute(
            sa.text("SELECT scheduled_time FROM ratchet_job_queue WHERE job_id = :id"),
            {"id": stored_id(handle.id, dialect)},
        ).scalar_one()
    assert due is not None and db_now is not None
