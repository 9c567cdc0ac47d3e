"""Wake-ups: telling idle pollers that work was committed, so they need not wait for their poll;
and telling whoever waits for a job's end (``JobHandle.wait``) that jobs have ended.

Polling stays the correctness floor; wake-ups only shorten the wait.

- PostgreSQL: ``NOTIFY ratchet_wakeup`` is sent *after* the enqueuing transaction commits, by one
  background sender per process that coalesces requests (a NOTIFY inside every enqueuing
  transaction serialises commits on the server's notification queue; see bench/notify.py).
  Workers ``LISTEN`` on a dedicated autocommit connection that reconnects with backoff.
  Ends are told the same way on ``ratchet_ended``: a worker asks its second notifier after each
  batch of outcomes is written, any other process after a commit that ended jobs (a cancel from
  the API or the console); waiters listen through :mod:`.end_watches`.
- SQLite: ``PRAGMA data_version`` changes whenever another connection commits to the file; a
  worker checks it every few milliseconds on a connection of its own.
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
from typing import TYPE_CHECKING

import sqlalchemy as sa

if TYPE_CHECKING:  # imported where used: psycopg is the postgresql extra
    import psycopg

CHANNEL = "ratchet_wakeup"
#: Where workers say that jobs ended (after the outcomes committed), for waiters.
ENDED_CHANNEL = "ratchet_ended"

log = logging.getLogger("flask_ratchet.worker")

#: Seconds a process that exits waits for its last NOTIFYs to be sent (all its notifiers
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
    """Sends ``NOTIFY`` after commits: at most one in flight, never one per job.

    Requests made while a NOTIFY is being sent are merged into the next one. The sending thread
    starts at the first request in a process (never at import or ``init_app``, so forked web
    workers start clean), keeps one connection of its own, and closes it and ends after
    ``idle`` seconds without requests. A process that exits right after a request (a script, a
    ``flask ratchet`` command) waits up to :data:`FLUSH_AT_EXIT` seconds for it to be sent.
    """

    def __init__(
        self, url: sa.URL, idle: float = 10.0, gap: float = 0.01, channel: str = CHANNEL
    ) -> None:
        self._conninfo = conninfo(url)
        self._channel = channel
        self._idle = idle
        self._gap = gap
        self._wanted = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pid = 0
        self.sent = 0
        #: Requests made, and the count the last NOTIFY sent answered (for the flush at exit).
        self._asked = 0
        self._answered = 0
        self._progress = threading.Condition()
        _NOTIFIERS.add(self)

    def request(self) -> None:
        """Ask for a NOTIFY."""
        with self._progress:
            self._asked += 1
        self._wanted.set()
        with self._lock:
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                self._pid = os.getpid()
                self._thread = threading.Thread(
                    target=self._run, name="ratchet-notify", daemon=True
                )
                self._thread.start()

    def flush(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for every request made so far in this process to be
        sent; return whether they were (a NOTIFY that fails is given up, as at any time)."""
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
        self._asked = self._answered = 0

    def _run(self) -> None:
        import psycopg

        conn: psycopg.Connection[tuple[object, ...]] | None = None
        try:
            while True:
                if not self._wanted.wait(self._idle):
                    with self._lock:
                        if not self._wanted.is_set():
                            self._thread = None  # the next request starts a new thread
                            return
                self._wanted.clear()
                with self._progress:
                    asked = self._asked  # what this NOTIFY answers
                try:
                    if conn is None or conn.closed:
                        conn = psycopg.connect(self._conninfo, autocommit=True, connect_timeout=5)
                    conn.execute(f"NOTIFY {self._channel}")
                    self.sent += 1
                    with self._progress:
                        self._answered = asked
                        self._progress.notify_all()
                    # A short gap lets requests pile up into one NOTIFY under load; a request
                    # made meanwhile is still answered by the next one.
                    time.sleep(self._gap)
                except psycopg.Error:
                    log.warning(
                        "could not send a wake-up; workers will find the job at their next poll"
                    )
                    with self._progress:  # given up: a flush does not wait for it
                        self._answered = asked
                        self._progress.notify_all()
                    if conn is not None:
                        conn.close()
                    conn = None
        finally:
            if conn is not None:
                conn.close()


def conninfo(url: sa.URL) -> str:
    """A psycopg connection string for a SQLAlchemy PostgreSQL URL."""
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


class PgListener(threading.Thread):
    """LISTENs for wake-ups on its own connection; reconnects with backoff when it drops."""

    def __init__(self, url: sa.URL, on_wake: Callable[[], None], stop: threading.Event) -> None:
        super().__init__(name="ratchet-listen", daemon=True)
        self._conninfo = conninfo(url)
        self._on_wake = on_wake
        self._stop_event = stop
        self.connected = threading.Event()
        self.backend_pid: int | None = None
        self.reconnects = 0

    def run(self) -> None:
        import psycopg

        backoff = 0.5
        while not self._stop_event.is_set():
            try:
                with psycopg.connect(self._conninfo, autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    self.backend_pid = conn.info.backend_pid
                    self.connected.set()
                    backoff = 0.5
                    self._on_wake()  # notifications sent while we were away are lost: look now
                    while not self._stop_event.is_set():
                        for _ in conn.notifies(timeout=1.0):
                            self._on_wake()
            except psycopg.Error as exc:
                self.connected.clear()
                self.reconnects += 1
                log.warning("wake-up connection lost (%s); reconnecting in %.1fs", exc, backoff)
                self._stop_event.wait(backoff)
                backoff = min(backoff * 2, 30.0)


class SqliteWatcher(threading.Thread):
    """Wakes the poller when another connection commits to the SQLite file.

    Checking every 10 ms costs an idle worker about 1% of a core and puts the median pickup near
    7 ms (bench/worker.py); every 20 ms halves the cost and doubles the wait.
    """

    def __init__(
        self, path: str, on_wake: Callable[[], None], stop: threading.Event, every: float = 0.01
    ) -> None:
        super().__init__(name="ratchet-sqlite-watch", daemon=True)
        self._path = path
        self._on_wake = on_wake
        self._stop_event = stop
        self._every = every

    def run(self) -> None:
        conn = sqlite3.connect(self._path, check_same_thread=False)
        try:
            last = conn.execute("PRAGMA data_version").fetchone()[0]
            while not self._stop_event.wait(self._every):
                version = conn.execute("PRAGMA data_version").fetchone()[0]
                if version != last:
                    last = version
                    self._on_wake()
        finally:
            conn.close()


atexit.register(_flush_at_exit)
os.register_at_fork(after_in_child=_forget_parents_notifiers)
