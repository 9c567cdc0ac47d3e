"""Where wake-ups travel: a channel that a process publishes notices on and others hear.

A notice says only "look now": jobs became due, or jobs ended. It is a hint sent after a
commit, never needed for correctness (workers poll, waiters read their job at least once a
second), so a notice lost with a connection costs a little latency and nothing else.

Two kinds of channel, each opened by a connection of its own:

- PostgreSQL's ``NOTIFY`` / ``LISTEN`` (psycopg 3), on the job database itself;
- Redis pub/sub (``RATCHET_WAKEUP_URL = "redis://…"``, the ``redis`` extra), for any store:
  MariaDB has no ``LISTEN``, and a PostgreSQL behind a transaction pooler cannot keep one.

:class:`Publisher` sends notices; :class:`Subscription` hears them. Both are opened in the
thread that uses them (a sender's, a listener's) and closed by it.
"""

from __future__ import annotations

import selectors
import time
from typing import TYPE_CHECKING, Any, Protocol

import sqlalchemy as sa

if TYPE_CHECKING:  # imported where used: psycopg and redis are extras
    import psycopg
    import redis

#: Channel names, suffixed to a Redis prefix or used as they are on PostgreSQL.
WAKEUP = "ratchet_wakeup"
ENDED = "ratchet_ended"

#: libpq options of a listening connection: a connection that died without a word (a NAT or a
#: load balancer dropping an idle flow) is noticed within about half a minute, and one that
#: stops answering while a statement is sent, too.
PG_CONNECT_OPTIONS: dict[str, int] = {
    "connect_timeout": 5,
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30_000,
}
#: Seconds a new listening connection's ``LISTEN`` may take to be answered (its start-up is
#: bounded by ``connect_timeout``).
SUBSCRIBE_TIMEOUT = 5.0
#: Redis: seconds to connect or to wait for an answer, and between health checks of an idle
#: subscription (a PING through it: a connection that stopped delivering is found out).
REDIS_TIMEOUT = 5.0
REDIS_HEALTH_CHECK = 10.0


class Publisher(Protocol):
    """An open connection that sends notices on one channel."""

    def send(self) -> None: ...

    def close(self) -> None: ...


class Subscription(Protocol):
    """An open connection that hears notices on its channels."""

    def heard(self, timeout: float) -> set[str]:
        """Wait until a notice comes, or ``timeout`` seconds; return the channels notices came
        on (none: empty). It returns as soon as one has come: the listener acts on it at once."""
        ...

    def check(self, timeout: float) -> set[str]:
        """Make sure the connection still delivers: a round trip to the server, answered
        within ``timeout`` seconds, or the channel's error is raised. Return the channels
        notices came on meanwhile."""
        ...

    def close(self) -> None: ...


class Channels(Protocol):
    """Opens publishers and subscriptions of one place (a database, a Redis server)."""

    #: Something that names the place, for one shared listener per process and place.
    key: str
    #: What opening, sending or hearing raises when the connection fails.
    errors: tuple[type[Exception], ...]

    def publisher(self, channel: str) -> Publisher: ...

    def subscription(self, *channels: str) -> Subscription: ...


# -- PostgreSQL -----------------------------------------------------------------------------------


def conninfo(url: sa.URL) -> str:
    """A psycopg connection string for a SQLAlchemy PostgreSQL URL."""
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


class PgChannels:
    """``NOTIFY`` and ``LISTEN`` on the PostgreSQL database at ``url``."""

    def __init__(self, url: sa.URL) -> None:
        import psycopg

        self._dsn = conninfo(url)
        self.key = self._dsn
        self.errors: tuple[type[Exception], ...] = (psycopg.Error,)

    def publisher(self, channel: str) -> PgPublisher:
        return PgPublisher(self._dsn, channel)

    def subscription(self, *channels: str) -> PgSubscription:
        return PgSubscription(self._dsn, channels)


class PgPublisher:
    def __init__(self, dsn: str, channel: str) -> None:
        import psycopg

        self._conn = psycopg.connect(dsn, autocommit=True, connect_timeout=5)
        self._channel = channel

    def send(self) -> None:
        self._conn.execute(f"NOTIFY {self._channel}")

    def close(self) -> None:
        self._conn.close()


