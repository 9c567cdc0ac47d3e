"""No pooled connection crosses a ``fork()``.

A child process that used its parent's pooled connections (gunicorn ``--preload`` web workers
when the app factory queried the database, ``multiprocessing`` from a job, a task that forks)
would share one socket with the parent and its siblings: answers to one process's queries reach
another, transactions interleave, rolled-back rows show. SQLAlchemy's documented cure is
``Engine.dispose(close=False)`` in the child: it gets a new, empty pool and leaves the parent's
connections to the parent. ratchet does that for every engine it uses, whoever forks.
"""

from __future__ import annotations

import os
import weakref

from sqlalchemy.engine import Engine

_engines: weakref.WeakSet[Engine] = weakref.WeakSet()


def fresh_pool_after_fork(engine: Engine) -> None:
    """Give ``engine`` a new, empty pool in the child of every later ``fork()``."""
    _engines.add(engine)


def _in_child() -> None:
    for engine in list(_engines):
        engine.dispose(close=False)


os.register_at_fork(after_in_child=_in_child)
