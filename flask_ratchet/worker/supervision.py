"""The supervisor side of running jobs, held by a worker process and by the testing kit's
in-process runner: what a running job's :class:`~flask_ratchet.JobContext` asks of whoever runs it
(progress, "still mine?", the previous step's result), and handing back jobs of unknown tasks."""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from .. import facts, payload
from ..config import RatchetConfig
from ..errors import UnreadableJob
from ..facts import Event
from ..job import BatchChild, BatchProgress
from ..payload import Sealed, Unreadable
from ..sealing import Keyring, is_sealed
from ..store.signals import signal_payload_of
from ..store.types import ClaimedJob, Refused
from .logs import claimed_fields

if TYPE_CHECKING:
    from ..store import Store

log = logging.getLogger("flask_ratchet.worker")

#: How long a worker leaves the jobs of a task it refused (it does not know it) to other workers
#: before it claims them again, at most (a quarter of the grace if that is less).
REFUSAL_WINDOW = 60.0
#: The most jobs of one task a worker remembers handing back (it only reports how many).
COUNTED = 1000


class Supervision:
    """Implements :class:`~flask_ratchet.worker.permits.WorkerSide` for the jobs a runner runs
    on ``engine`` under ``node_id``. ``send`` sends the events of a write made here (an
    expired job's cancel) once committed. With ``hand_back=False`` (a runner with no other
    worker to hand to) a job of an unknown task fails for good at once."""

    def __init__(
        self,
        store: Store,
        engine: Engine,
        node_id: str,
        config: RatchetConfig,
        send: Callable[[list[Event]], None],
        *,
        keyring: Keyring,
        hand_back: bool = True,
    ) -> None:
        self.store = store
        self.engine = engine
        self.node_id = node_id
        self.config = config
        self._keyring = keyring  # the app's (Runtime.keyring): encrypted columns open with it
        self.send = send
        self._hand_back = hand_back
        #: Tasks this worker handed jobs of back, not knowing them: until when it claims none.
        self._refused: dict[str, float] = {}
        self._refused_lock = threading.Lock()
        #: The jobs handed back so far, by task (the first :data:`COUNTED` of each): what a
        #: ``--burst`` worker says when it ends. Ids, not a count: a job handed back again (a
        #: claim that read the refusals just before they changed) is one job.
        self._handed_back: dict[str, set[uuid.UUID]] = {}

    def report_progress(self, job_id: uuid.UUID, progress: dict[str, Any]) -> None:
        try:
            with self.store.begin(self.engine) as conn:
                self.store.executions.report_progress(
                    conn, self.node_id, job_id, json.dumps(progress)
                )
        except SQLAlchemyError:
            log.warning("could not store progress of job %s", job_id, exc_info=True)

    def refuse(self, claimed: ClaimedJob, reason: str) -> Refused | None:
        if not self._hand_back:
            return Refused(handed_back=False, dead_letter=f"{reason} (run in-process)")
        grace = self.config.unknown_task_grace
        try:
            with self.store.begin(self.engine) as conn:
                refused = self.store.executions.refuse(conn, self.node_id, claimed, reason, grace)
        except SQLAlchemyError:
            log.warning("could not hand back job %s", claimed.job_id, exc_info=True)
            return None
        if refused.handed_back:
            with self._refused_lock:
                self._refused[claimed.task] = time.monotonic() + min(REFUSAL_WINDOW, grace / 4)
                ids = self._handed_back.setdefault(claimed.task, set())
                if len(ids) < COUNTED:
                    ids.add(claimed.job_id)
            log.warning(
                "job %s (%s) handed back without spending an attempt, for a worker that knows "
                "its task: %s (it goes to the dead-letter queue if none runs it within %gs)",
                claimed.job_id,
                claimed.task,
                reason,
                grace,
                extra=claimed_fields(claimed, self.node_id),
            )
        return refused

    def expire(self, claimed: ClaimedJob, reason: str) -> bool | None:
        """End a claimed job whose deadline passed before it started: CANCELED, with
        ``reason``, through the store's guarded cancel fenced by this node's claim; whether it
        was (False: canceled or taken meanwhile; ``None``: the database did not answer)."""
        try:
            with self.store.begin(self.engine) as conn:
                ended = self.store.jobs.expire(conn, claimed.job_id, self.node_id, reason)
                recorded = facts.take(conn)
        except SQLAlchemyError:
            log.warning("could not cancel expired job %s", claimed.job_id, exc_info=True)
            return None
        if recorded:  # committed: its job_canceled event, callbacks, the waiters' notice
            self.send(recorded)
        return ended

    def refusing(self) -> list[str]:
        """The tasks whose jobs this worker leaves to others for now."""
        now = time.monotonic()
        with self._refused_lock:
            for task in [t for t, until in self._refused.items() if until <= now]:
                del self._refused[task]
            return list(self._refused)

    def handed_back(self) -> dict[str, int]:
        """How many jobs of each task this worker has handed back, not knowing it (at most
        :data:`COUNTED`)."""
        with self._refused_lock:
            return {task: len(ids) for task, ids in self._handed_back.items()}

    def result_of(self, job_id: uuid.UUID) -> Any:
        with self.engine.connect() as conn:
            return self.store.jobs.result_of(conn, job_id, self._keyring)

    def signal_payload_of(self, job_id: uuid.UUID) -> Any:
        with self.engine.connect() as conn:
            text = signal_payload_of(conn, job_id)
        if text is not None and is_sealed(text):
            text = self._keyring.open(text, job_id, "signal_payload")
        return payload.decode_stored("signal_payload", text)

    def batch_of(self, batch_id: uuid.UUID) -> BatchProgress | None:
        with self.engine.connect() as conn:
            return self.store.flows.batches.batch_progress(conn, batch_id)

    def batch_children(
        self, batch_id: uuid.UUID, after: uuid.UUID | None, limit: int
    ) -> list[BatchChild]:
        # A connection per page: no read holds a snapshot (or on SQLite a read lock) across
        # a long iteration. A settled batch's children do not change, so pages stay in step.
        with self.engine.connect() as conn:
            children = self.store.flows.batches.children(conn, batch_id, after, limit)
        return [self._opened(child) for child in children]

    def _opened(self, child: BatchChild) -> BatchChild:
        """An encrypted child's result opened (one that does not open: Unreadable, why)."""
        if not isinstance(child.result, Sealed):
            return child
        try:
            clear = self._keyring.open(child.result.text, child.id, "result")
        except UnreadableJob as exc:
            return dataclasses.replace(child, result=Unreadable(child.result.text, str(exc)))
        return dataclasses.replace(child, result=payload.read_stored("result", clear))

    def still_running(self, job_id: uuid.UUID) -> bool:
        try:
            with self.engine.connect() as conn:
                return job_id in self.store.executions.still_running(conn, self.node_id, [job_id])
        except SQLAlchemyError:
            return True  # cannot tell: let the job go on; the completion is fenced anyway
