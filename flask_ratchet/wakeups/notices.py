"""Wake-ups: telling idle pollers that work was committed, so they need not wait for their poll;
and telling whoever waits for a job's end (``JobHandle.wait``) that jobs have ended.

Polling stays the correctness floor; wake-ups only shorten the wait. :class:`Wakeups` is what a
process uses, whatever carries them:

- a channel (:mod:`.channels`): PostgreSQL's ``NOTIFY`` / ``LISTEN``, or Redis pub/sub for any
  database (``RATCHET_WAKEUP_URL``). A notice is sent *after* the committing transaction, by one
  background sender per process and channel that coalesces requests (a NOTIFY inside every
  enqueuing transaction serialises commits on the server's notification queue; see
  bench/notify.py). A process listens on one connection, its :class:`~.hub.Hub`, shared by the
  worker's poller and every waiter, and made again while a worker is attached.
- else the database itself where it can tell: SQLite's ``PRAGMA data_version`` changes whenever
  another connection commits to the file, checked every few milliseconds.
- else nothing (MariaDB without Redis): workers poll, waiters read their job every second.
"""

from __future__ import annotations

import atexit
import logging
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable
from typing import Protocol

import sqlalchemy as sa

from ..services import Service
from .channels import ENDED, WAKEUP, Channels, Publisher
from .end_watches import ChannelEndWatch, EndWatch
from .hub import Hub, HubAttachment

log = logging.getLogger("flask_ratchet.worker")

#: Seconds a process that exits waits for its last notices to be sent (all its notifiers
#: together).
FLUSH_AT_EXIT = 2.0
#: This process's notifiers, for the flush at exit and the reset after a fork.
_NOTIFIERS: weakref.WeakSet[Notifier] = weakref.WeakSet()


def _flush_at_exit() -> None:
    deadline = time.monotonic() + FLUSH_AT_EXIT
    for notifier in list(_NOTIFIERS):
        notifier.flush(max(0.0, deadline - time.monotonic()))


def _forget_parents_notifiers() -> None:
    for notifier in list(_NOTIFIERS):
        notifier._forget_parent()


class Notifier:
    """Sends notices on ``channel`` after commits: at most one in flight, never one per job.

    Requests made while a notice is being sent are merged into the next one. The sending thread
    starts at the first request in a process (never at import or ``init_app``, so forked web
    workers start clean), keeps one connection of its own, and closes it and ends after
    ``idle`` seconds without requests. A process that exits right after a request (a script, a
    ``flask ratchet`` command) waits up to :data:`FLUSH_AT_EXIT` seconds for it to be sent.
    """

    def __init__(
        self, channels: Channels, channel: str = WAKEUP, idle: float = 10.0, gap: float = 0.01
    ) -> None:
        self._channels = channels
        self._channel = channel
        self._idle = idle
        self._gap = gap
        self._wanted = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        #: Set to end the current sending thread (see :meth:`close`).
        self._closing = threading.Event()
        self._pid = 0
        self.sent = 0
        #: Requests made, and the count the last notice sent answered (for the flush at exit).
        self._asked = 0
        self._answered = 0
        self._progress = threading.Condition()
        _NOTIFIERS.add(self)

    def request(self) -> None:
        """Ask for a notice."""
        with self._progress:
            self._asked += 1
        self._wanted.set()
        with self._lock:
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                self._pid = os.getpid()
                self._closing = threading.Event()
                self._thread = threading.Thread(
                    target=self._run, args=(self._closing,), name="ratchet-notify", daemon=True
                )
                self._thread.start()

    def close(self, timeout: float = 5.0) -> None:
        """Send what was asked, then end the sending thread and close its connection now, as
        ``idle`` seconds without requests would (a later request starts them again). For an
        app that is done with (a test's), whose connection would otherwise stay open that long.
        """
        with self._lock:
            thread, self._thread = self._thread, None
            self._closing.set()
        if thread is not None and thread is not threading.current_thread():
            self._wanted.set()  # wakes it: the notice it then sends answers what was asked
            thread.join(timeout)

    def flush(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for every request made so far in this process to be
        sent; return whether they were (a notice that fails is given up, as at any time)."""
        if self._pid != os.getpid():  # none asked for here (a forked child forgets the parent's)
            return True
        with self._progress:
            return self._progress.wait_for(lambda: self._answered >= self._asked, timeout)

    def _forget_parent(self) -> None:
        """In a forked child: none of the parent's requests, threads or locks (another thread
        of the parent may have held them as it forked)."""
        self._wanted = threading.Event()
        self._lock = threading.Lock()
        self._progress = threading.Condition()
        self._thread, self._pid = None, 0
        self._closing = threading.Event()
        self._asked = self._answered = 0

    def _answer(self, asked: int) -> None:
        with self._progress:
            self._answered = asked
            self._progress.notify_all()

    def _run(self, closing: threading.Event) -> None:
        publisher: Publisher | None = None
        try:
            while not closing.is_set() or self._wanted.is_set():
                if not self._wanted.wait(self._idle):
                    with self._lock:
                        if not self._wanted.is_set():
                            if not closing.is_set():
                                self._thread = None  # the next request starts a new thread
                            return
                self._wanted.clear()
                with self._progress:
                    asked = self._asked  # what this notice answers
                try:
                    if publisher is None:
                        publisher = self._channels.publisher(self._channel)
                    publisher.send()
                    self.sent += 1
                    self._answer(asked)
                    # A short gap lets requests pile up into one notice under load; a request
                    # made meanwhile is still answered by the next one.
                    time.sleep(self._gap)
                except self._channels.errors:
                    log.warning(
                        "could not send a wake-up; workers will find the job at their next poll"
                    )
                    self._answer(asked)  # given up: a flush does not wait for it
                    if publisher is not None:
                        publisher.close()
                    publisher = None
        finally:
            if publisher is not None:
                publisher.close()


class SqliteWatcher(Service):
    """Wakes the poller when another connection commits to the SQLite file.

    Checking every 10 ms costs an idle worker about 1% of a core and puts the median pickup near
    7 ms (bench/worker.py); every 20 ms halves the cost and doubles the wait.
    """

    def __init__(
        self, path: str, on_wake: Callable[[], None], stop: threading.Event, every: float = 0.01
    ) -> None:
        super().__init__("ratchet-sqlite-watch", stop)
        self._path = path
        self._on_wake = on_wake
        self._every = every
        self._conn: sqlite3.Connection | None = None
        self._last: int | None = None

    def run(self) -> None:
        self._conn = sqlite3.connect(self._path, check_same_thread=False)
        try:
            self._last = self._version(self._conn)
            super().run()
        finally:
            self._conn.close()

    def run_once(self) -> float:
        assert self._conn is not None  # opened by run()
        version = self._version(self._conn)
        if version != self._last:
            self._last = version
            self._on_wake()
        return self._every

    @staticmethod
    def _version(conn: sqlite3.Connection) -> int:
        return int(conn.execute("PRAGMA data_version").fetchone()[0])


class WakeListener(Protocol):
    """A worker's wake-ups, from :meth:`start` until its stop event is set."""

    def start(self) -> None: ...


