"""JSON encoding of job arguments, params and results, with a size cap.

Only JSON is ever stored or run: never pickle. Encoding happens once, at enqueue, so a bad argument
is refused before anything is written. Tuples come back as lists and dict keys as strings, as JSON
has it; encode dates, UUIDs and Decimals yourself (``d.isoformat()``, ``str(u)``).

What both databases can store is refused alike: text must be valid Unicode (a lone surrogate such
as ``"\\ud800"`` cannot be written as UTF-8), and lists and dicts may be nested at most
:data:`MAX_DEPTH` levels deep inside one argument, param or result. A NUL character inside a
string or key is fine: JSON writes it as the escape ``\\u0000``, which is plain text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

from .errors import InvalidOption, PayloadError, PayloadTooLarge, UnreadableJob
from .sealing import is_sealed, sealed_key_id

#: How deep lists and dicts may be nested inside one argument, param value or result.
MAX_DEPTH = 64

#: What every refusal of a value advises.
JSON_ONLY = (
    "Pass only JSON types (str, int, float, bool, None, list, dict) with valid Unicode text, "
    f"nested at most {MAX_DEPTH} levels deep; encode dates with .isoformat(), UUIDs and "
    "Decimals with str()"
)
_SURROGATE = "holds text that is not valid Unicode (a lone surrogate such as '\\ud800')"
_CONTAINERS = (list, tuple, dict)
# Made once: ``json.dumps`` with options builds a new encoder on every call, a sixth of encoding
# a small job's arguments.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def encode(value: Any, depth: int = MAX_DEPTH) -> tuple[str, int]:
    """Encode ``value`` as compact JSON; return the text and its size in UTF-8 bytes.

    :raises PayloadError: saying what is wrong (``"is not JSON: …"``, ``"is nested …"`` or
        ``"holds text …"``), for a caller to prefix with what the value is.
    """
    if value is None:  # what most tasks return: a worker encodes a result per job
        return "null", 4
    try:
        text = _ENCODER.encode(value)
    except RecursionError:
        raise PayloadError(_too_deep(depth)) from None
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"is not JSON: {exc}") from None
    # Every level opens a bracket, so fewer brackets than levels allowed (the common case)
    # needs no walk.
    if text.count("[") + text.count("{") > depth and _deeper_than(value, depth):
        raise PayloadError(_too_deep(depth))
    if text.isascii():  # the common case: a character is a byte, and no surrogate is there
        return text, len(text)
    try:
        size = len(text.encode())
    except UnicodeEncodeError:
        raise PayloadError(_SURROGATE) from None
    return text, size


def dumps(value: Any) -> str:
    """Encode ``value`` as compact JSON; raise :class:`PayloadError` if it cannot be stored."""
    return encode(value)[0]


def _too_deep(depth: int) -> str:
    return f"is nested more than {depth} levels deep (lists and dicts inside each other)"


def _deeper_than(value: Any, depth: int) -> bool:
    """Whether lists and dicts nest more than ``depth`` levels in ``value``, without recursion
    (a value too deep for the encoder must not be too deep for its check)."""
    stack = [(value, 1)] if isinstance(value, _CONTAINERS) else []
    while stack:
        node, level = stack.pop()
        if level > depth:
            return True
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, level + 1) for child in children if isinstance(child, _CONTAINERS))
    return False


def loads(text: str | None) -> Any:
    """Decode JSON written by :func:`dumps` (``None`` stays ``None``)."""
    return None if text is None else json.loads(text)


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A stored value that cannot be read back as what ratchet wrote there: the column's raw
    text, kept as it is (pages escape it like any other text).

    Readers (:class:`~flask_ratchet.job.Job` snapshots, the console, ``flask ratchet jobs
    show``) hold one in place of the decoded value instead of raising; ``str()`` gives the text.
    """

    text: str
    #: Why it cannot be read, e.g. ``not valid JSON: Expecting value: line 1 column 1``.
    reason: str

    def __str__(self) -> str:
        return self.text

    def __format__(self, spec: str) -> str:
        return format(self.text, spec)  # lines up in tables like the value it stands for


@dataclass(frozen=True, slots=True)
class Sealed(Unreadable):
    """An encrypted column (:mod:`flask_ratchet.sealing`) as a reader without the key holds
    it: ``str()`` is ``encrypted``; ``text`` is the sealed value. The app's own reads
    (``get_job``, ``find_jobs``, a handle's ``wait``) open it with the configured keys."""

    def __str__(self) -> str:
        return "encrypted"

    def __format__(self, spec: str) -> str:
        return format("encrypted", spec)


def decode_stored(column: str, text: str | None, shape: type | None = None) -> Any:
    """Decode a stored JSON column, refusing anything ratchet would not have written there.

    ``shape`` is the JSON type the column holds (``dict`` or ``list``); ``None`` (SQL NULL)
    passes as ``None``.

    :raises UnreadableJob: naming ``column`` and saying what is wrong.
    """
    if text is None:
        return None
    if is_sealed(text):
        raise UnreadableJob(f"column {column!r} is encrypted: open it first")
    try:
        value = json.loads(text)
    except (ValueError, TypeError, RecursionError) as exc:
        raise UnreadableJob(f"column {column!r} is not valid JSON: {exc}") from None
    if shape is not None and not isinstance(value, shape):
        raise UnreadableJob(
            f"column {column!r} holds a JSON {_json_type(value)}, not the {_json_type(shape())} "
            "ratchet writes there"
        )
    return value


