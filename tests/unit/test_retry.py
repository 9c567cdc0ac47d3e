from __future__ import annotations

import random

import pytest

from flask_ratchet import Backoff, DoNotRetry
from flask_ratchet.retry import (
    MAX_DELAY,
    backoff_delay,
    decide,
    describe,
    do_not_retry,
    format_traceback,
    is_permanent,
    sanitize,
)


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
