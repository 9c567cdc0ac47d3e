"""A worker's claims, bounded by the worker itself.

The server ends a claim statement that runs past ``RATCHET_CLAIM_TIMEOUT`` (``statement_timeout``,
``max_statement_time``), and TCP settings notice a connection whose bytes go unacknowledged.
Neither helps when nothing answers at all while the socket stays open: a proxy or a load
balancer that stopped forwarding (the server's error never arrives, and the proxy's own kernel
acknowledges every byte and answers keepalives). The poller would wait on that socket for ever,
and a worker that never claims again looks alive: its heartbeat goes on.

So the poller marks each claim, and the watchdog (every 0.2 s) cuts the claim's connection once
its answer is :data:`MARGIN` seconds later than the server's own limit: the socket is shut down,
the driver raises its error for a lost connection, the pool drops the connection, and the
poller claims again on a new one at its next poll (taking back first what the cut claim may have
committed, as after any claim whose commit is unknown).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import Any, Self

from sqlalchemy.engine import Connection

log = logging.getLogger("flask_ratchet.worker")

#: Seconds past the server's limit before the worker cuts the connection: the server's error,
#: which says what happened, comes first whenever it can.
MARGIN = 5.0


class ClaimDeadline:
    """Bounds the claim in progress to ``timeout`` (and :data:`MARGIN`) seconds: a context
    around each claim (from its start: it is due within the bound), told the claim's
    connection with :meth:`watch` as soon as there is one. A class, not a generator's
    context: it costs the claim a few microseconds."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._lock = threading.Lock()
        #: The claim in progress: when it is due, and a duplicate of its socket's descriptor
        #: (``None`` until the connection is known, or where there is no socket: SQLite).
        self._due: float | None = None
        self._fd: int | None = None
        #: Claims whose connection was cut.
        self.cuts = 0

    def __enter__(self) -> Self:
        with self._lock:
            self._due = time.monotonic() + self.timeout + MARGIN
        return self

    def __exit__(self, *_: object) -> None:
        with self._lock:
            fd, self._fd, self._due = self._fd, None, None
            if fd is not None:
                os.close(fd)

    def watch(self, conn: Connection) -> None:
        """The claim in progress runs on ``conn``."""
        fd = socket_of(conn.connection.driver_connection)
        if fd is None:
            return
        # A duplicate: the cut acts on this socket even if the driver has closed its own
        # descriptor meanwhile, and never on another that reused the number.
        mine = os.dup(fd)
        with self._lock:
            if self._due is None or self._fd is not None:  # not in a claim, or watched already
                os.close(mine)
                return
            self._fd = mine

    def enforce(self, now: float) -> bool:
        """Cut the claim in progress if it is past due (the watchdog's call); whether it did."""
        with self._lock:
            if self._due is None or self._fd is None or now < self._due:
                return False
            self._due = None  # once
            try:
                with socket.socket(fileno=os.dup(self._fd)) as sock:
                    sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                return False  # closed meanwhile: the claim has its answer
            self.cuts += 1
        log.warning(
            "a claim had no answer %gs after RATCHET_CLAIM_TIMEOUT (%gs): its connection is "
            "closed (a network or a proxy that stopped forwarding?); claiming again on a new one",
            MARGIN,
            self.timeout,
        )
        return True


def socket_of(driver_connection: Any) -> int | None:
    """The descriptor of the socket under a driver's connection: psycopg's and mysqlclient's
    ``fileno()``, PyMySQL's socket; ``None`` for one without (SQLite's)."""
    fileno = getattr(driver_connection, "fileno", None)
    if callable(fileno):
        try:
            fd = fileno()
        except Exception:  # closed: psycopg raises, mysqlclient too
            return None
        return fd if isinstance(fd, int) and fd >= 0 else None
    sock = getattr(driver_connection, "_sock", None)  # PyMySQL
    if isinstance(sock, socket.socket) and sock.fileno() >= 0:
        return sock.fileno()
    return None
