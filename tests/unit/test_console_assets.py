"""The vendored htmx is the file its record names, and the console's pure presentation helpers."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime, timedelta
from importlib.resources import files

import pytest

from flask_ratchet.console import present
from flask_ratchet.console.reads.jobs import Count
from flask_ratchet.console.reads.overview import WINDOWS, Bucket

STATIC = files("flask_ratchet.static") / "ratchet"


def test_vendored_htmx_matches_its_recorded_version_and_sha256() -> None:
    record = json.loads((STATIC / "VENDORED.json").read_text())["htmx.min.js"]
    data = (STATIC / "htmx.min.js").read_bytes()
    assert hashlib.sha256(data).hexdigest() == record["sha256"]
    assert record["version"].startswith("2.")
    found = re.search(rb'version:"([0-9.]+)"', data)
    assert found is not None and found.group(1).decode() == record["version"]


def test_secret_values_are_masked_at_any_depth() -> None:
    value = {
        "user": "ann",
        "Password": "p",
        # token_count is a count of tokens, not one: masking it hid useful data for nothing.
        "nested": [{"api_key": "k", "token_count": 3}, {"client_secret": "s"}],
        "auth": {"x": 1},
    }
    assert present.masked(value) == {
        "user": "ann",
        "Password": present.MASK,
        "nested": [
            {"api_key": present.MASK, "token_count": 3},
            {"client_secret": present.MASK},
        ],
        "auth": present.MASK,
    }
    assert "hunter2" not in present.pretty_json({"args": [{"passwd": "hunter2"}]})


@pytest.mark.parametrize(
    "key",
    [
        "password",
        "db_passwd",
        "pwd",
        "client_secret",
        "accessToken",
        "x-auth-token",
        "api_key",
        "apiKey",
        "APIKey",
        "apikey",
        "aws.access_key",
        "private-key",
        "key",
        "Authorization",
        "credentials",
        "session_cookie",
        "sessionId",
        "signature",
        "card_cvv",
        "pin",
        "SSN",
    ],
)
def test_keys_with_a_secret_word_as_a_segment_are_masked(key: str) -> None:
    assert present.masked({key: "s3cr3t"}) == {key: present.MASK}


@pytest.mark.parametrize(
    "key",
    ["author", "passenger", "compass", "token_count", "keyword", "monkey", "spinner", "user"],
)
def test_words_that_merely_contain_a_secret_word_are_shown(key: str) -> None:
    assert present.masked({key: "plain"}) == {key: "plain"}


def test_credentials_inside_urls_are_scrubbed_wherever_they_are() -> None:
    value = {"dsn": "postgresql://app:hunter2@db:5432/prod", "args": ["see amqp://u:p4ss@mq/"]}
    shown = present.pretty_json(value)
    assert "hunter2" not in shown and "p4ss" not in shown
    assert f"postgresql://app:{present.MASK}@db:5432/prod" in shown
    assert present.masked("mailto:ann@example.com https://example.com/a@b") == (
        "mailto:ann@example.com https://example.com/a@b"
    )


@pytest.mark.parametrize(
    ("term", "refused"),
    [
        ('"password":"hunt', True),
        ("password", True),
        ("client_secret", True),
        ('word":"hunt', True),  # a key's tail and a value's head
        ("accessToken", True),
        ("hunter", False),
        ("author", False),
        ("order-42", False),
    ],
)
def test_search_terms_naming_a_secret_key_are_recognised(term: str, refused: bool) -> None:
    assert present.mentions_secret(term) is refused


def test_durations_times_and_counts_read_well() -> None:
    assert present.duration(None) == present.NONE
    assert present.duration(0.4243) == "0.42 s"
    assert present.duration(185) == "3 m 05 s"
    assert present.duration(7800) == "2 h 10 m"
    assert present.duration(3 * 86400 + 3600) == "3 d 1 h"
    assert present.when(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)) == "2026-01-02 03:04:05"
    assert present.count(Count(1234)) == "1,234"
    assert present.count(Count(10_000, exact=False)) == "10,000+"
    assert present.count(Count(1_200_000, exact=False, estimated=True)) == "≈ 1,200,000"
    assert present.first_line("boom\nTraceback…") == "boom"


def test_chart_stacks_failures_on_successes_scaled_to_the_top_of_its_axis() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    buckets = [
        Bucket(start + timedelta(minutes=i), 1, ok, bad)
        for i, (ok, bad) in enumerate([(0, 0), (6, 1), (2, 0)])
    ]
    chart = present.chart(buckets, WINDOWS["15m"], width=336, height=100)
    assert chart.peak == 7 and chart.total_ok == 8 and chart.total_failed == 1
    assert [t.value for t in chart.ticks] == [0, 2, 4, 6, 8]  # the axis ends above the peak
    assert chart.ticks[0].y == chart.bottom == 106 and chart.ticks[-1].y == chart.top == 6
    assert chart.ticks[1].y == 81  # 2 of 8, a quarter of the way up
    empty, full, small = chart.bars
    assert empty.ok_height == 0 and empty.failed_height == 0
    assert full.ok_height + full.failed_height == 87.5  # 7 of the axis's 8
    assert full.failed_y + full.failed_height == full.ok_y
    assert full.ok_y + full.ok_height == chart.bottom
    assert small.ok_height == 25
    assert empty.x == chart.left + 1 and small.x == chart.left + 2 * 100 + 1  # 300 / 3 each
    assert full.label == "00:01: 6 succeeded, 1 failed"
    assert [(t.x, t.label) for t in chart.times] == [(36, "00:00")]  # on multiples of 5 minutes
    assert chart.per == "minute"


@pytest.mark.parametrize(
    ("peak", "ticks"),
    [
        (0, [0, 1]),
        (1, [0, 1]),
        (3, [0, 1, 2, 3]),
        (5, [0, 1, 2, 3, 4, 5]),
        (6, [0, 2, 4, 6]),
        (7, [0, 2, 4, 6, 8]),
        (11, [0, 5, 10, 15]),
        (100, [0, 20, 40, 60, 80, 100]),
        (101, [0, 50, 100, 150]),
        (1234, [0, 500, 1000, 1500]),
    ],
)
def test_the_y_axis_reaches_the_peak_in_a_few_round_steps(peak: int, ticks: list[int]) -> None:
    assert present.axis(peak) == ticks


def test_a_days_chart_has_half_hour_bars_and_short_labels() -> None:
    start = datetime(2026, 1, 1, 0, 30, tzinfo=UTC)
    buckets = [
        Bucket(start + timedelta(minutes=30 * i), 30, 20_000 * (i == 3), 0) for i in range(48)
    ]
    chart = present.chart(buckets, WINDOWS["24h"])
    assert len(chart.bars) == 48 and chart.per == "30 minutes"
    assert [t.label for t in chart.ticks] == ["0", "5,000", "10k", "15k", "20k"]
    assert [t.label for t in chart.times] == ["06:00", "12:00", "18:00", "00:00"]
    assert chart.bars[3].label == "02:00\N{EN DASH}02:30: 20,000 succeeded, 0 failed"
    assert present.chart(buckets[:1], WINDOWS["24h"]).ticks[-1].label == "1"
    big = [Bucket(start, 30, 1_500_000, 0)]
    assert [t.label for t in present.chart(big, WINDOWS["24h"]).ticks][-2:] == ["1M", "1.5M"]


@pytest.mark.parametrize(
    ("offset", "shown"),
    [
        (timedelta(0), "just now"),
        (timedelta(milliseconds=-400), "just now"),
        (timedelta(seconds=-12), "12 s ago"),
        (timedelta(minutes=-3, seconds=-59), "3 min ago"),
        (timedelta(minutes=4, seconds=10), "in 4 min"),
        (timedelta(hours=-47), "47 h ago"),
        (timedelta(days=-9), "9 d ago"),
        (timedelta(days=400), "in 400 d"),
    ],
)
def test_a_time_shows_how_far_it_is_from_the_database_clock(offset: timedelta, shown: str) -> None:
    now = datetime(2026, 11, 26, 2, 15, 7, tzinfo=UTC)
    assert present.relative(now + offset, now) == shown
    # A stored time without a zone is UTC.
    assert present.relative((now + offset).replace(tzinfo=None), now) == shown


def test_a_time_element_holds_the_instant_in_utc() -> None:
    assert (
        present.iso(datetime(2026, 1, 2, 3, 4, 5, 678, tzinfo=UTC)) == "2026-01-02T03:04:05+00:00"
    )
    assert present.iso(datetime(2026, 1, 2, 3, 4, 5)) == "2026-01-02T03:04:05+00:00"
