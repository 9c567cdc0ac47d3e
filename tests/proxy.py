"""A TCP forwarder for tests, between ratchet and a database server, that can go half-open.

:meth:`Proxy.blackhole` stops forwarding on the connections open now, both ways, and keeps their
sockets open: what a NAT, a load balancer or a proxy that lost a flow's state does, the server
never saying goodbye. The kernel on this side still acknowledges every byte and answers the
keepalives, so neither keepalives nor ``tcp_user_timeout`` notice anything: only a deadline of
the client's own does. Connections made afterwards are forwarded (the path itself works again).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa

#: The most bytes a connection's client side is remembered by (what :meth:`Proxy.opened`
#: matches on: a session's startup settings, its first statements).
REMEMBERED = 1 << 20


class _Flow:
    """One client connection and its connection to the server."""

    def __init__(self, client: socket.socket, server: socket.socket, trap: bytes | None) -> None:
        self.client = client
        self.server = server
        self.sent = bytearray()  # what the client sent, its first REMEMBERED bytes
        self.dead = False  # blackholed: nothing is forwarded any more, either way
        self.closed = False
        self.trap = trap  # the flow dies as its client sends these bytes, before they pass

    def pump(self, source: socket.socket, target: socket.socket, remember: bool) -> None:
        try:
            while data := source.recv(65536):
                if remember and len(self.sent) < REMEMBERED:
                    self.sent += data
                if remember and self.trap is not None and self.trap in data:
                    self.dead = True
                if not self.dead:  # a dead flow reads on (the kernel acknowledges) and drops
                    target.sendall(data)
        except OSError:
            pass
        if not self.dead:
            self.close()

    def close(self) -> None:
        self.closed = True
        for sock in (self.client, self.server):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


class Proxy:
    """Forwards ``127.0.0.1:<port>`` to ``host:port`` until :meth:`close`."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._flows: list[_Flow] = []
        self._lock = threading.Lock()
        #: New connections go half-open the moment their client sends these bytes (the same
        #: packet is not forwarded): e.g. a listener's ``LISTEN``, after its start-up went well.
        self.trap: bytes | None = None
        threading.Thread(target=self._accept, name="test-proxy", daemon=True).start()

    def url(self, url: str) -> str:
        """``url`` (a database URL) pointed at this proxy."""
        return sa.make_url(url).set(host="127.0.0.1", port=self.port).render_as_string(False)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            try:
                server = socket.create_connection(self._target)
            except OSError:
                client.close()
                continue
            flow = _Flow(client, server, self.trap)
            with self._lock:
                self._flows.append(flow)
            for source, target, remember in ((client, server, True), (server, client, False)):
                threading.Thread(
                    target=flow.pump, args=(source, target, remember), daemon=True
                ).start()

    def opened(self, sent: bytes = b"") -> int:
        """How many connections were made through the proxy whose client sent ``sent``."""
        with self._lock:
            return sum(1 for flow in self._flows if sent in flow.sent)

    def blackhole(self, sent: bytes = b"") -> int:
        """Stop forwarding, both ways, on the open connections whose client sent ``sent``
        (every open one by default), their sockets left open; return how many."""
        with self._lock:
            flows = [f for f in self._flows if not f.closed and not f.dead and sent in f.sent]
            for flow in flows:
                flow.dead = True
        return len(flows)

    def close(self) -> None:
        self._listener.close()
        with self._lock:
            for flow in self._flows:
                flow.close()


@contextmanager
def proxy_to(url: str) -> Iterator[Proxy]:
    """A :class:`Proxy` to the server of the database ``url``."""
    parsed = sa.make_url(url)
    proxy = Proxy(parsed.host or "127.0.0.1", parsed.port or 5432)
    try:
        yield proxy
    finally:
        proxy.close()
