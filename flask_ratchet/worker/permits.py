"""Resource permits for the job threads: taken before a job's code runs, given back after.

Each is a short transaction of its own on the worker's engine (never the job's app context's);
the store serialises them on the database (see :mod:`flask_ratchet.store.resources`).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Protocol

from sqlalchemy.exc import SQLAlchemyError

from ..context import Supervisor
from ..store.types import Acquisition, ClaimedJob, Permit, Refused

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from ..store import Store

log = logging.getLogger("flask_ratchet.worker")

#: A job whose permit could not be asked for (the database did not answer) is due again this
#: much later, like a job that found no permit free.
PERMIT_ERROR_DELAY = 1.0
#: Tries to give a permit back before trying again in the background, and the first pause between
#: them (it doubles): a permit not given back holds a place.
RELEASE_TRIES = 3
RELEASE_PAUSE = 0.1
#: After those tries, the release is tried again in the background this often (seconds).
RELEASE_LATER = 30


class WorkerSide(Supervisor, Protocol):
    """What the executor needs of its worker: the supervisor of job contexts, and where
    permits are kept (the worker's own engine and node id)."""

    node_id: str
    engine: Engine
    store: Store

    def refuse(self, claimed: ClaimedJob, reason: str) -> Refused | None:
        """Hand back a job whose task this worker does not know (``None``: the database did
        not answer)."""
        ...

    def expire(self, claimed: ClaimedJob, reason: str) -> bool | None:
        """Cancel a claimed job whose deadline passed before it started (``None``: the
        database did not answer)."""
        ...


class PermitGate:
    """Takes and gives back resource permits for the job threads, each in a short transaction
    of its own on the worker's engine (never the job's app context's)."""

    def __init__(self, worker: WorkerSide) -> None:
        self._worker = worker
        self._unlimited: set[str] = set()  # resources already logged as having no limit
        self._lock = threading.Lock()

    def acquire(self, claimed: ClaimedJob) -> Acquisition | None:
        """Ask for a permit of the job's resource; ``None`` if the database did not answer."""
        worker, resource = self._worker, claimed.resource
        assert resource is not None
        try:
            with worker.store.begin(worker.engine) as conn:
                answer = worker.store.resources.acquire_permit(
                    conn, claimed.job_id, resource, worker.node_id
                )
        except SQLAlchemyError:
            log.warning(
                "could not ask for a permit of %r for job %s",
                resource,
                claimed.job_id,
                exc_info=True,
            )
            return None
        if answer.permit is Permit.UNLIMITED and resource not in self._unlimited:
            with self._lock:
                first = resource not in self._unlimited
                self._unlimited.add(resource)
            if first:
                log.info(
                    "resource %r has no limit (set one with configure_resource() or "
                    "RATCHET_RESOURCES): its jobs run without a permit",
                    resource,
                )
        return answer

    def release(self, claimed: ClaimedJob) -> None:
        """Give the job's permit back, trying a few times, then again every
        ``RELEASE_LATER`` seconds in the background (a live node's permits are its own: orphan
        recovery only takes those of dead nodes)."""
        worker = self._worker
        pause = RELEASE_PAUSE
        for left in reversed(range(RELEASE_TRIES)):
            try:
                with worker.store.begin(worker.engine) as conn:
                    worker.store.resources.release_permit(conn, claimed.job_id, worker.node_id)
                return
            except SQLAlchemyError:
                if not left:
                    log.warning(
                        "could not release the permit of %r held by job %s; trying again in %ds",
                        claimed.resource,
                        claimed.job_id,
                        RELEASE_LATER,
                        exc_info=True,
                    )
                    later = threading.Timer(RELEASE_LATER, self.release, (claimed,))
                    later.daemon = True
                    later.start()
                    return
            time.sleep(pause)
            pause *= 2
