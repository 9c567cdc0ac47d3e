from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from flask_ratchet import Backoff, DoNotRetry, InvalidOption, JobContext, Retry
from flask_ratchet.ids import uuid7
from flask_ratchet.retry import (
    MAX_DELAY,
    NO_RULES,
    Decision,
    RetryRules,
    backoff_delay,
    decide,
    describe,
    do_not_retry,
    format_traceback,
    is_permanent,
    retry_rules,
    sanitize,
)
from flask_ratchet.store.types import ClaimedJob, Outcome
from flask_ratchet.worker.runs import JobTimeout, Run, failed


@pytest.mark.parametrize(
    ("policy", "attempts", "expected"),
    [
        (Backoff.NONE, [1, 2, 3], [0, 0, 0]),
        (Backoff.FIXED, [1, 2, 5], [10, 10, 10]),
        (Backoff.EXPONENTIAL, [1, 2, 3, 4], [10, 20, 40, 80]),
    ],
)
def test_backoff_policies(policy: Backoff, attempts: list[int], expected: list[float]) -> None:
    assert [backoff_delay(policy, 10, a) for a in attempts] == expected


def test_exponential_is_capped_at_a_day() -> None:
    assert backoff_delay(Backoff.EXPONENTIAL, 10, 30) == MAX_DELAY
    assert backoff_delay(Backoff.EXPONENTIAL, 10, 10_000) == MAX_DELAY
    assert backoff_delay(Backoff.FIXED, 10 * MAX_DELAY, 1) == MAX_DELAY


def test_jitter_stays_between_half_and_all_of_the_exponential_delay() -> None:
    rng = random.Random(7)
    delays = [backoff_delay(Backoff.JITTER, 10, 3, rng) for _ in range(200)]
    assert all(20 <= d <= 40 for d in delays)
    assert len({round(d, 3) for d in delays}) > 100


def test_max_retries_n_means_n_plus_one_runs() -> None:
    error = RuntimeError("x")
    runs = [decide(error, attempt, 2, Backoff.FIXED, 5) for attempt in (1, 2, 3)]
    assert [d.retry for d in runs] == [True, True, False]
    assert runs[0].delay == 5
    assert not decide(error, 1, 0, Backoff.FIXED, 5).retry


@do_not_retry
class InvalidInvoice(ValueError):
    pass


def test_do_not_retry_through_the_cause_chain() -> None:
    assert is_permanent(DoNotRetry("no"))
    assert is_permanent(InvalidInvoice("bad"))
    try:
        try:
            raise DoNotRetry("card declined")
        except DoNotRetry as inner:
            raise RuntimeError("charge failed") from inner
    except RuntimeError as outer:
        assert is_permanent(outer)
        assert not decide(outer, 1, 5, Backoff.FIXED, 1).retry
    try:
        try:
            raise InvalidInvoice("bad")
        except InvalidInvoice:
            raise KeyError("while handling") from None  # suppressed context is still the context
    except KeyError as outer:
        assert is_permanent(outer)
    assert not is_permanent(RuntimeError("plain"))


def test_cyclic_chains_terminate() -> None:
    a, b = RuntimeError("a"), RuntimeError("b")
    a.__cause__, b.__cause__ = b, a
    assert not is_permanent(a)


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("connect postgresql://app:s3cret@db:5432/x failed", "postgresql://app:***@db:5432/x"),
        ("login with password=hunter2 refused", "password=***"),
        ("token: abc.def.ghi expired", "token: ***"),
        ('{"api_key": "k-123"}', '"api_key": "***"'),
        ("DB_PASSWORD='p w' bad", "DB_PASSWORD='***'"),
    ],
)
def test_sanitize_redacts_credentials(raw: str, clean: str) -> None:
    out = sanitize(raw)
    assert clean in out
    assert "s3cret" not in out and "hunter2" not in out and "k-123" not in out


def test_sanitize_truncates() -> None:
    out = sanitize("x" * 5000, limit=100)
    assert len(out) <= 100 and out.endswith("more]")


def test_describe_and_traceback_are_sanitized() -> None:
    try:
        raise ConnectionError("redis://u:pw@cache failed, token=zzz")
    except ConnectionError as exc:
        assert describe(exc) == "ConnectionError: redis://u:***@cache failed, token=***"
        tb = format_traceback(exc)
        assert "test_describe_and_traceback_are_sanitized" in tb and "pw@" not in tb


def test_sanitize_replaces_nul_characters() -> None:
    assert sanitize("a\x00b") == "a\ufffdb"


# -- a task's retry rules, and a retry a task asks for -------------------------------------------


def test_retry_on_lets_only_the_listed_exceptions_retry() -> None:
    rules = retry_rules({"retry_on": (ConnectionError, TimeoutError)})
    assert decide(ConnectionResetError("x"), 1, 3, Backoff.FIXED, 5, rules).retry  # a subclass
    assert decide(TimeoutError("x"), 1, 3, Backoff.FIXED, 5, rules).retry
    assert not decide(ValueError("x"), 1, 3, Backoff.FIXED, 5, rules).retry
    # The exception raised decides, as Celery's autoretry_for: not what it was raised from.
    try:
        try:
            raise ConnectionError("down")
        except ConnectionError as exc:
            raise ValueError("bad answer") from exc
    except ValueError as wrapped:
        assert not decide(wrapped, 1, 3, Backoff.FIXED, 5, rules).retry
    single = retry_rules({"retry_on": ConnectionError})  # one class is a tuple of one
    assert single.retry_on == (ConnectionError,)


