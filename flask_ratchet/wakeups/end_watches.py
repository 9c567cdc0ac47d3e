"""What a waiter (``JobHandle.wait``) waits on between its reads of a job: something that
returns early when jobs may have ended.

- Over a channel (PostgreSQL's ``LISTEN ratchet_ended``, or Redis pub/sub): the process's
  :class:`~flask_ratchet.wakeups.hub.Hub`, one listening connection shared by every waiter and
  the worker's wake-ups (a web app whose requests wait would otherwise hold a connection per
  waiting request).
- SQLite: ``PRAGMA data_version`` changes whenever another connection commits to the file,
  checked every 10 ms on a connection of the waiter's own.
- Elsewhere (MariaDB without Redis): :class:`SleepingWatch`, which waits out each interval.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from typing import Protocol

from .channels import Channels
from .hub import LISTEN_TIMEOUT, Hub


class EndWatch(Protocol):
    """See :meth:`flask_ratchet.wakeups.notices.Wakeups.end_watch`."""

    def wait(self, seconds: float) -> None: ...

    def close(self) -> None: ...


class ChannelEndWatch:
    """One waiter's view of its process's :class:`~flask_ratchet.wakeups.hub.Hub`; ``within``:
    seconds it waits at most for the shared subscription to hear."""

    def __init__(self, channels: Channels, within: float = LISTEN_TIMEOUT) -> None:
        self._hub: Hub | None = Hub.of(channels)
        self._seen = self._hub.join(within)

    def wait(self, seconds: float) -> None:
        if self._hub is None or self._seen is None:
            time.sleep(seconds)
            return
        self._seen = self._hub.wait_past(self._seen, seconds)

    def close(self) -> None:
        if self._hub is not None:
            self._hub.leave()
            self._hub = None


class SqliteEndWatch:
    """Waits for any commit to the SQLite file (``PRAGMA data_version``), checked every 10 ms."""

    def __init__(self, path: str, every: float = 0.01) -> None:
        # An in-memory database is private to its connection: nothing to watch, poll instead.
        memory = path in ("", ":memory:") or path.startswith("file::memory:")
        self._conn = None if memory else sqlite3.connect(path, check_same_thread=False)
        self._every = every
        self._last = self._version()

    def _version(self) -> int | None:
        return (
            None if self._conn is None else self._conn.execute("PRAGMA data_version").fetchone()[0]
        )

    def wait(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(self._every if self._conn is not None else 0.05, left))
            version = self._version()
            if version != self._last:
                self._last = version
                return

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()


class SleepingWatch:
    """A waiter's watch where nothing tells of ends: it waits out each interval (``wait``
    reads its job at least once a second)."""

    def __init__(self) -> None:
        self._closed = threading.Event()

    def wait(self, seconds: float) -> None:
        self._closed.wait(seconds)

    def close(self) -> None:
        self._closed.set()
