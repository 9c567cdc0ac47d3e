"""The archive: when a job that ended long ago was moved out of the job tables (the 404 page of
a job id says so)."""

from __future__ import annotations

import uuid
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from flask_ratchet.schema import job_archive


def archived_at(conn: Connection, job_id: uuid.UUID) -> datetime | None:
    """When the job ``job_id`` was archived, or None when the archive does not hold it (never
    there, or purged since): one primary-key probe."""
    found = conn.execute(
        sa.select(job_archive.c.archived_at).where(job_archive.c.job_id == job_id)
    ).scalar_one_or_none()
    return found if isinstance(found, datetime) else None
