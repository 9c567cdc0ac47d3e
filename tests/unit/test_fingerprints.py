"""A failure's fingerprint: what varies between jobs replaced, what says which failure it is
kept."""

from __future__ import annotations

import pytest

from flask_ratchet.fingerprints import MAX_FINGERPRINT, MAX_INPUT, NO_MESSAGE, RULES, fingerprint


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        ("ValueError: order 4411 not found", "ValueError: order {n} not found"),
        ("ValueError: took 3.25 seconds, -7 left", "ValueError: took {n} seconds, -{n} left"),
        ("OverflowError: 1.5e300 and 2E-5", "OverflowError: {n} and {n}"),
        ("VersionError: needs 1.2.3, has 10.4", "VersionError: needs {n}, has {n}"),
        ("LookupError: user_42 and item-7", "LookupError: user_{n} and item-{n}"),
        ("LookupError: ord1234567", "LookupError: ord{n}"),
        # Digits that belong to a word stay: they name a thing, not an instance.
        ("HTTPError404: utf8 md5 v2 ipv4 S3", "HTTPError404: utf8 md5 v2 ipv4 S3"),
        (
            "KeyError: job 0190f0a0-0000-7000-8000-000000000001 gone",
            "KeyError: job {uuid} gone",
        ),
        ("KeyError: JOB 0190F0A0-0000-7000-8000-00000000000A", "KeyError: JOB {uuid}"),
        ("RuntimeError: at 0x7f3a2b1c", "RuntimeError: at {hex}"),
        (
            "RuntimeError: sha 3f786850e387550fdab836ed7e6dc881de23001b"
            " object 507f1f77bcf86cd799439011",
            "RuntimeError: sha {hex} object {hex}",
        ),
        ("RuntimeError: 0190f0a000007000800000000000000a", "RuntimeError: {hex}"),
        # Eight hex letters and no digit: a word.
        ("RuntimeError: deadbeef defaced", "RuntimeError: deadbeef defaced"),
        ("OSError: connect to 10.0.0.7:5432 refused", "OSError: connect to {ip} refused"),
        ("OSError: from 192.168.1.20", "OSError: from {ip}"),
        ("OSError: to [2001:db8::1]:8080", "OSError: to {ip}"),
        ("OSError: to fe80::1ff:fe23:4567:890a now", "OSError: to {ip} now"),
        ("OSError: to ::1", "OSError: to {ip}"),
        ("OSError: 2001:0db8:85a3:0000:0000:8a2e:0370:7334", "OSError: {ip}"),
        ("OSError: host db1:5432", "OSError: host db1:{n}"),
        # A time of day is numbers, not an IPv6 address.
        ("TimeoutError: at 12:30:45", "TimeoutError: at {n}:{n}:{n}"),
        ("TimeoutError: at 2026-11-28T12:30:45.123Z", "TimeoutError: at {time}"),
        ("TimeoutError: at 2026-11-28 12:30:45+01:00", "TimeoutError: at {time}"),
        ("TimeoutError: due 2026-11-28", "TimeoutError: due {time}"),
        ("KeyError: 'user-8812'", "KeyError: '{s}'"),
        ('ValueError: bad "value 17" for x', "ValueError: bad '{s}' for x"),
        ("ValueError: can't parse 'abc' here", "ValueError: can't parse '{s}' here"),
        ("ValueError: it's Bob's", "ValueError: it's Bob's"),
        ("ValueError: '' is empty", "ValueError: '{s}' is empty"),
        ("SMTPError: 550 for ops.team+x@mail.example.com", "SMTPError: {n} for {email}"),
        (
            "HTTPError: GET https://api.example.com/orders/123/items/9?id=5&t=2 failed",
            "HTTPError: GET https://api.example.com/orders/{n}/items/{n}?{query} failed",
        ),
        (
            "HTTPError: https://api.example.com/u/0190f0a0-0000-7000-8000-000000000001",
            "HTTPError: https://api.example.com/u/{uuid}",
        ),
        ("ConnectionError: [Errno 111] refused", "ConnectionError: [Errno {n}] refused"),
        ("ValueError: a  b\n\tc \r\n", "ValueError: a b c"),
        ("ZeroDivisionError", "ZeroDivisionError"),
        ("ValueError: … [1834 more]", "ValueError: … [{n} more]"),
    ],
)
def test_what_varies_is_replaced(error: str, expected: str) -> None:
    assert fingerprint(error) == expected


def test_messages_that_differ_only_in_their_ids_share_a_fingerprint() -> None:
    first = fingerprint("ValueError: order 17 of 'ann@example.com' not found at 10.0.0.1:80")
    second = fingerprint("ValueError: order 90210 of 'bob@example.org' not found at 10.9.8.7:443")
    other = fingerprint("ValueError: invoice 17 of 'ann@example.com' not found at 10.0.0.1:80")
    assert first == second != other


def test_no_message() -> None:
    assert fingerprint(None) == fingerprint("") == fingerprint(" \n ") == NO_MESSAGE != ""


def test_a_cut_leaves_no_trailing_space() -> None:
    """A form field is read back stripped: a group's fingerprint must survive the trip."""
    for pad in range(1, 6):
        cut = fingerprint("x" * (MAX_FINGERPRINT - pad) + " word " * 10)
        assert cut == cut.strip() and len(cut) <= MAX_FINGERPRINT


def test_a_long_message_is_cut_to_the_bound() -> None:
    long = "ValueError: " + "word " * 1000
    assert len(fingerprint(long)) == MAX_FINGERPRINT
    assert fingerprint(long) == fingerprint(long + " and more")
    # Only the start is read, however long the text.
    assert fingerprint("x" * (MAX_INPUT * 100)) == "x" * MAX_FINGERPRINT


#: Texts on which a backtracking pattern spends quadratic time: long runs that start many
#: candidates (a quote, an address, a URL, a number) which never complete.
HOSTILE_UNITS = ["'", "a", "1", "1.", "a@", "a.", "http://", "f:", ":", '"a', "9-", "0x", "a:"]


@pytest.mark.timeout(120)  # a hang guard: a quadratic pass over a megabyte would take hours
@pytest.mark.parametrize("unit", HOSTILE_UNITS)
def test_every_pattern_is_linear(unit: str) -> None:
    """:func:`fingerprint` reads only :data:`MAX_INPUT` characters, where even a quadratic
    pattern would finish; each pattern is run over a megabyte here, so that one would not."""
    text = (unit * (1_000_000 // len(unit) + 1))[:1_000_000]
    for pattern, placeholder in RULES:
        assert isinstance(pattern.sub(placeholder, text), str)
