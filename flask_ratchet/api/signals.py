"""Signals for jobs that await one (``.await_signal(key, timeout)``): deliver, or reject.

Both join the caller's transaction (a request's, or ``ratchet.transaction()``) or run in one
of their own, like the other operations; the events are sent after the commit. A target is a
job's id (a :class:`uuid.UUID`: that job, if it is WAITING) or a signal key (a ``str``: every
job WAITING on it, in one statement).
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy.engine import Connection

from .. import payload
from ..errors import InvalidOption
from ..options import validate_key
from ..runtime import Runtime


def deliver(runtime: Runtime, target: uuid.UUID | str, value: Any = None) -> int:
    """Make the jobs WAITING on ``target`` due now, with ``value`` (JSON) as their signal
    payload; return how many (0: none was waiting, a second delivery included).

    :raises InvalidOption: for a bad key; :raises PayloadError: for a value that is not JSON.
    """
    job_id, key = _target(target)
    text = (
        None
        if value is None
        else payload.encode_value("the signal payload", value, runtime.config.max_payload_bytes)
    )
    signals = runtime.store.jobs.signals

    def work(conn: Connection) -> int:
        ids = signals.waiting(conn, job_id, key)
        sealed = signals.sealed_among(conn, ids) if text is not None and ids else set()
        payloads = {
            i: runtime.keyring.seal(text, i, "signal_payload") if i in sealed and text else text
            for i in ids
        }
        return len(signals.signal(conn, ids, payloads))

    return runtime.run(work)


def reject(runtime: Runtime, target: uuid.UUID | str, reason: str) -> int:
    """End the jobs WAITING on ``target`` FAILED without running them, with ``reason`` as their
    error and no retry; return how many.

    :raises InvalidOption: for a bad key or an empty reason.
    """
    job_id, key = _target(target)
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidOption(f"reason must be a non-empty text, got {reason!r}")
    signals = runtime.store.jobs.signals

    def work(conn: Connection) -> int:
        return len(signals.reject(conn, signals.waiting(conn, job_id, key), reason))

    return runtime.run(work)


def _target(target: uuid.UUID | str) -> tuple[uuid.UUID | None, str | None]:
    if isinstance(target, uuid.UUID):
        return target, None
    return None, validate_key("signal key", target)
