"""The batch part of the :class:`~flask_ratchet.Ratchet` facade (chains start from
``ratchet.enqueue(...).then(...)``, see :mod:`flask_ratchet.chain`). No SQL, no threads."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from .batch import BatchBuilder, StreamingBatchBuilder
from .ids import job_id_of
from .job import BatchProgress

if TYPE_CHECKING:
    from .extension import RatchetState


class FlowFacade:
    """Batches: build, stream and follow them."""

    @property
    def state(self) -> RatchetState:
        raise NotImplementedError

    def enqueue_batch(self, name: str) -> BatchBuilder:
        """Start a batch: ``add()`` children, set options and follow-ups, then ``submit()``."""
        return BatchBuilder(self.state, name)

    def streaming_batch(self, name: str) -> StreamingBatchBuilder:
        """Start a batch whose children come from an iterable:
        ``.from_iterable(items).process(fn).with_chunk_size(500).start()``."""
        return StreamingBatchBuilder(self.state, name)

    def batch_progress(self, batch_id: uuid.UUID | str) -> BatchProgress | None:
        """A batch's counts and metrics (``batch_id`` is its parent job's id), or None."""
        key = job_id_of(batch_id)
        state = self.state
        with state.connection() as conn:
            return state.store.batch_progress(conn, key)
