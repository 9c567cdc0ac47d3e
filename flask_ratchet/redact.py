"""What is secret, and how it is hidden: in structured values (arguments, params, results) and
in free text (errors, tracebacks, log lines).

The one set of masking rules for every reader: the worker (before an error or a log line is
stored), the console's pages and the ``flask ratchet`` commands (when stored values are shown).

Every pass here runs over text that anyone who can raise an exception or write a row controls,
so each one is linear in the length of the text: the patterns use possessive quantifiers and
lookarounds that never scan the same characters twice, instead of letting the regex engine
backtrack over a long word (a quadratic pass over a 10 MB message holds the GIL for hours).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

#: What a masked structured value shows.
MASK = "••••••"
#: What a masked secret inside free text shows (errors and log lines are stored with it).
TEXT_MASK = "***"

# -- structured values: secret keys -------------------------------------------------------------

#: Words that make a key secret when they stand as a whole segment of it (``client_secret``,
#: ``accessToken``, ``x-auth-token``), but not inside another word (``author``, ``passenger``).
SECRET_WORDS = frozenset(
    {
        "password",
        "passwd",
        "passphrase",
        "pwd",
        "secret",
        "secrets",
        "token",
        "tokens",
        "apikey",
        "key",
        "keys",
        "auth",
        "authorization",
        "credential",
        "credentials",
        "cookie",
        "cookies",
        "session",
        "signature",
        "cvv",
        "pin",
        "ssn",
    }
)
#: A last segment that says the key holds a fact about a secret, not the secret itself
#: (``token_count``, ``session_ttl``).
NOT_SECRET_LAST = frozenset(
    {"count", "counts", "length", "len", "size", "limit", "max", "min", "type", "kind", "ttl"}
)
# Linear: a run of capitals that the first alternative scans is consumed by the match.
_SEGMENT = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


#: Keys up to this length are split at once: the substring searches would cost more.
_SHORT_KEY = 64


def segments(text: str) -> list[str]:
    """The lower-case words of a key: split on ``_``, ``-``, ``.``, spaces and camelCase."""
    return [m.group().lower() for m in _SEGMENT.finditer(text)]


def secret_key(key: object) -> bool:
    """Whether values under ``key`` are masked: a whole segment is a secret word, and the key
    does not end in a word that makes it a count or size of one (``token_count``)."""
    name = str(key)
    if len(name) > _SHORT_KEY:
        # A word of the list can only be a segment where it is a substring: a few searches
        # in C settle most long keys (a 10 MB key written by hand) before any split.
        folded = name.lower()
        if not any(word in folded for word in SECRET_WORDS):
            return False
    parts = segments(name)
    if not parts or parts[-1] in NOT_SECRET_LAST:
        return False
    return any(p in SECRET_WORDS for p in parts)


def mentions_secret(text: str) -> bool:
    """Whether search text names a secret-looking key anywhere (a stricter test than
    :func:`secret_key`: no exception for counts), or spans a key and its value (``word":"``).

    Argument search runs over the stored JSON, where masked values are in clear text: a term
    that reaches into them would confirm a secret one character at a time.
    """
    if '":' in text:
        return True
    return any(p in SECRET_WORDS for p in segments(text))


def masked(value: Any) -> Any:
    """``value`` with every value under a secret-looking key replaced by :data:`MASK`, at any
    depth, and the password of every ``scheme://user:password@host`` inside a string.

    >>> masked({"db": "postgresql://app:hunter2@db/prod", "api_key": "k-1", "n": 3})
    {'db': 'postgresql://app:••••••@db/prod', 'api_key': '••••••', 'n': 3}
    """
    return _walked(value, lambda text: url_passwords_masked(text, MASK))


def masked_arguments(args: Any, names: Sequence[str]) -> Any:
    """A job's positional ``args`` as :func:`masked` shows them, each also masked whole when the
    parameter it binds to (``names``, in order) looks secret: ``charge("tok_1")`` of
    ``def charge(card_token)`` shows ``["••••••"]``.

    >>> masked_arguments(["tok_1", 3], ["card_token", "amount"])
    ['••••••', 3]
    """
    if not isinstance(args, list):
        return masked(args)
    return [
        MASK if i < len(names) and secret_key(names[i]) else masked(value)
        for i, value in enumerate(args)
    ]


def free_text_masked(value: Any) -> Any:
    """``value`` as :func:`masked` hides it, with every string in it (keys too) hidden as free
    text (:func:`text_masked`), and a pair ``[key, value]`` whose key looks secret hidden as a
    dict's entry would be: for values whose strings may be anything, such as the descriptions
    of a program's variables that an error tracker sends.

    >>> free_text_masked({"client_secret": "s-1", "note": "'token=abc'", "h": [["Cookie", "c"]]})
    {'client_secret': '••••••', 'note': "'token=***'", 'h': [['Cookie', '••••••']]}
    """
    return _walked(value, text_masked, pairs=True)


def _secret_name(item: object) -> bool:
    """Whether ``item`` reads as the name of a secret in a ``[name, value]`` pair: a single word
    (``Authorization``, ``'X-Api-Key'``), not a sentence that holds one."""
    return isinstance(item, str) and len(item.split()) == 1 and secret_key(item)


def _walked(value: Any, text: Callable[[str], str], *, pairs: bool = False) -> Any:
    if isinstance(value, dict):
        return {
            (text(k) if isinstance(k, str) else k): (
                MASK if secret_key(k) else _walked(v, text, pairs=pairs)
            )
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        if pairs and len(value) == 2 and _secret_name(value[0]):
            return [text(value[0]), MASK]
        return [_walked(v, text, pairs=pairs) for v in value]
    if isinstance(value, str):
        return text(value)
    return value


# -- free text: URL passwords and secret values ---------------------------------------------

# ``://user:password@``, found from its ``://`` (the scheme is only required to end in a
# scheme character, a lookbehind of one): the user part stops at ``:``, the password at ``/``,
# so no two candidates share a character and the pass is linear.
_URL_CREDENTIALS = re.compile(r"(?<=[\w+.-])(?P<user>://[^:/@\s]*+:)[^@/\s]++@")
# ``password=…``, ``"api_key": "…"``, ``Authorization: Bearer …``. The key is a whole word
# (``[\w-]``, nothing of it before) that holds a secret word; the lookahead that finds the word
# reads the key once and the key is then consumed possessively, so a long word is read twice
# at most. A quoted value ends at its quote or at the end of its line, so a quote that is never
# closed still hides what follows it.
_SECRET_VALUES = re.compile(
    r"(?<![\w-])"
    r"(?P<key>(?=[\w-]*?(?:password|passwd|pwd|token|secret|api[_-]?key|authorization))"
    r"[\w-]++['\"]?+\s*+[=:]\s*+(?:(?:bearer|basic|digest|token)[ \t]++)?+)"
    r"(?P<value>'[^'\n]*+'?+|\"[^\"\n]*+\"?+|[^\s'\",;&]++)",
    re.IGNORECASE,
)


def url_passwords_masked(text: str, mark: str = TEXT_MASK) -> str:
    """``text`` with the password of every ``scheme://user:password@`` replaced by ``mark``."""
    if "@" not in text:  # no URL password without one: a search in C, not the pattern's pass
        return text
    return _URL_CREDENTIALS.sub(lambda m: f"{m['user']}{mark}@", text)


