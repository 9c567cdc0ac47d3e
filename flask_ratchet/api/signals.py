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

from .. import facts, payload
from ..errors import InvalidOption
from ..options import validate_key
from ..runtime import Runtime
from ..store import Store
from ..store.types import JobFilter
from . import bulk, policy


def deliver(runtime: Runtime, target: uuid.UUID | str, value: Any = None) -> int:
    """Make the jobs WAITING on ``target`` due now, with ``value`` (JSON) as their signal
    payload; return how many (0: none was waiting, a second delivery included).

    :raises InvalidOption: for a bad key; :raises PayloadError: for a value that is not JSON.
    """
    job_id, key = _target(target)
    text = _encoded(runtime, value)
    signals = runtime.store.jobs.signals

    def work(conn: Connection) -> int:
        ids = policy.permitted(runtime, conn, "signal", signals.waiting(conn, job_id, key))
        return len(signals.signal(conn, ids, _payloads(runtime, conn, ids, text)))

    return runtime.run(work)


def deliver_matching(
    runtime: Runtime,
    where: JobFilter,
    value: Any = None,
    *,
    actor: str,
    role: str,
    dry_run: bool = False,
) -> int:
    """Deliver a signal, with ``value`` (JSON) as its payload, to every WAITING job matching
    ``where``, a chunk at a time, in one transaction with one audit row and one
    ``jobs_bulk_signaled`` event; return how many (with ``dry_run``: how many are waiting).

    :raises PayloadError: for a value that is not JSON; nothing is written.
    """
    text = _encoded(runtime, value)

    def change(store: Store, conn: Connection, where: JobFilter, keep: bulk.Keep) -> int:
        return store.bulk.signal(
            conn, where, lambda c, ids: _payloads(runtime, c, ids, text), keep=keep
        )

    return bulk.change_matching(
        runtime,
        "signal",
        where,
        actor=actor,
        role=role,
        dry_run=dry_run,
        operation=(change, facts.JOBS_BULK_SIGNALED),
    )


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
        ids = policy.permitted(runtime, conn, "signal", signals.waiting(conn, job_id, key))
        return len(signals.reject(conn, ids, reason))

    return runtime.run(work)


def _encoded(runtime: Runtime, value: Any) -> str | None:
    if value is None:
        return None
    return payload.encode_value("the signal payload", value, runtime.config.max_payload_bytes)


def _payloads(
    runtime: Runtime, conn: Connection, ids: list[uuid.UUID], text: str | None
) -> dict[uuid.UUID, str | None]:
    """Each job's signal payload: ``text``, sealed for a job whose payload is sealed."""
    if text is None or not ids:
        return dict.fromkeys(ids)
    sealed = runtime.store.jobs.signals.sealed_among(conn, ids)
    seal = runtime.keyring.seal
    return {i: seal(text, i, "signal_payload") if i in sealed else text for i in ids}


def _target(target: uuid.UUID | str) -> tuple[uuid.UUID | None, str | None]:
    if isinstance(target, uuid.UUID):
        return target, None
    return None, validate_key("signal key", target)