class PgSubscription:
    def __init__(self, dsn: str, channels: tuple[str, ...]) -> None:
        import psycopg

        self._conn: psycopg.Connection[Any] = psycopg.connect(
            psycopg.conninfo.make_conninfo(dsn, **PG_CONNECT_OPTIONS), autocommit=True
        )
        try:
            # Bounded as a check is: a connection that went half-open between its start-up and
            # its LISTEN would otherwise hold the listening thread for ever, never replaced.
            listen = "; ".join(f"LISTEN {channel}" for channel in channels)
            self._round_trip(listen.encode(), "LISTEN", SUBSCRIBE_TIMEOUT)
        except BaseException:
            self._conn.close()
            raise
        #: The server process listening, for tests that cut it.
        self.backend_pid: int | None = self._conn.info.backend_pid

    def heard(self, timeout: float) -> set[str]:
        # Back at the first notice (with any that came in the same packet), not at the timeout.
        return {n.channel for n in self._conn.notifies(timeout=timeout, stop_after=1)}

    def check(self, timeout: float) -> set[str]:
        # A listening connection only ever reads: one that a proxy or a middlebox keeps open
        # while forwarding nothing would wait for ever, unnoticed by the kernel's keepalives
        # (the proxy's own kernel answers them). A SELECT 1 with a deadline finds it out.
        return self._round_trip(b"SELECT 1", "a check", timeout)

    def _round_trip(self, query: bytes, what: str, timeout: float) -> set[str]:
        """Send ``query`` and read its answer, through libpq's non-blocking calls (psycopg has
        no deadline on a statement); raise psycopg's ``OperationalError`` naming ``what`` if
        it is not all there within ``timeout`` seconds. The channels of the notices that came
        with it."""
        import psycopg

        pgconn = self._conn.pgconn
        deadline = time.monotonic() + timeout
        heard = set()
        with self._conn.lock:
            pgconn.send_query(query)
            while pgconn.flush():  # 1: more to send, once the socket takes it
                _ready(pgconn.socket, deadline, what, timeout, write=True)
            pgconn.consume_input()
            while pgconn.is_busy():
                _ready(pgconn.socket, deadline, what, timeout)
                pgconn.consume_input()
            while (result := pgconn.get_result()) is not None:
                if result.error_message:
                    raise psycopg.OperationalError(result.error_message.decode(errors="replace"))
            while (notice := pgconn.notifies()) is not None:
                heard.add(notice.relname.decode())
        return heard

    def close(self) -> None:
        self._conn.close()


def _ready(fd: int, deadline: float, what: str, timeout: float, *, write: bool = False) -> None:
    """Wait until ``fd`` can be read (or written); past ``deadline``, raise psycopg's
    ``OperationalError`` saying the server did not answer ``what``."""
    import psycopg

    # A selector, not select(): a descriptor past 1023 is fine.
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_WRITE if write else selectors.EVENT_READ)
        ready = selector.select(max(0.0, deadline - time.monotonic()))
    if not ready:
        raise psycopg.OperationalError(
            f"the server did not answer {what} within {timeout:g}s (a network or a proxy "
            "that stopped forwarding)"
        )


# -- Redis ----------------------------------------------------------------------------------------


class RedisChannels:
    """Pub/sub on the Redis server at ``url``, channels named ``<prefix>:<channel>`` (the prefix
    tells apart the job databases that share a server)."""

    def __init__(self, url: str, prefix: str) -> None:
        import redis

        self._url = url
        self._prefix = prefix
        self.key = f"{url}#{prefix}"
        self.errors: tuple[type[Exception], ...] = (redis.RedisError, OSError)

    def publisher(self, channel: str) -> RedisPublisher:
        return RedisPublisher(self._client(), f"{self._prefix}:{channel}")

    def subscription(self, *channels: str) -> RedisSubscription:
        return RedisSubscription(self._client(), self._prefix, channels)

    def _client(self) -> redis.Redis:
        import redis

        return redis.Redis.from_url(
            self._url,
            socket_connect_timeout=REDIS_TIMEOUT,
            socket_timeout=REDIS_TIMEOUT,
            socket_keepalive=True,
            health_check_interval=REDIS_HEALTH_CHECK,
        )


class RedisPublisher:
    def __init__(self, client: redis.Redis, channel: str) -> None:
        self._client = client
        self._channel = channel

    def send(self) -> None:
        self._client.publish(self._channel, b"")

    def close(self) -> None:
        self._client.close()


class RedisSubscription:
    def __init__(self, client: redis.Redis, prefix: str, channels: tuple[str, ...]) -> None:
        import redis

        self._client = client
        self._pubsub = client.pubsub()  # type: ignore[no-untyped-call]
        #: The channels' names on the server, to the names they stand for.
        self._names = {f"{prefix}:{channel}".encode(): channel for channel in channels}
        try:
            self._pubsub.subscribe(*self._names)
            # The server's confirmations: every notice published from here on is heard.
            for name in self._names:
                confirmed = self._pubsub.get_message(timeout=REDIS_TIMEOUT)
                if confirmed is None or confirmed.get("type") != "subscribe":
                    raise redis.TimeoutError(f"SUBSCRIBE {name!r} was not confirmed")
        except BaseException:
            self.close()
            raise

    def heard(self, timeout: float) -> set[str]:
        found = set()
        wait = timeout
        # The first message waits; the ones already there are taken without waiting.
        while (message := self._pubsub.get_message(timeout=wait)) is not None:
            if message.get("type") == "message" and message.get("channel") in self._names:
                found.add(self._names[message["channel"]])
            wait = 0.0
        return found

    def check(self, timeout: float) -> set[str]:
        # The client PINGs an idle subscription itself (REDIS_HEALTH_CHECK), and every wait
        # for an answer ends after REDIS_TIMEOUT: nothing more to do.
        return set()

    def close(self) -> None:
        self._pubsub.close()
        self._client.close()
