"""Wake-up notices on PostgreSQL: one connection per app and channel, sent from a thread of the
process, closed after a quiet spell, or at once by :meth:`Notifier.close` (which
:meth:`Wakeups.close` calls for each of an app's notifiers)."""

from __future__ import annotations

import sqlalchemy as sa

from flask_ratchet.wakeups.notices import FLUSH_AT_EXIT, WAKEUP, Notifier
from tests.acceptance.conftest import wait_until
from tests.apps import create_app


def notifying_connections(engine: sa.Engine) -> int:
    """Sessions of the test database whose last statement was a wake-up notice."""
    with engine.connect() as conn:
        return int(
            conn.execute(
                sa.text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    f"AND query = 'NOTIFY {WAKEUP}'"
                )
            ).scalar_one()
        )


def test_a_closed_notifier_ends_its_connection_and_a_later_request_opens_it_again(
    pg_url: str,
) -> None:
    app = create_app(pg_url)
    engine = sa.create_engine(pg_url, poolclass=sa.NullPool)
    with app.app_context():
        channels = app.extensions["ratchet"].wakeups.channels
        assert channels is not None
        # Idle for an hour: only close() can end the connection within the test.
        notifier = Notifier(channels, WAKEUP, idle=3600)
        before = notifying_connections(engine)

        notifier.request()
        assert notifier.flush(FLUSH_AT_EXIT)
        assert notifying_connections(engine) == before + 1

        notifier.close()
        wait_until(lambda: notifying_connections(engine) == before, what="the connection's end")

        sent = notifier.sent
        notifier.request()
        assert notifier.flush(FLUSH_AT_EXIT)
        assert notifier.sent > sent
        assert notifying_connections(engine) == before + 1
        notifier.close()
    engine.dispose()
