"""What the shared store parts call but do not define: each dialect's clock, transactions and
INSERT, and two operations of the shared SQL that the parts call across each other.

The shared parts (:mod:`.sql`, :mod:`.execution`, :mod:`.cluster`) are written against these
hooks; :mod:`.postgres` and :mod:`.sqlite` fill in the dialect's, :mod:`.sql` ``finish`` and
:mod:`.batches` ``lock_batches_of``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql.elements import ColumnElement

from ..schema import node
from ..states import JobStatus
from .driver import savepoint


class DialectHooks:
    """The dialect-specific primitives every store part may use."""

    #: ``sqlalchemy.dialects.<name>.insert``: the INSERT with ``on_conflict_do_nothing``.
    dialect_insert: Any
    #: Whether row locks order concurrent writers (``SELECT … FOR UPDATE``); False where whole
    #: write transactions are serialised anyway (SQLite's ``BEGIN IMMEDIATE``).
    locks_rows = True

    def begin(self, engine: Engine) -> AbstractContextManager[Connection]:
        """Open a write transaction on ``engine``; commit on success, roll back on error."""
        raise NotImplementedError

    def lock_schema(self, conn: Connection) -> None:
        """Hold the lock that serialises changes to ratchet's tables until ``conn``'s
        transaction ends, so that several upgrades at once (the pods of one deploy) run one
        after the other, each later one finding the work done. SQLite's ``BEGIN IMMEDIATE``
        already serialises them."""

    def savepoint(self, conn: Connection) -> AbstractContextManager[None]:
        """A savepoint in ``conn``'s transaction: what the block wrote is rolled back (and only
        that) if it raises; released otherwise."""
        return savepoint(conn)

    def now(self, conn: Connection) -> datetime:
        """The database's current time (UTC)."""
        raise NotImplementedError

    def now_sql(self) -> ColumnElement[datetime]:
        """The current time inside one statement."""
        raise NotImplementedError

    def ago_sql(self, seconds: float) -> ColumnElement[datetime]:
        """``seconds`` before the current time."""
        raise NotImplementedError

    def later_sql(self, seconds: float) -> ColumnElement[datetime]:
        """``seconds`` after the current time."""
        raise NotImplementedError

    def heard_within(self, seconds: float) -> ColumnElement[bool]:
        """Nodes that sent a heartbeat within ``seconds``: at most that long ago, and no
        further ahead either. Every heartbeat is the database's time; one later than that was
        written by hand (a far time, PostgreSQL's ``infinity``, text SQLite sorts after every
        time) and would keep a dead node's jobs RUNNING for ever. A live node writes its
        heartbeat again within an interval."""
        beat = node.c.last_heartbeat
        return sa.and_(beat >= self.ago_sql(seconds), beat <= self.later_sql(seconds))

    def hour_sql(self) -> ColumnElement[datetime]:
        """The current time, truncated to the hour."""
        raise NotImplementedError

    def finish(
        self,
        conn: Connection,
        job_id: uuid.UUID,
        status: JobStatus,
        *,
        attempts: int,
        error: str | None = None,
        result: str | None = None,
    ) -> None:
        """Write a terminal outcome to the cold row and free the business key."""
        raise NotImplementedError

    def lock_batches_of(self, conn: Connection, job_ids: Sequence[uuid.UUID]) -> None:
        """Lock the unsettled batches these jobs are children or parents of, before any job
        row (the one lock order of batch writers)."""
        raise NotImplementedError
