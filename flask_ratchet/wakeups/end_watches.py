"""What a waiter (``JobHandle.wait``) waits on between its reads of a job: something that
returns early when jobs may have ended.

- Over a channel (PostgreSQL's ``LISTEN ratchet_ended``, or Redis pub/sub): one subscription per
  process and channel place, shared by every waiter in the process (a web app whose requests wait
  would otherwise hold a connection per waiting request). A thread of its own opens it when the
  first waiter starts, wakes every waiter at each notice (each reads its own job), and closes it
  :data:`IDLE_CLOSE` seconds after the last waiter left. A waiter starts once the subscription
  hears (so an end between its first read and its first wait is not missed), or after
  :data:`LISTEN_TIMEOUT` or its own timeout, whichever is shorter, without it. A lost connection
  wakes every waiter (an end may have gone unheard: they read again) and is opened again by the
  next wait; a try that fails, or hangs past :data:`LISTEN_TIMEOUT`, is made again only after
  :data:`RETRY_AFTER`, and meanwhile waiters read their jobs once a second. Keepalives (and
  Redis's health checks) notice a connection that died without a word.
- SQLite: ``PRAGMA data_version`` changes whenever another connection commits to the file,
  checked every 10 ms on a connection of the waiter's own.
- Elsewhere (MariaDB without Redis): :class:`SleepingWatch`, which waits out each interval.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from typing import ClassVar, Protocol

from .channels import ENDED, Channels, Subscription

log = logging.getLogger("flask_ratchet.worker")

#: Seconds the shared listener stays connected after its last waiter left.
IDLE_CLOSE = 5.0
#: Seconds a new listener may take to listen; past them it is given up (and its connection,
#: should it ever answer, closed), and waiters read without it until the next try.
LISTEN_TIMEOUT = 5.0
#: Seconds between tries to listen after a try failed (waiters read once a second meanwhile).
RETRY_AFTER = 5.0
#: How often the listener's thread looks whether waiters are left, in seconds.
CHECK_EVERY = 0.5


class EndHub:
    """The shared listener of one process and channel place (see the module's docstring)."""

    _hubs: ClassVar[dict[tuple[int, str], EndHub]] = {}
    _hubs_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, channels: Channels) -> None:
        self._channels = channels
        self._cond = threading.Condition()
        #: Notices heard, plus one per lost connection: a waiter wakes when it changes.
        self._notices = 0
        self._waiters = 0
        self._listening = False
        self._thread: threading.Thread | None = None
        self._started_at = 0.0
        #: No new try to listen before this (``time.monotonic()``), after a failed one.
        self._retry_at = 0.0

    @classmethod
    def of(cls, channels: Channels) -> EndHub:
        """This process's hub for ``channels`` (a forked child makes its own)."""
        key = (os.getpid(), channels.key)
        with cls._hubs_lock:
            hub = cls._hubs.get(key)
            if hub is None:
                hub = cls._hubs[key] = cls(channels)
            return hub

    @property
    def listening(self) -> bool:
        """Whether the shared connection listens now."""
        return self._listening

    @property
    def waiters(self) -> int:
        """How many waiters wait on it now."""
        return self._waiters

    def join(self, within: float = LISTEN_TIMEOUT) -> int | None:
        """Count a waiter in; return the notice count to wait past once the connection listens
        (waiting ``within`` seconds at most), or ``None`` if it does not listen by then (the
        waiter then sleeps between its reads)."""
        with self._cond:
            self._waiters += 1
            try:
                self._start()
                self._cond.wait_for(lambda: self._listening or self._thread is None, within)
                if not self._listening:
                    self._give_up_if_stuck()
                    return None
                return self._notices
            except BaseException:
                self._waiters -= 1
                raise

    def wait_past(self, seen: int, seconds: float) -> int:
        """Wait until a notice comes after ``seen``, or ``seconds``; return the count now."""
        with self._cond:
            self._start()  # after a lost connection: listen again, for the next notices
            self._give_up_if_stuck()
            self._cond.wait_for(lambda: self._notices != seen, timeout=seconds)
            return self._notices

    def leave(self) -> None:
        """Count a waiter out (the connection closes when none is left for a while)."""
        with self._cond:
            self._waiters -= 1

    def _start(self) -> None:
        """Start the listener's thread if there is none and no try failed lately (call holding
        ``_cond``)."""
        if self._thread is None and time.monotonic() >= self._retry_at:
            self._thread = threading.Thread(target=self._run, name="ratchet-end-listen")
            self._thread.daemon = True
            self._started_at = time.monotonic()
            self._thread.start()

    def _give_up_if_stuck(self) -> None:
        """Forget a thread that has not listened within :data:`LISTEN_TIMEOUT` (a connection that
        hangs): the next try comes after :data:`RETRY_AFTER`. Call holding ``_cond``."""
        if (
            self._thread is not None
            and not self._listening
            and time.monotonic() - self._started_at >= LISTEN_TIMEOUT
        ):
            self._thread = None
            self._retry_at = time.monotonic() + RETRY_AFTER

    def _run(self) -> None:
        me = threading.current_thread()
        listened = False
        subscription: Subscription | None = None
        try:
            subscription = self._channels.subscription(ENDED)
            with self._cond:
                if self._thread is not me:  # given up meanwhile: another one listens
                    return
                self._listening = listened = True
                self._cond.notify_all()
            idle_since: float | None = None
            while True:
                if subscription.heard(CHECK_EVERY):
                    with self._cond:
                        self._notices += 1
                        self._cond.notify_all()
                with self._cond:
                    if self._waiters > 0:
                        idle_since = None
                    elif idle_since is None:
                        idle_since = time.monotonic()
                    elif time.monotonic() - idle_since >= IDLE_CLOSE:
                        # Decided under the lock: a waiter joining now starts a new thread.
                        self._listening = False
                        self._thread = None
                        return
        except self._channels.errors as exc:
            if self._waiters:  # lost while idle, it is opened again when needed: no news
                log.warning("listening for job ends failed (%s); waiters read their jobs", exc)
        finally:
            if subscription is not None:
                subscription.close()
            with self._cond:
                if self._thread is me:  # lost or failed, not closed for idleness or given up
                    self._listening = False
                    self._thread = None
                    if listened:
                        self._notices += 1  # an end may have gone unheard: every waiter reads
                    else:
                        self._retry_at = time.monotonic() + RETRY_AFTER
                    self._cond.notify_all()


def _forget_hubs_in_child() -> None:
    """In a forked child: no hub of the parent's (their threads did not come along), and a lock
    that no thread of the parent may be holding."""
    EndHub._hubs = {}
    EndHub._hubs_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_hubs_in_child)


class EndWatch(Protocol):
    """See :meth:`flask_ratchet.wakeups.notices.Wakeups.end_watch`."""

    def wait(self, seconds: float) -> None: ...

    def close(self) -> None: ...


class ChannelEndWatch:
    """One waiter's view of its process's :class:`EndHub`; ``within``: seconds it waits at
    most for the shared subscription to hear."""

    def __init__(self, channels: Channels, within: float = LISTEN_TIMEOUT) -> None:
        self._hub: EndHub | None = EndHub.of(channels)
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
