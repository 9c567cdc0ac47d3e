"""Pages of results and the cursors that carry on after them: one type and one cursor codec for
``ratchet.find_jobs()`` and every list of the console.

A cursor is opaque to callers: the kind of list it belongs to, then the keys of the last row
handed out (``n.<job id>``, ``p.<priority>.<job id>``), which the next page starts after. A
cursor of another list, or text that is none, is refused with :class:`ValueError`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of results; pass ``next_cursor`` back to get the next page (``None``: this
    was the last). ``partial``: a filter no index serves stopped at its window before the page
    was full, and ``next_cursor`` carries on after the window."""

    items: list[T] = field(default_factory=list)
    next_cursor: str | None = None
    partial: bool = False


#: The kind of ``find_jobs`` cursors.
JOB_CURSOR = "j"
#: Where a time in a cursor counts from: every time ratchet stores is after it.
_FIRST_INSTANT = datetime(1, 1, 1, tzinfo=UTC)


def cursor(kind: str, *keys: object) -> str:
    """The cursor of a list of ``kind`` that carries on after ``keys``."""
    return ".".join((kind, *(str(k) for k in keys)))


def read_cursor(text: str, kind: str, *types: Callable[[str], Any]) -> tuple[Any, ...]:
    """The keys of a cursor :func:`cursor` made for a list of ``kind``, each read with its type
    (``int``, ``uuid.UUID``).

    :raises ValueError: if ``text`` is not such a cursor.
    """
    prefix, *keys = text.split(".") if isinstance(text, str) else ("",)
    if prefix == kind and len(keys) == len(types):
        try:
            return tuple(read(key) for read, key in zip(types, keys, strict=True))
        except ValueError:
            pass
    raise ValueError(f"cursor {text!r} does not belong to this list")


def cursor_id(text: str, kind: str) -> uuid.UUID:
    """The one job or batch id in a cursor of ``kind`` (see :func:`read_cursor`)."""
    (found,) = read_cursor(text, kind, uuid.UUID)
    assert isinstance(found, uuid.UUID)
    return found


def instant_key(when: datetime) -> int:
    """``when`` (aware) as a cursor key: whole microseconds since 0001-01-01 UTC, digits only."""
    return (when.astimezone(UTC) - _FIRST_INSTANT) // timedelta(microseconds=1)


def instant(key: int) -> datetime:
    """The time an :func:`instant_key` stands for.

    :raises ValueError: if ``key`` is past any time (no list made it).
    """
    try:
        return _FIRST_INSTANT + timedelta(microseconds=key)
    except OverflowError:
        raise ValueError(f"{key} microseconds name no time") from None