def decode_call(text: str) -> tuple[list[Any], dict[str, Any]]:
    """The arguments of a stored call (the ``payload`` column): ``(args, kwargs)``.

    :raises UnreadableJob: unless the text is ``{"args": [...], "kwargs": {...}}``.
    """
    call = decode_stored("payload", text, dict)
    args, kwargs = call.get("args"), call.get("kwargs")
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise UnreadableJob(
            "column 'payload' is not an object with an 'args' list and a 'kwargs' object"
        )
    return args, kwargs


def read_stored(column: str, text: str | None, shape: type | None = None) -> Any:
    """:func:`decode_stored` for readers: the value, or :class:`Unreadable` holding the text."""
    if is_sealed(text):
        return Sealed(str(text), f"encrypted with key {sealed_key_id(str(text))!r}")
    try:
        return decode_stored(column, text, shape)
    except UnreadableJob as exc:
        return Unreadable(str(text), str(exc))


T = TypeVar("T")


def read_with(decode: Callable[[str], T], text: str) -> T | Unreadable:
    """A stored value for readers: ``decode(text)``, or :class:`Unreadable` holding the text if
    ``decode`` refuses it (raises :class:`~flask_ratchet.errors.UnreadableJob`), or
    :class:`Sealed` if it is encrypted."""
    if is_sealed(text):
        return Sealed(text, f"encrypted with key {sealed_key_id(text)!r}")
    try:
        return decode(text)
    except UnreadableJob as exc:
        return Unreadable(str(text), str(exc))


def read_call(text: str) -> tuple[list[Any] | Unreadable, dict[str, Any] | Unreadable]:
    """:func:`decode_call` for readers: ``(args, kwargs)``, or the :class:`Unreadable` ``payload``
    column as both."""
    call = read_with(decode_call, text)
    return (call, call) if isinstance(call, Unreadable) else call


E = TypeVar("E", bound=Enum)


def read_member(kind: type[E], column: str, value: Any) -> E | Unreadable:
    """A stored enum column for readers: ``value`` as a member of ``kind``, or
    :class:`Unreadable` holding the text if ratchet never writes it (a status, a priority…)."""
    try:
        return kind(value)
    except (ValueError, TypeError):
        allowed = ", ".join(str(m.value) for m in kind)
        return Unreadable(str(value), f"column {column!r} holds {value!r}, not one of {allowed}")


def read_checked(column: str, check: Callable[[Any], T], value: Any) -> T | Unreadable:
    """A stored column for readers, checked as a user's value would be: ``check(value)``, or
    :class:`Unreadable` holding its text if ``check`` refuses it (raises
    :class:`~flask_ratchet.errors.InvalidOption`), e.g. text SQLite keeps in an integer column,
    NaN, a negative or a huge number."""
    try:
        return check(value)
    except InvalidOption as exc:
        return Unreadable(str(value), f"column {column!r} is unreadable: {exc}")


def _json_type(value: Any) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), "number")


#: The payload of a call without arguments (a declared recurring job, a batch's parent).
NO_ARGUMENTS = dumps({"args": [], "kwargs": {}})


def encode_arguments(task: str, args: Sequence[Any], kwargs: Mapping[str, Any], limit: int) -> str:
    """Encode a call's arguments as ``{"args": [...], "kwargs": {...}}``.

    :raises PayloadError: naming the first argument that is not JSON and how to fix it.
    :raises PayloadTooLarge: if the encoding exceeds ``limit`` bytes.
    """
    try:
        # Two levels for the envelope: the limit is each argument's own.
        text, size = encode({"args": list(args), "kwargs": dict(kwargs)}, MAX_DEPTH + 2)
    except PayloadError:
        raise PayloadError(_first_bad_argument(task, args, kwargs)) from None
    _check_size(f"the arguments of {task}", size, limit)
    return text


def encode_value(what: str, value: Any, limit: int) -> str:
    """Encode params or a result; refuse what cannot be stored (see :func:`encode`) and
    oversized values."""
    text, size = encode_valid(what, value)
    _check_size(what, size, limit)
    return text


def encode_valid(what: str, value: Any) -> tuple[str, int]:
    """:func:`encode`, with a refusal naming ``what`` (e.g. ``"the params of t"``)."""
    try:
        return encode(value)
    except PayloadError as exc:
        raise PayloadError(f"{what} {exc}. {JSON_ONLY}") from None


def _check_size(what: str, size: int, limit: int) -> None:
    if size > limit:
        raise PayloadTooLarge(
            f"{what} encode to {size} bytes, over RATCHET_MAX_PAYLOAD_BYTES ({limit}); store large "
            "data elsewhere (a table, a file) and pass its id"
        )


def _first_bad_argument(task: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    named = [(f"argument {i + 1}", v) for i, v in enumerate(args)]
    named += [(f"keyword argument {k!r}", v) for k, v in kwargs.items()]
    for label, value in named:
        try:
            encode(value)
        except PayloadError as exc:
            return f"{label} of {task} ({type(value).__name__}) {exc}. {JSON_ONLY}"
    for key in kwargs:
        try:
            encode(key)
        except PayloadError as exc:
            return f"the name of keyword argument {key!r} of {task} {exc}"
    return f"the arguments of {task} are not JSON"  # e.g. a non-string dict key in kwargs
