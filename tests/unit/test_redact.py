"""Masking secrets in free text and structured values, and errors of any size cut before they are
searched: every pass linear, nothing of a secret left at a cut."""

from __future__ import annotations

import pytest

from flask_ratchet.redact import (
    MASK,
    TEXT_MASK,
    free_text_masked,
    masked,
    secret_key,
    text_masked,
)
from flask_ratchet.retry import (
    MAX_ERROR,
    MAX_TRACEBACK,
    MAX_TRACEBACK_PART,
    TRACEBACK_CUT,
    describe,
    format_traceback,
    sanitize,
)

TEN_MB = 10_000_000
#: Texts on which a backtracking pattern spends quadratic time (each is one long word, or many
#: candidates for a key or a URL that never complete).
HOSTILE_UNITS = ["x", "a-", "password", "token-", "a://b:", "password=", "secret='", "aB", "A"]


def hostile(unit: str, size: int = TEN_MB) -> str:
    return (unit * (size // len(unit) + 1))[:size]


def failure(message: str) -> BaseException:
    try:
        raise ValueError(message)
    except ValueError as exc:
        return exc


@pytest.mark.timeout(120)  # a hang guard: a quadratic pass over 10 MB would take hours
@pytest.mark.parametrize("unit", HOSTILE_UNITS)
def test_a_ten_megabyte_error_is_cut_and_masked(unit: str) -> None:
    secret = "postgresql://app:hunter2@db/prod password=hunter3 "
    exc = failure(secret + hostile(unit))
    error = describe(exc)
    assert len(error) <= MAX_ERROR and error.endswith("more]")
    assert error.startswith(f"ValueError: postgresql://app:{TEXT_MASK}@db/prod password=***")
    trace = format_traceback(exc)
    assert len(trace) <= MAX_TRACEBACK
    assert "test_redact.py" in trace and "in failure" in trace  # the innermost frame is kept
    assert "hunter2" not in trace and "hunter3" not in trace
    out = sanitize(hostile(unit))
    assert len(out) <= MAX_ERROR and out.endswith("more]")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("unit", HOSTILE_UNITS)
def test_masking_ten_megabytes_of_text_finishes(unit: str) -> None:
    """What a page does with a stored value written by hand: no cut, the whole text masked."""
    text = hostile(unit)
    assert text_masked(text).startswith(unit.split("=")[0][:1])
    shown = MASK if secret_key(text) else text  # "token-token-…" is a secret-looking key
    assert masked({text: text, "api_key": text}) == {text: shown, "api_key": MASK}


@pytest.mark.parametrize("room", range(-8, 12))
def test_a_cut_never_leaves_part_of_a_url_password(room: int) -> None:
    """Cut at every place around and inside ``:password@``: no piece of the password stays."""
    url = "postgresql://app:s3cretpw@db/prod"
    start = MAX_ERROR - 20 - url.index(":s3") - room
    out = sanitize("x" * (start - 1) + " " + url + " and more" * 400)
    assert len(out) <= MAX_ERROR
    for piece in ("s3c", "3cr", "cre", "ret", "etp", "tpw"):
        assert piece not in out


@pytest.mark.parametrize("room", range(-4, 10))
def test_a_cut_inside_a_secret_value_leaves_it_masked(room: int) -> None:
    text = "x" * (MAX_ERROR - 20 - len("password='") - room) + "password='s3cret pw' tail" * 100
    out = sanitize(text)
    assert "s3c" not in out and "ret p" not in out


def test_a_traceback_is_cut_in_whole_parts_newest_kept() -> None:
    def recurse(depth: int) -> None:
        if depth == 0:
            raise ConnectionError("redis://u:pw@cache token=zzz " + "y" * TEN_MB)
        # Alternate between two lines, so that Python does not fold the frames into one.
        if depth % 2:
            recurse(depth - 1)
        else:
            recurse(depth - 1)

    try:
        recurse(300)
    except ConnectionError as exc:
        trace = format_traceback(exc)
    assert len(trace) <= MAX_TRACEBACK
    assert trace.startswith(TRACEBACK_CUT)
    body = trace[len(TRACEBACK_CUT) :]
    assert body.startswith('  File "')  # the cut falls between frames, never inside one
    last = body[body.rindex("ConnectionError: ") :]
    assert last.startswith("ConnectionError: redis://u:***@cache token=***")
    assert len(last) <= MAX_TRACEBACK_PART + 1 and last.endswith("more]\n")
    assert "pw@" not in trace and "zzz" not in trace


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("Authorization: Bearer abc.def", "Authorization: Bearer ***"),
        ("user=x password=hunter2", "user=x password=***"),
        ("password='never closed\nnext line", "password='***'\nnext line"),
        ("--db-password hunter2 --token=abc", "--token=***"),
        ("https://example.com/a@b mailto:ann@example.com", "https://example.com/a@b"),
    ],
)
def test_text_masking(raw: str, clean: str) -> None:
    out = text_masked(raw)
    assert clean in out
    assert "abc" not in out and "hunter2=" not in out and "never closed" not in out


def test_text_masking_leaves_plain_text_alone() -> None:
    text = "count: 3, author=ann, key (email)=(a@b.c) already exists, see http://h/a:b@c"
    assert text_masked(text) == text


def test_free_text_masking_hides_keys_urls_and_pairs_at_any_depth() -> None:
    value = {
        "n": 3,
        "ok": True,
        "gone": None,
        "rows": [{"refresh_token": "r-1"}, ("postgresql://a:pw@h/db", "api_key=k-2")],
        "card": "Card(number=4242, cvv_token='991')",  # an object, as its repr
        "engines": {"postgresql://a:pw@h/db": 1},
        "headers": [["Accept", "*/*"], ("Authorization", "Bearer b-3")],
        "said": ["Authorization failed for user", "bob"],  # a sentence, not a header's name
    }
    assert free_text_masked(value) == {
        "n": 3,
        "ok": True,
        "gone": None,
        "rows": [{"refresh_token": MASK}, ["postgresql://a:***@h/db", "api_key=***"]],
        "card": "Card(number=4242, cvv_token='***')",
        "engines": {"postgresql://a:***@h/db": 1},
        "headers": [["Accept", "*/*"], ["Authorization", MASK]],
        "said": ["Authorization failed for user", "bob"],
    }
    # The console's own rule keeps a pair: a list of two stored arguments is not a header.
    assert masked(["token", "t-1"]) == ["token", "t-1"]
    assert masked({"postgresql://a:pw@h/db": 1}) == {f"postgresql://a:{MASK}@h/db": 1}
