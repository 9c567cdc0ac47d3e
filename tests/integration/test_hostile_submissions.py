"""Hostile and careless values through every public submission path, on SQLite and PostgreSQL.

Each one is either stored as given or refused before the first statement, with a ``ValueError``
naming the field: the database is unchanged and the caller's transaction still usable.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flask_ratchet import (
    Backoff,
    CronError,
    DuplicateBusinessKey,
    InvalidOption,
    PayloadError,
    PayloadTooLarge,
)
from flask_ratchet.payload import MAX_DEPTH
from flask_ratchet.schema import metadata
from tests.apps import Order, add, db, ratchet, report, unregistered

SURROGATE = "\ud800"
NUL = "a\x00b"
NAN = float("nan")
CRON = "0 0 * * * ?"


def nested(depth: int) -> Any:
    """A list inside a list, ``depth`` levels deep."""
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def ratchet_rows() -> dict[str, int]:
    """Committed rows in every ratchet table, in one statement."""
    counts = " UNION ALL ".join(f"SELECT '{t}', count(*) FROM {t}" for t in metadata.tables)
    with db.engine.connect() as conn:
        return {name: int(n) for name, n in conn.execute(sa.text(counts))}


def half_written_jobs() -> int:
    """Jobs not ended without a hot row, and hot rows without a job."""
    with db.engine.connect() as conn:
        return int(
            conn.execute(
                sa.text(
                    "SELECT (SELECT count(*) FROM ratchet_job j WHERE terminal_status IS NULL"
                    " AND NOT EXISTS (SELECT 1 FROM ratchet_job_queue q WHERE q.job_id = j.job_id))"
                    " + (SELECT count(*) FROM ratchet_job_queue q WHERE NOT EXISTS"
                    " (SELECT 1 FROM ratchet_job j WHERE j.job_id = q.job_id))"
                )
            ).scalar_one()
        )


def orders() -> int:
    with db.engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(Order)).scalar_one())


# (the call, the error, what its message must name); every call is refused before it writes.
REFUSED: list[tuple[str, Callable[[], Any], type[Exception], str]] = [
    # lone surrogates, in values and keys at any depth, and in every text field
    (
        "surrogate argument",
        lambda: ratchet.enqueue_now(add, SURROGATE, 1),
        PayloadError,
        "argument 1",
    ),
    (
        "surrogate deep key",
        lambda: ratchet.enqueue_now(add, 1, [{"a": {SURROGATE: 1}}]),
        PayloadError,
        "argument 2",
    ),
    (
        "surrogate keyword name",
        lambda: ratchet.enqueue_now(add, 1, **{SURROGATE: 2}),
        PayloadError,
        "keyword argument",
    ),
    (
        "surrogate param",
        lambda: ratchet.enqueue(add, 1, 2).with_param("k", [SURROGATE]).submit(),
        PayloadError,
        "params",
    ),
    (
        "surrogate param key",
        lambda: ratchet.enqueue(add, 1, 2).with_param(SURROGATE, 1).submit(),
        PayloadError,
        "params",
    ),
    (
        "surrogate tag",
        lambda: ratchet.enqueue(add, 1, 2).with_tags("ok", SURROGATE).submit(),
        InvalidOption,
        "tag",
    ),
    (
        "surrogate business key",
        lambda: ratchet.enqueue(add, 1, 2).with_business_key(SURROGATE).submit(),
        InvalidOption,
        "business key",
    ),
    (
        "surrogate idempotency key",
        lambda: ratchet.enqueue(add, 1, 2).with_idempotency_key(SURROGATE).submit(),
        InvalidOption,
        "idempotency key",
    ),
    (
        "surrogate resource",
        lambda: ratchet.enqueue(add, 1, 2).with_resource(SURROGATE).submit(),
        InvalidOption,
        "resource",
    ),
    (
        "surrogate batch name",
        lambda: ratchet.enqueue_batch(SURROGATE).add(add, 1, 2).submit(),
        InvalidOption,
        "batch name",
    ),
    (
        "surrogate batch child",
        lambda: ratchet.enqueue_batch("b").add(add, SURROGATE, 2).submit(),
        PayloadError,
        "argument 1",
    ),
    (
        "surrogate streaming item",
        lambda: ratchet.streaming_batch("s").from_iterable([1, SURROGATE]).process(add).start(),
        PayloadError,
        "argument 1",
    ),
    (
        "surrogate chain step",
        lambda: ratchet.enqueue(add, 1, 2).then(add, SURROGATE, 2).submit(),
        PayloadError,
        "argument 1",
    ),
    (
        "surrogate follow-up",
        lambda: ratchet.enqueue_batch("b").add(add, 1, 2).on_success(report, SURROGATE).submit(),
        PayloadError,
        "argument 1",
    ),
    (
        "surrogate recurring id",
        lambda: (
            ratchet.schedule_recurring(CRON, "UTC", add, 1, 2).with_business_key(SURROGATE).submit()
        ),
        InvalidOption,
        "recurring id",
    ),
    (
        "surrogate recurring name",
        lambda: ratchet.schedule_recurring(CRON, "UTC", add, 1, 2).with_name(SURROGATE).submit(),
        InvalidOption,
        "recurring name",
    ),
    (
        "surrogate declared recurring",
        lambda: ratchet.recurring(CRON, id=SURROGATE),
        InvalidOption,
        "recurring id",
    ),
    (
        "surrogate resource limit",
        lambda: ratchet.configure_resource(SURROGATE, 1),
        InvalidOption,
        "resource name",
    ),
    (
        "surrogate task name",
        lambda: ratchet.task(name=SURROGATE)(unregistered),
        InvalidOption,
        "task name",
    ),
    # NUL in text fields (PostgreSQL refuses it, SQLite would store it)
    ("NUL tag", lambda: ratchet.enqueue(add, 1, 2).with_tags(NUL).submit(), InvalidOption, "tag"),
    (
        "NUL business key",
        lambda: ratchet.enqueue(add, 1, 2).with_business_key(NUL).submit(),
        InvalidOption,
        "business key",
    ),
    (
        "NUL idempotency key",
        lambda: ratchet.enqueue(add, 1, 2).with_idempotency_key(NUL).submit(),
        InvalidOption,
        "idempotency key",
    ),
    (
        "NUL resource",
        lambda: ratchet.enqueue(add, 1, 2).with_resource(NUL).submit(),
        InvalidOption,
        "resource",
    ),
    (
        "NUL batch name",
        lambda: ratchet.enqueue_batch(NUL).add(add, 1, 2).submit(),
        InvalidOption,
        "batch name",
    ),
    (
        "NUL batch tag",
        lambda: ratchet.enqueue_batch("b").with_tags(NUL).add(add, 1, 2).submit(),
        InvalidOption,
        "tag",
    ),
    (
        "NUL recurring id",
        lambda: ratchet.schedule_recurring(CRON, "UTC", add, 1, 2).with_business_key(NUL).submit(),
        InvalidOption,
        "recurring id",
    ),
    (
        "NUL recurring tag",
        lambda: (
            ratchet.schedule_recurring(CRON, "UTC", add, 1, 2).with_options(tags=[NUL]).submit()
        ),
        InvalidOption,
        "tag",
    ),
    (
        "NUL resource limit",
        lambda: ratchet.configure_resource(NUL, 1),
        InvalidOption,
        "resource name",
    ),
    ("NUL task name", lambda: ratchet.task(name=NUL)(unregistered), InvalidOption, "task name"),
    # durations and due times
    ("NaN delay", lambda: ratchet.schedule(NAN, add, 1, 2).submit(), InvalidOption, "delay"),
    (
        "infinite delay",
        lambda: ratchet.schedule(float("inf"), add, 1, 2).submit(),
        InvalidOption,
        "delay",
    ),
    ("huge delay", lambda: ratchet.schedule(10**12, add, 1, 2).submit(), InvalidOption, "delay"),
    (
        "timedelta.max delay",
        lambda: ratchet.schedule(timedelta.max, add, 1, 2).submit(),
        InvalidOption,
        "delay",
    ),
    (
        "NaN timeout",
        lambda: ratchet.enqueue(add, 1, 2).with_timeout(NAN).submit(),
        InvalidOption,
        "timeout",
    ),
    (
        "huge timeout",
        lambda: ratchet.enqueue(add, 1, 2).with_timeout(1e300).submit(),
        InvalidOption,
        "timeout",
    ),
    (
        "NaN backoff base",
        lambda: ratchet.enqueue(add, 1, 2).with_backoff(Backoff.FIXED, NAN).submit(),
        InvalidOption,
        "backoff_base",
    ),
    (
        "infinite backoff base",
        lambda: (
            ratchet.enqueue_batch("b")
            .with_options(backoff_base=float("inf"))
            .add(add, 1, 2)
            .submit()
        ),
        InvalidOption,
        "backoff_base",
    ),
    ("NaN task timeout", lambda: ratchet.task(timeout=NAN)(unregistered), InvalidOption, "timeout"),
    (
        "NaN resource delay",
        lambda: ratchet.configure_resource("api", 1, NAN),
        InvalidOption,
        "retry_delay",
    ),
    (
        "huge resource delay",
        lambda: ratchet.configure_resource("api", 1, 1e300),
        InvalidOption,
        "retry_delay",
    ),
    (
        "due in the year 9999",
        lambda: ratchet.schedule_at(datetime(9999, 12, 31, tzinfo=UTC), add, 1, 2).submit(),
        InvalidOption,
        "schedule_at",
    ),
    (
        "due past the calendar",
        lambda: ratchet.schedule_at(
            datetime.max.replace(tzinfo=timezone(-timedelta(hours=5))), add, 1, 2
        ).submit(),
        InvalidOption,
        "schedule_at",
    ),
    (
        "due before the calendar",
        lambda: ratchet.schedule_at(
            datetime.min.replace(tzinfo=timezone(timedelta(hours=5))), add, 1, 2
        ).submit(),
        InvalidOption,
        "schedule_at",
    ),
    # booleans as numbers, and nesting
    (
        "True as a priority",
        lambda: ratchet.enqueue(add, 1, 2).with_priority(True).submit(),
        InvalidOption,
        "priority",
    ),
    (
        "False as a recurring priority",
        lambda: ratchet.schedule_recurring(CRON, "UTC", add, 1, 2).with_priority(False).submit(),
        InvalidOption,
        "priority",
    ),
    (
        "nesting past the limit",
        lambda: ratchet.enqueue_now(add, nested(MAX_DEPTH + 1), 1),
        PayloadError,
        "argument 1",
    ),
    (
        "nesting past the recursion limit",
        lambda: ratchet.enqueue_now(add, 1, nested(100_000)),
        PayloadError,
        "argument 2",
    ),
    (
        "huge failure count",
        lambda: ratchet.enqueue_batch("b").when_failure_count(10**5000, report),
        InvalidOption,
        "failure count",
    ),
    (
        "nested params",
        lambda: ratchet.enqueue(add, 1, 2).with_param("k", nested(MAX_DEPTH)).submit(),
        PayloadError,
        "params",
    ),
    (
        "nested streaming params",
        lambda: (
            ratchet.streaming_batch("s")
            .with_param("k", nested(MAX_DEPTH))
            .from_iterable([1])
            .process(add)
            .start()
        ),
        PayloadError,
        "params",
    ),
]


@pytest.mark.parametrize(
    ("call", "error", "field"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED]
)
def test_a_hostile_value_is_refused_before_anything_is_written(
    app: Flask, call: Callable[[], Any], error: type[Exception], field: str
) -> None:
    before = ratchet_rows()
    with pytest.raises(error, match=field) as refused:
        call()
    assert isinstance(refused.value, ValueError)
    assert ratchet_rows() == before


@pytest.mark.parametrize(
    ("call", "error", "field"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED]
)
def test_a_refusal_inside_a_request_leaves_its_transaction_usable(
    app: Flask, call: Callable[[], Any], error: type[Exception], field: str
) -> None:
    before = ratchet_rows()
    with app.test_request_context("/orders", method="POST"):
        db.session.add(Order(item="book"))
        db.session.flush()
        with pytest.raises(error, match=field):
            call()
        db.session.add(Order(item="pen"))
        db.session.commit()  # on PostgreSQL, a failed statement would have aborted this
    assert orders() == 2
    assert ratchet_rows() == before


@pytest.mark.parametrize("delay", [NAN, 1e300])
def test_replace_refuses_a_bad_delay_and_keeps_the_old_job(app: Flask, delay: float) -> None:
    job_id = ratchet.enqueue_now(add, 1, 2).id
    before = ratchet_rows()
    with pytest.raises(InvalidOption, match="delay"):
        ratchet.replace(job_id, delay, add, 3, 4)
    assert ratchet_rows() == before
    job = ratchet.get_job(job_id)
    assert job is not None and job.status == "PENDING"


def test_the_edges_of_what_is_allowed_are_stored_and_read_back(app: Flask) -> None:
    args = [nested(MAX_DEPTH), {"k\x00ey": "v\x00alue"}, 10**300, -0.5]
    latest = datetime(9999, 1, 1, tzinfo=UTC)
    handle = (
        ratchet.schedule_at(latest, add, *args)
        .with_priority(4)
        .with_timeout(timedelta(days=36_500))
        .with_backoff(Backoff.FIXED, timedelta(days=36_500))
        .with_param("deep", nested(MAX_DEPTH - 1))
        .with_tags("é" * 100)
        .submit()
    )
    job = ratchet.get_job(handle.id)
    assert job is not None
    assert job.args == args  # NUL inside JSON is the plain-text escape \u0000 on both databases
    assert job.params == {"deep": nested(MAX_DEPTH - 1)}
    assert job.scheduled_at == latest
    assert job.timeout == job.backoff_base == 36_500 * 86_400
    assert ratchet.schedule(timedelta(days=36_500), add, 1, 2).submit().created


# -- every path, arbitrary values ------------------------------------------------------------------

#: What a submission may raise: each a documented refusal (or a repeat of an active business key).
DOCUMENTED = (PayloadError, PayloadTooLarge, InvalidOption, CronError, DuplicateBusinessKey)

Draw = Callable[[st.SearchStrategy[Any]], Any]

hostile_text = st.one_of(
    st.text(max_size=12),
    st.text(st.characters(categories=["Cs", "Cc", "Lo"]), max_size=4),
    st.sampled_from(["", SURROGATE, NUL, "x" * 300, "ok", "é"]),
)
numbers = st.one_of(
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(),
    st.timedeltas(),
    st.sampled_from([NAN, float("inf"), -0.0, 1e300, 36_500 * 86_400, 10**5000]),
)
json_ish = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), hostile_text),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(hostile_text, inner, max_size=3)
    ),
    max_leaves=8,
) | st.sampled_from([nested(MAX_DEPTH), nested(MAX_DEPTH + 1), nested(5000)])
due_times = st.datetimes(
    timezones=st.one_of(
        st.none(),
        st.builds(
            timezone, st.timedeltas(min_value=-timedelta(hours=23), max_value=timedelta(hours=23))
        ),
    )
)


def submission(draw: Draw) -> Callable[[], Any]:
    """A call to one public submission path with drawn values (some drawn as it runs)."""
    args = draw(st.lists(json_ish, max_size=3))
    text, number = draw(hostile_text), draw(numbers)
    path = draw(st.sampled_from(sorted(_PATHS)))
    return _PATHS[path](args, text, number, draw)


def _options(builder: Any, text: str, number: Any, draw: Draw) -> Any:
    setter = draw(
        st.sampled_from(
            ["priority", "max_retries", "backoff", "timeout", "tags", "param", "resource"]
        )
    )
    if setter == "priority":
        return builder.with_priority(number)
    if setter == "max_retries":
        return builder.with_max_retries(number)
    if setter == "backoff":
        return builder.with_backoff(Backoff.FIXED, number)
    if setter == "timeout":
        return builder.with_timeout(number)
    if setter == "tags":
        return builder.with_tags(text)
    if setter == "param":
        return builder.with_param(text, draw(json_ish))
    return builder.with_resource(text)


def _job(args: list[Any], text: str, number: Any, draw: Draw) -> Callable[[], Any]:
    def submit() -> Any:
        builder = _options(ratchet.enqueue(add, *args), text, number, draw)
        key = draw(st.sampled_from(["idempotency", "business", None]))
        if key == "idempotency":
            builder.with_idempotency_key(text)
        elif key == "business":
            builder.with_business_key(text)
        return builder.submit()

    return submit


_PATHS: dict[str, Callable[[list[Any], str, Any, Draw], Callable[[], Any]]] = {
    "enqueue_now": lambda args, text, number, draw: (
        lambda: ratchet.enqueue_now(add, *args, **{text: 1})
    ),
    "builder": _job,
    "schedule": lambda args, text, number, draw: (
        lambda: ratchet.schedule(number, add, *args).submit()
    ),
    "schedule_at": lambda args, text, number, draw: (
        lambda: ratchet.schedule_at(draw(due_times), add, *args).submit()
    ),
    "enqueue_many": lambda args, text, number, draw: (
        lambda: ratchet.enqueue_many(
            [ratchet.enqueue(add, a) for a in args]
            + [_options(ratchet.enqueue(add), text, number, draw)]
        )
    ),
    "chain": lambda args, text, number, draw: (
        lambda: _options(ratchet.enqueue(add, 1), text, number, draw).then(add, *args).submit()
    ),
    "batch": lambda args, text, number, draw: (
        lambda: (
            _options(ratchet.enqueue_batch(text), text, number, draw)
            .add(add, *args)
            .on_failure(report, *args)
            .when_failure_count(number, report)
            .submit()
        )
    ),
    "streaming batch": lambda args, text, number, draw: (
        lambda: (
            _options(ratchet.streaming_batch(text), text, number, draw)
            .from_iterable(args)
            .process(add)
            .start()
        )
    ),
    "recurring": lambda args, text, number, draw: (
        lambda: (
            _options(ratchet.schedule_recurring(CRON, "UTC", add, *args), text, number, draw)
            .with_business_key(text)
            .with_name(text)
            .submit()
        )
    ),
    "resource": lambda args, text, number, draw: (
        lambda: ratchet.configure_resource(text, 2, number)
    ),
}


@pytest.mark.slow  # hundreds of examples
@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_any_submission_is_stored_whole_or_refused_with_a_documented_error(
    app: Flask, data: st.DataObject
) -> None:
    before = ratchet_rows()
    try:
        submission(data.draw)()
    except DOCUMENTED as refused:
        assert isinstance(refused, ValueError | DuplicateBusinessKey)
        assert ratchet_rows() == before
        return
    # No partial job: a job that has not ended has its hot row, and no hot row lacks its job.
    assert half_written_jobs() == 0
    # What was written reads back through the public reader.
    page = ratchet.find_jobs(limit=1000)
    assert len(page.items) == min(ratchet_rows()["ratchet_job"], 1000)
    for job in page.items:
        assert json.loads(json.dumps(job.args)) == job.args
