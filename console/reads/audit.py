"""The audit page: every operator action, newest first, in keyset pages, filtered by who acted
and by what they did."""

from __future__ import annotations

import uuid
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from flask_ratchet.columns import aware
from flask_ratchet.paging import Page, cursor, instant, instant_key, read_cursor
from flask_ratchet.schema import audit

#: The kind of the audit page's cursors: the last row's time (an ``instant_key``) and id.
AUDIT_CURSOR = "a"


def audit_rows(
    conn: Connection,
    *,
    actor: str | None,
    action: str | None,
    limit: int,
    after: str | None = None,
) -> Page[Any]:
    """A page of audit rows, newest first (rows of one instant in id order: UUIDv7, time
    ordered), of ``actor`` and ``action`` when given.

    :raises ValueError: if ``after`` is not a cursor of this page.
    """
    stmt = sa.select(audit).order_by(audit.c.at.desc(), audit.c.audit_id.desc()).limit(limit + 1)
    if actor:
        stmt = stmt.where(audit.c.actor == actor)
    if action:
        stmt = stmt.where(audit.c.action == action)
    if after is not None:
        key, audit_id = read_cursor(after, AUDIT_CURSOR, int, uuid.UUID)
        at = instant(key)
        stmt = stmt.where(
            sa.or_(audit.c.at < at, sa.and_(audit.c.at == at, audit.c.audit_id < audit_id))
        )
    rows = list(conn.execute(stmt).all())
    if len(rows) <= limit:
        return Page(rows, None)
    last = rows[limit - 1]
    return Page(rows[:limit], cursor(AUDIT_CURSOR, instant_key(aware(last.at)), last.audit_id))