def test_dont_retry_on_stops_retries_from_anywhere_in_the_chain_and_wins() -> None:
    rules = retry_rules({"retry_on": (RuntimeError,), "dont_retry_on": [PermissionError]})
    try:
        try:
            raise PermissionError("no")
        except PermissionError as exc:
            raise RuntimeError("failed") from exc
    except RuntimeError as wrapped:
        assert not decide(wrapped, 1, 3, Backoff.FIXED, 5, rules).retry
    assert decide(RuntimeError("x"), 1, 3, Backoff.FIXED, 5, rules).retry
    assert not decide(PermissionError("x"), 1, 3, Backoff.FIXED, 5, rules).retry


def test_max_backoff_caps_the_wait_and_jitter_takes_up_to_half_off() -> None:
    capped = retry_rules({"max_backoff": timedelta(minutes=1)})
    assert [capped.delay(Backoff.EXPONENTIAL, 10, a) for a in (1, 3, 4, 20)] == [10, 40, 60, 60]
    assert decide(OSError(), 9, 10, Backoff.EXPONENTIAL, 10, capped).delay == 60
    jittered = retry_rules({"jitter": True, "max_backoff": 100})
    rng = random.Random(3)
    delays = [jittered.delay(Backoff.FIXED, 1000, 1, rng) for _ in range(200)]
    assert all(50 <= d <= 100 for d in delays) and len({round(d, 3) for d in delays}) > 100
    # Backoff.JITTER under a cap: jittered after capping, so still between half and the cap.
    delays = [capped.delay(Backoff.JITTER, 10, 10, rng) for _ in range(50)]
    assert all(30 <= d <= 60 for d in delays)


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"retry_on": "ConnectionError"}, "retry_on must be an exception class"),
        ({"retry_on": (ConnectionError, int)}, "retry_on must be an exception class"),
        ({"dont_retry_on": ValueError()}, "dont_retry_on must be an exception class"),
        ({"max_backoff": 0}, "max_backoff must be positive"),
        ({"max_backoff": -1}, "max_backoff must be a timedelta"),
        ({"max_backoff": float("inf")}, "max_backoff must be a timedelta"),
        ({"jitter": 1}, "jitter must be True or False"),
    ],
)
def test_bad_retry_rules_are_refused_naming_them(options: dict[str, object], said: str) -> None:
    with pytest.raises(InvalidOption, match=said):
        retry_rules(dict(options))


def test_retry_rules_take_their_keywords_out_of_a_decorators_options() -> None:
    options: dict[str, object] = {"max_retries": 2, "jitter": True, "queue": "mail"}
    assert retry_rules(options) == RetryRules(jitter=True)
    assert options == {"max_retries": 2, "queue": "mail"}
    assert retry_rules({}) is NO_RULES


def test_a_retry_a_task_asks_for_counts_and_ignores_the_filters() -> None:
    rules = retry_rules({"retry_on": (ConnectionError,), "dont_retry_on": (Retry,)})
    asked = Retry(in_=timedelta(hours=2))
    assert str(asked) == "asked to run again in 7200s" and asked.delay == 7200
    assert decide(asked, 1, 1, Backoff.FIXED, 5, rules) == Decision(retry=True, delay=7200)
    assert not decide(asked, 2, 1, Backoff.FIXED, 5, rules).retry  # retries spent: it ends
    later = Retry("rate limited")  # no delay: the task's backoff, under its rules
    assert (str(later), later.delay) == ("rate limited", None)
    capped = RetryRules(max_backoff=30)
    assert decide(later, 3, 5, Backoff.EXPONENTIAL, 10, capped).delay == 30
    assert describe(Retry("rate limited", in_=5)) == "Retry: rate limited"


@pytest.mark.parametrize("bad", [-1, float("nan"), timedelta(days=-1), timedelta(days=40_000), "5"])
def test_a_retry_with_a_bad_delay_is_refused_where_it_is_raised(bad: object) -> None:
    with pytest.raises(InvalidOption, match=r"Retry\(in_=…\) must be a timedelta"):
        Retry(in_=bad)  # type: ignore[arg-type]


def test_a_timeout_retries_whatever_retry_on_says() -> None:
    now = datetime.now(UTC)
    claimed = ClaimedJob(
        job_id=uuid7(),
        task="t",
        payload='{"args": [], "kwargs": {}}',
        params=None,
        priority=2,
        attempt=1,
        max_retries=2,
        backoff="FIXED",
        backoff_base=5.0,
        timeout=1.0,
        resource=None,
        scheduled_time=now,
        picked_at=now,
    )
    context = JobContext(job_id=claimed.job_id, task="t", attempt=1, params={})
    run = Run(claimed, context, received=0.0, rules=RetryRules(retry_on=(ConnectionError,)))
    timed_out = failed(run, JobTimeout("ran too long"))
    assert (timed_out.outcome, timed_out.delay) == (Outcome.RETRY, 5.0)
    assert failed(run, ValueError("bad")).outcome is Outcome.FAILED
    assert failed(run, ConnectionError("down")).outcome is Outcome.RETRY
