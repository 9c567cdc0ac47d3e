"""A failure's fingerprint: its error message with what varies from one job to the next (ids,
numbers, addresses, quoted values) replaced by placeholders, so that the jobs that failed the
same way group together.

``ValueError: order 4411 not found`` and ``ValueError: order 90 not found`` are one failure,
``order {n} not found``; grouped by the exact message, a thousand jobs make a thousand groups of
one. The fingerprint is stored on the job's row when it fails for good (``ratchet_job.
fingerprint``), so the console groups dead letters, and retries or deletes one group, by an
indexed column; a group is a task and a fingerprint.

Pure and linear: the text is cut to :data:`MAX_INPUT` characters first, and no pattern scans
the same characters twice (possessive quantifiers, bounded quotes), since anyone who can raise
an exception controls the text.
"""

from __future__ import annotations

import re

#: The longest fingerprint stored (characters): it is one column of an index, and a message
#: this long already says which failure it is.
MAX_FINGERPRINT = 255
#: Only this much of a message is read: stored errors are cut to 2,000 characters already
#: (:data:`flask_ratchet.retry.MAX_ERROR`), and a fingerprint keeps far less.
MAX_INPUT = 4000
#: What a failure without an error text is stored as: never empty, so that a group's filter
#: (a form field, whose blank value means "any") always names it.
NO_MESSAGE = "(no message)"

# Each pattern with the placeholder it leaves, applied in this order: a later pattern never
# sees what an earlier one replaced (placeholders hold no digits and no quotes).
_QUOTED = re.compile(
    # A quote that opens after a word character is an apostrophe (can't), not a quote.
    r"""(?<![\w'"])'[^'\n]{0,300}+'(?!\w)|(?<![\w'"])"[^"\n]{0,300}+"(?!\w)"""
)
_EMAIL = re.compile(r"(?<![\w.+-])[\w.+-]++@[A-Za-z0-9-]++(?:\.[A-Za-z0-9-]++)++")
#: A URL's query string (what follows its ``?``): ids, tokens, dates.
_QUERY = re.compile(r"(?<=[a-z0-9]://)([^\s?#]{0,300}+)\?[^\s#]++", re.IGNORECASE)
_UUID = re.compile(
    r"(?<![0-9A-Fa-f])[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}"
    r"-[0-9A-Fa-f]{12}(?![0-9A-Fa-f])"
)
#: An ISO 8601 date, with a time and an offset if it has them.
_TIME = re.compile(
    r"(?<!\d)\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d++)?)?"
    r"(?:Z|[+-]\d{2}:?\d{2})?)?(?!\d)"
)
#: An IPv6 address: hex groups and colons, with ``::`` or at least four groups of which one
#: holds a hex letter (so that ``12:30:45`` stays a time of numbers); bracketed with a port.
_IPV6 = re.compile(
    r"\[[0-9A-Fa-f:.]{2,45}+\](?::\d{1,5})?"
    r"|(?<![\w:.])(?:[0-9A-Fa-f]{0,4}::[0-9A-Fa-f:.]{0,40}+"
    r"|(?=[0-9:]*+[A-Fa-f])[0-9A-Fa-f]{1,4}(?::[0-9A-Fa-f]{1,4}){3,7})(?![\w:])"
)
_IPV4 = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?::\d{1,5})?(?![\w.])")
#: ``0x…`` literals, and runs of eight or more hex digits with a digit among them (hashes,
#: ObjectIds, UUIDs without hyphens): a word such as ``deadbeef`` is left alone.
_HEX = re.compile(r"\b0[xX][0-9A-Fa-f]++\b|\b(?=[A-Fa-f]*+\d)[0-9A-Fa-f]{8,}+\b")
#: A number: whole or decimal, not inside a word (``utf8``, ``HTTPError404``, ``v2`` stay) but
#: after an underscore or a hyphen (``order_17``, ``item-3``), and four digits or more after a
#: letter (``ord1234567``).
_NUMBER = re.compile(
    r"(?<![A-Za-z0-9.])\d++(?:\.\d++)*+(?:[eE][+-]?\d++)?|(?<=[A-Za-z])\d{4,}+(?:\.\d++)*+"
)
_SPACE = re.compile(r"\s++")

#: The patterns and their placeholders, in the order :func:`fingerprint` applies them.
RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (_QUOTED, "'{s}'"),
    (_EMAIL, "{email}"),
    (_QUERY, r"\1?{query}"),
    (_UUID, "{uuid}"),
    (_TIME, "{time}"),
    (_IPV6, "{ip}"),
    (_IPV4, "{ip}"),
    (_HEX, "{hex}"),
    (_NUMBER, "{n}"),
)


def fingerprint(error: str | None) -> str:
    """``error`` with its variable parts replaced by placeholders, whitespace collapsed, cut to
    :data:`MAX_FINGERPRINT` characters; :data:`NO_MESSAGE` if nothing is left.

    >>> fingerprint("KeyError: 'user-8812' gone, job 0190f0a0-0000-7000-8000-0000000000a1")
    "KeyError: '{s}' gone, job {uuid}"
    >>> fingerprint("OSError: connect to 10.0.0.7:5432 failed for ops@example.com")
    'OSError: connect to {ip} failed for {email}'
    """
    text = _SPACE.sub(" ", (error or "")[:MAX_INPUT]).strip()
    for pattern, placeholder in RULES:
        text = pattern.sub(placeholder, text)
    # Without trailing space, as a form field's value is read back (stripped).
    return text[:MAX_FINGERPRINT].rstrip() or NO_MESSAGE
