"""The job list's searches and its order by failure time, in SQLAlchemy Core (see :mod:`.jobs`).

- A short id (the 8 hex digits the console shows, or more) is a range of the primary key: ids
  are UUIDv7, so the ids starting with a prefix lie between the prefix padded with ``0`` and
  padded with ``f``. The bounds go through the id column's type, so each database compares them
  in the form it stores (PostgreSQL ``uuid``, SQLite hex text, MariaDB the 16 bytes): in each,
  that order is the ids' byte order.
- Error text is looked for with an escaped ``LIKE`` in each job's last error (the hot row's
  while the job is live, the cold row's once it ended), bounded like the argument search.
- FAILED jobs by when they failed use the ``(terminal_status, finished_at)`` index, newest end
  first, with a keyset on ``(finished_at, job_id)``.
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.sql import ColumnElement, Select

from flask_ratchet.columns import aware
from flask_ratchet.paging import cursor as cursor_of
from flask_ratchet.paging import instant, instant_key, read_cursor
from flask_ratchet.schema import job, job_queue

#: The sort that lists FAILED jobs by the time they failed, most recent first.
FAILED_SORT = "failed"
#: The kind of its cursors: ``f.<instant_key of the end>.<job id>``.
FAILED_CURSOR = "f"
#: The fewest hex digits a search takes as an id prefix: the console's short ids show 8.
MIN_PREFIX = 8
_PREFIX_TEXT = re.compile(r"[0-9a-fA-F-]{8,36}")


def id_prefix(text: str) -> str | None:
    """``text`` as the lowercase hex digits of a job id's prefix (8 to 31 of them, hyphens
    only where ``str(uuid)`` puts them), or None when it is none (a whole id is no prefix)."""
    value = text.strip()
    if _PREFIX_TEXT.fullmatch(value) is None:
        return None
    digits = value.replace("-", "").lower()
    if not MIN_PREFIX <= len(digits) < 32:
        return None
    if "-" in value and str(uuid.UUID(digits.ljust(32, "0")))[: len(value)] != value.lower():
        return None
    return digits


def where_id_prefix(stmt: Select[Any], digits: str) -> Select[Any]:
    """``stmt`` kept to jobs whose id starts with the hex ``digits``: a primary-key range."""
    low = uuid.UUID(digits.ljust(32, "0"))
    high = uuid.UUID(digits.ljust(32, "f"))
    return stmt.where(job.c.job_id >= low, job.c.job_id <= high)


def last_error() -> ColumnElement[Any]:
    """A job's last error, as the list shows it: its hot row's while it is live, else its cold
    row's (over jobs outer-joined to their hot rows)."""
    return sa.case(
        (job_queue.c.job_id.is_(None), job.c.terminal_error), else_=job_queue.c.last_error
    )


def where_error(stmt: Select[Any], text: str) -> Select[Any]:
    """``stmt`` kept to jobs whose last error holds ``text`` (``%`` and ``_`` as themselves)."""
    return stmt.where(last_error().contains(text, autoescape=True))


def failed_cursor(finished_at: datetime, job_id: uuid.UUID) -> str:
    """The cursor of the failure-time list after a job that ended at ``finished_at``."""
    return cursor_of(FAILED_CURSOR, instant_key(aware(finished_at)), job_id)


def by_failure_time(stmt: Select[Any], cursor: str | None) -> Select[Any]:
    """``stmt`` (FAILED jobs) most recently failed first, after ``cursor``.

    Every ending writes ``finished_at``; a row without one (written by hand) is not in this
    order, which keeps it a walk down one index on every database.

    :raises ValueError: if ``cursor`` was not made by :func:`failed_cursor`.
    """
    stmt = stmt.where(job.c.finished_at.is_not(None))
    if cursor is not None:
        key, after = read_cursor(cursor, FAILED_CURSOR, int, uuid.UUID)
        at = instant(key)  # ValueError past 9999-12-31: no list made it
        stmt = stmt.where(
            # The first term bounds the index walk; the second breaks ties by id.
            job.c.finished_at <= at,
            sa.or_(job.c.finished_at < at, job.c.job_id < after),
        )
    return stmt.order_by(job.c.finished_at.desc(), job.c.job_id.desc())
