"""RFC 9562 UUIDv7 identifiers: time-ordered, coordination-free, monotonic within a process.

Layout (RFC 9562 §5.7)::

    48 bits unix_ts_ms | 4 bits ver=7 | 12 bits rand_a | 2 bits var=10 | 62 bits rand_b

``rand_a`` is a counter within one millisecond (RFC 9562 §6.2 method 1), seeded at random each new
millisecond, so ids made by one process sort in creation order. When the counter runs out inside a
millisecond the generator waits for the clock to tick: the timestamp is never ahead of the clock.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from datetime import UTC, datetime

from .errors import InvalidJobId

_COUNTER_MAX = 0xFFF
_lock = threading.Lock()
_last_ms = -1
_counter = 0
#: Random bytes read from the system's generator in blocks, taken 8 at a time: one
#: ``os.urandom`` call per id was a sixth of building a job in ``enqueue_many``.
_POOL_SIZE = 4096
_pool = b""
_taken = 0


def _forget_random_bytes() -> None:
    """In a forked child: the parent's unused bytes would repeat the parent's next ids."""
    global _pool, _taken, _lock
    _pool, _taken = b"", 0
    _lock = threading.Lock()  # another thread of the parent may have held it as it forked


os.register_at_fork(after_in_child=_forget_random_bytes)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _random_bits(count: int) -> int:
    """``count`` (at most 64) random bits from the pool; call with ``_lock`` held."""
    global _pool, _taken
    if _taken + 8 > len(_pool):
        _pool, _taken = os.urandom(_POOL_SIZE), 0
    chunk = _pool[_taken : _taken + 8]
    _taken += 8
    return int.from_bytes(chunk) >> (64 - count)


def uuid7() -> uuid.UUID:
    """Return a new UUIDv7, greater than every UUIDv7 this process made before it."""
    global _last_ms, _counter
    with _lock:
        ms = _now_ms()
        if ms > _last_ms:
            # Seed the counter in the lower half so a millisecond has room for 2048+ ids.
            _counter = _random_bits(11)
        else:
            # Same millisecond, or the clock stepped back: keep counting on the last timestamp.
            ms = _last_ms
            _counter += 1
            if _counter > _COUNTER_MAX:
                while (ms := _now_ms()) <= _last_ms:
                    time.sleep(0)
                _counter = _random_bits(11)
        _last_ms = ms
        counter = _counter
        rand_b = _random_bits(62)
    value = (ms << 80) | (0x7 << 76) | (counter << 64) | (0b10 << 62) | rand_b
    return uuid.UUID(int=value)


def timestamp_of(value: uuid.UUID) -> datetime:
    """Return the creation time (millisecond precision, UTC) stored in a UUIDv7.

    >>> timestamp_of(uuid7()).tzinfo
    datetime.timezone.utc
    """
    if value.version != 7:
        raise ValueError(f"{value} is a version {value.version} UUID, not a UUIDv7")
    return datetime.fromtimestamp((value.int >> 80) / 1000, tz=UTC)


def job_id_of(value: uuid.UUID | str) -> uuid.UUID:
    """A job id given as a UUID or its text.

    :raises InvalidJobId: (a ``ValueError``) for anything else, saying what a job id looks like.
    """
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(value)
    except (ValueError, TypeError, AttributeError):
        raise InvalidJobId(f"{value!r} is not a job id (a UUID like '0190…-…')") from None
