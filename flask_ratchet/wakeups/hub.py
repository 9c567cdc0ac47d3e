"""One process's listening connection per channel place (a database, a Redis server), shared by
whoever listens in the process: the worker's poller (wake-ups: jobs became due) and every waiter
(``JobHandle.wait``: jobs ended).

A thread of its own opens one subscription to both channels when the first listener comes, and
closes it :data:`IDLE_CLOSE` seconds after the last one left.

- A **worker** is attached for as long as it runs. Each wake-up notice calls it, and so does each
  (re)connection (notices sent while the hub was away are lost: it looks now). While a worker is
  attached a lost connection is made again, with a growing pause.
- A **waiter** starts once the subscription hears (so an end between its first read and its first
  wait is not missed), or after :data:`LISTEN_TIMEOUT` or its own timeout, whichever is shorter,
  without it. Each end notice, and each lost connection (an end may have gone unheard), wakes
  every waiter: each reads its own job. With waiters alone, a lost connection is opened again by
  the next wait; a try that fails, or hangs past :data:`LISTEN_TIMEOUT`, is made again only after
  :data:`RETRY_AFTER`, and meanwhile waiters read their jobs once a second.

Keepalives (and Redis's health checks) notice a connection that died without a word. A
connection that stays open and delivers nothing (a proxy or a load balancer that stopped
forwarding, its own kernel answering the keepalives) is found out by a check: after
:data:`CHECK_AFTER` seconds without a notice, a round trip to the server that must be answered
within :data:`CHECK_TIMEOUT`; if it is not, the connection is closed and made again, as a lost one
is (a warning says so). Workers never depend on it to find work: they poll all along.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import ClassVar

from .channels import ENDED, WAKEUP, Channels, Subscription

log = logging.getLogger("flask_ratchet.worker")

#: Seconds the listening connection stays open after its last listener left.
IDLE_CLOSE = 5.0
#: Seconds a new connection may take to listen before waiters stop waiting for it (and, with no
#: worker attached, it is given up: its connection, should it ever answer, is closed).
LISTEN_TIMEOUT = 5.0
#: Seconds between tries to listen for waiters alone, after a try failed.
RETRY_AFTER = 5.0
#: How often the hub's thread looks whether listeners are left, in seconds.
CHECK_EVERY = 0.5
#: Seconds without a notice after which the listening connection is checked, and seconds the
#: server has to answer the check: a connection that stopped delivering is replaced within
#: their sum (and a reconnection's pause).
CHECK_AFTER = 10.0
CHECK_TIMEOUT = 5.0
#: A worker's pauses between reconnections: the first, and the longest (it doubles).
RECONNECT_FIRST = 0.5
RECONNECT_LONGEST = 30.0


class Hub:
    """The listening connection of one process and channel place (see the module's
    docstring)."""

    _hubs: ClassVar[dict[tuple[int, str], Hub]] = {}
    _hubs_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, channels: Channels) -> None:
        self._channels = channels
        self._cond = threading.Condition()
        #: End notices heard, plus one per lost connection: a waiter wakes when it changes.
        self._notices = 0
        self._waiters = 0
        #: Attached workers: what to call at a wake-up, and the event that ends their interest.
        self._workers: list[tuple[Callable[[], None], threading.Event]] = []
        self._listening = False
        self._thread: threading.Thread | None = None
        self._started_at = 0.0
        #: No new try to listen for waiters before this (``time.monotonic()``), after a failure.
        self._retry_at = 0.0
        #: Connections made again for attached workers after one was lost.
        self.reconnects = 0

    @classmethod
    def of(cls, channels: Channels) -> Hub:
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

    # -- workers -------------------------------------------------------------------------------

    def attach(self, on_wake: Callable[[], None], stop: threading.Event) -> None:
        """Call ``on_wake`` at each wake-up notice and each (re)connection, until ``stop`` is
        set."""
        with self._cond:
            self._workers.append((on_wake, stop))
            self._retry_at = 0.0  # a worker does not wait out a waiter's pause
            self._start()

    def _attached(self) -> list[Callable[[], None]]:
        """The attached workers' wake-ups; forgets those stopped (call holding ``_cond``)."""
        self._workers = [(wake, stop) for wake, stop in self._workers if not stop.is_set()]
        return [wake for wake, _ in self._workers]

    def _wake_workers(self) -> None:
        with self._cond:
            wakes = self._attached()
        for wake in wakes:
            wake()

    # -- waiters -------------------------------------------------------------------------------

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
        """Count a waiter out (the connection closes when no listener is left for a while)."""
        with self._cond:
            self._waiters -= 1

    # -- the thread ----------------------------------------------------------------------------

    def _start(self) -> None:
        """Start the hub's thread if there is none and no try failed lately (call holding
        ``_cond``)."""
        if self._thread is None and time.monotonic() >= self._retry_at:
            self._thread = threading.Thread(target=self._run, name="ratchet-listen", daemon=True)
            self._started_at = time.monotonic()
            self._thread.start()

    def _give_up_if_stuck(self) -> None:
        """Forget a thread that has not listened within :data:`LISTEN_TIMEOUT` (a connection that
        hangs) while no worker is attached: the next try comes after :data:`RETRY_AFTER`. Call
        holding ``_cond``."""
        if (
            self._thread is not None
            and not self._listening
            and not self._attached()
            and time.monotonic() - self._started_at >= LISTEN_TIMEOUT
        ):
            self._thread = None
            self._retry_at = time.monotonic() + RETRY_AFTER

    def _run(self) -> None:
        me = threading.current_thread()
        pause = RECONNECT_FIRST
        try:
            while True:
                try:
                    self._listen(me)
                    return  # closed for idleness, or given up for another thread
                except self._channels.errors as exc:
                    again, listened = self._lost(me, exc)
                    if not again:
                        return
                    if listened:  # it was up: the first pause again
                        pause = RECONNECT_FIRST
                    log.warning("wake-up connection lost (%s); reconnecting in %.1fs", exc, pause)
                self._pause(pause)
                pause = min(pause * 2, RECONNECT_LONGEST)
                with self._cond:
                    if self._thread is not me or not (self._attached() or self._waiters):
                        if self._thread is me:
                            self._thread = None
                        return
                    self._started_at = time.monotonic()
        finally:
            with self._cond:
                if self._thread is me:  # ended by an error that is not the connection's
                    self._thread = None
                    self._listening = False
                    self._cond.notify_all()

    def _listen(self, me: threading.Thread) -> None:
        """Open the subscription and hear it until no listener is left for :data:`IDLE_CLOSE`
        seconds, or the thread was given up meanwhile; raise the channel's error if it is lost."""
        subscription: Subscription | None = None
        try:
            subscription = self._channels.subscription(WAKEUP, ENDED)
            with self._cond:
                if self._thread is not me:  # given up meanwhile: another one listens
                    return
                self._listening = True
                self._cond.notify_all()
            self._wake_workers()  # notices sent while it was away are lost: look now
            idle_since: float | None = None
            quiet_since = time.monotonic()
            while True:
                heard = subscription.heard(CHECK_EVERY)
                if heard:
                    quiet_since = time.monotonic()
                elif time.monotonic() - quiet_since >= CHECK_AFTER:
                    heard = subscription.check(CHECK_TIMEOUT)  # raises if it does not answer
                    quiet_since = time.monotonic()
                if WAKEUP in heard:
                    self._wake_workers()
                with self._cond:
                    if ENDED in heard:
                        self._notices += 1
                        self._cond.notify_all()
                    if self._attached() or self._waiters > 0:
                        idle_since = None
                    elif idle_since is None:
                        idle_since = time.monotonic()
                    elif time.monotonic() - idle_since >= IDLE_CLOSE:
                        # Decided under the lock: a listener coming now starts a new thread.
                        self._listening = False
                        self._thread = None
                        return
        finally:
            if subscription is not None:
                subscription.close()

    def _lost(self, me: threading.Thread, exc: Exception) -> tuple[bool, bool]:
        """The connection failed or was lost: wake the waiters. Return whether to connect again
        (a worker is attached; else this thread is forgotten), and whether it had listened."""
        with self._cond:
            if self._thread is not me:
                return False, False
            listened, self._listening = self._listening, False
            if listened:
                self._notices += 1  # an end may have gone unheard: every waiter reads
            self._cond.notify_all()
            if self._attached():
                self.reconnects += 1
                return True, listened
            self._thread = None
            if not listened:
                self._retry_at = time.monotonic() + RETRY_AFTER
            waiters = self._waiters
        if waiters:  # lost while idle, it is opened again when needed: no news
            log.warning("listening for job ends failed (%s); waiters read their jobs", exc)
        return False, listened

    def _pause(self, seconds: float) -> None:
        """Wait ``seconds`` before connecting again, less if every worker stops meanwhile."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            with self._cond:
                if not self._attached():
                    return
            time.sleep(min(left, 0.1))


class HubAttachment:
    """A worker's wake-ups from its process's :class:`Hub`: from :meth:`start` until
    ``stop`` is set."""

    def __init__(self, hub: Hub, on_wake: Callable[[], None], stop: threading.Event) -> None:
        self._hub = hub
        self._on_wake = on_wake
        self._stop = stop

    def start(self) -> None:
        self._hub.attach(self._on_wake, self._stop)


def _forget_hubs_in_child() -> None:
    """In a forked child: no hub of the parent's (their threads did not come along), and a lock
    that no thread of the parent may be holding."""
    Hub._hubs = {}
    Hub._hubs_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_hubs_in_child)