def _value_masked(match: re.Match[str]) -> str:
    value = match["value"]
    quote = value[0] if value[0] in "'\"" else ""
    return f"{match['key']}{quote}{TEXT_MASK}{quote}"


def text_masked(text: str) -> str:
    """Free text (an error, a traceback, a log line) with URL passwords and the values of
    ``password=``/``token:``-style pairs replaced by :data:`TEXT_MASK`. Linear in ``len(text)``.

    >>> text_masked("postgresql://app:hunter2@db failed, token=abc")
    'postgresql://app:***@db failed, token=***'
    """
    text = url_passwords_masked(text)
    if _names_secret(text.casefold()):
        text = _SECRET_VALUES.sub(_value_masked, text)
    return text


#: Every text the secret-value pattern can mask holds one of these (case-folded, as the pattern
#: matches case-insensitively): a word its key must contain.
_TELLTALES = ("passw", "pwd", "token", "secret", "api", "authorization")


def _names_secret(folded: str) -> bool:
    """Whether the secret-value pattern could match: a few substring searches, far cheaper
    than the pattern, that most log lines and errors fail."""
    return any(telltale in folded for telltale in _TELLTALES)


def stored_text_masked(value: object) -> str:
    """A stored error, traceback or log line as a reader shows it: :func:`text_masked`. A
    value that is not text (a row written by hand) is shown as its ``str``."""
    return text_masked(value if isinstance(value, str) else str(value))


def open_url_password_masked(head: str) -> str:
    """``head``, the start of a longer text cut just after it, with a URL password that the cut
    left without its ``@`` masked: ``… postgresql://app:hun`` would show part of a secret that
    :func:`url_passwords_masked` can no longer recognise."""
    start = max(head.rfind(" "), head.rfind("\n"), head.rfind("\t"))
    scheme_end = head.rfind("://", start + 1)
    if scheme_end < 0:
        return head
    after = scheme_end + 3
    colon = head.find(":", after)
    if colon < 0 or "/" in head[after:] or "@" in head[after:]:
        return head
    return f"{head[: colon + 1]}{TEXT_MASK}"
