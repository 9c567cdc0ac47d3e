"""Why a ``--burst`` worker ends: the one log line that says what it left behind, if anything.

A burst worker ends once nothing it can run is due (see ``Worker._nothing_left``): jobs may still
be due that it cannot run: jobs of tasks it does not know (it handed them back, for a worker that
knows them), jobs in paused queues, jobs in queues it does not take. The line names them, so that
an operator who expected work to be done knows where it waits.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from .supervision import COUNTED

if TYPE_CHECKING:
    from ..store import Store


def burst_ends(
    store: Store,
    engine: Engine,
    queues: Mapping[str, int | None] | None,
    handed_back: Mapping[str, int],
    until_next_due: float,
) -> str:
    """The line a burst worker logs as it ends: ``queues`` are the ones it takes (``None``:
    every one), ``handed_back`` the jobs it handed back by task, ``until_next_due`` seconds
    until the next job it could run is due (infinite: none)."""
    left = [
        f"{n}{'+' if n >= COUNTED else ''} job{'s' if n != 1 else ''} of unknown task "
        f"{task!r} handed back"
        for task, n in sorted(handed_back.items())
    ]
    try:
        with engine.connect() as conn:
            figures = store.queues.live_figures(conn, store.dialect.now(conn))
            paused = store.queues.paused(conn)
    except SQLAlchemyError:  # only the line is less precise: the worker ends all the same
        figures, paused = {}, set()
    for name, figure in sorted(figures.items()):
        if not figure.due:
            continue
        if name in paused:
            left.append(f"queue {name!r} paused ({figure.due} due)")
        elif queues is not None and name not in queues:
            left.append(f"{figure.due} due in queue {name!r}, which this worker does not take")
    if math.isfinite(until_next_due):
        left.append(f"the next job it could run is due in {math.ceil(until_next_due):d}s")
    if not left:
        return "burst: nothing due; stopping"
    return f"burst: nothing due that this worker can run ({'; '.join(left)}); stopping"