class Fallback(Protocol):
    """What a database offers where no channel carries wake-ups (see :class:`.Dialect`)."""

    def wake_listener(
        self, url: sa.URL, on_wake: Callable[[], None], stop: threading.Event
    ) -> WakeListener: ...

    def end_watch(self, url: sa.URL, within: float) -> EndWatch: ...


class Wakeups:
    """One app's wake-ups in this process: over ``channels`` if there are any, else what the
    database at ``url`` offers (``fallback``)."""

    def __init__(self, channels: Channels | None, fallback: Fallback, url: sa.URL) -> None:
        self.channels = channels
        self._fallback = fallback
        self._url = url
        self._notifiers: dict[str, Notifier] = {}
        self._lock = threading.Lock()

    def _notifier(self, channel: str, gap: float) -> Callable[[], None] | None:
        if self.channels is None:
            return None
        with self._lock:
            found = self._notifiers.get(channel)
            if found is None:
                found = self._notifiers[channel] = Notifier(self.channels, channel, gap=gap)
        return found.request

    def close(self) -> None:
        """Close the connections this app's notices hold (see :meth:`Notifier.close`)."""
        with self._lock:
            notifiers = list(self._notifiers.values())
        for notifier in notifiers:
            notifier.close()

    def notifier(self) -> Callable[[], None] | None:
        """What tells workers in other processes that committed jobs are due; ``None`` where
        they see other processes' commits by themselves or poll."""
        return self._notifier(WAKEUP, 0.01)

    def ended_notifier(self) -> Callable[[], None] | None:
        """What tells waiters in other processes that jobs ended, after the commit; ``None``
        where they see the commits by themselves or read each second. At most one notice per
        50 ms (a worker writes outcomes every few ms under load): a waiter learns of an end that
        much later at worst, and the server is spared the rest."""
        return self._notifier(ENDED, 0.05)

    def listener(self, on_wake: Callable[[], None], stop: threading.Event) -> WakeListener:
        """What calls ``on_wake``, once started, when another process has committed due jobs,
        until ``stop`` is set: over a channel, the process's hub (one connection with its
        waiters)."""
        if self.channels is None:
            return self._fallback.wake_listener(self._url, on_wake, stop)
        return HubAttachment(Hub.of(self.channels), on_wake, stop)

    def end_watch(self, within: float) -> EndWatch:
        """What a waiter waits on between reads of a job: it returns early when jobs may have
        ended (the caller closes it). ``within``: seconds it may take to be ready, at most."""
        if self.channels is None:
            return self._fallback.end_watch(self._url, within)
        return ChannelEndWatch(self.channels, within)


atexit.register(_flush_at_exit)
os.register_at_fork(after_in_child=_forget_parents_notifiers)
