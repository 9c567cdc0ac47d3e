"""The worker's helper threads behave as threads: they can be joined and forked over."""

from __future__ import annotations

import threading
from pathlib import Path

from flask_ratchet.wakeups.notices import SqliteWatcher


def test_a_finished_watcher_can_be_joined(tmp_path: Path) -> None:
    # An attribute named ``_stop`` on a Thread subclass hides Thread._stop(), which join() and
    # is_alive() call once the thread has ended.
    stop = threading.Event()
    watcher = SqliteWatcher(str(tmp_path / "app.db"), lambda: None, stop, every=0.01)
    watcher.start()
    stop.set()
    watcher.join(5)
    assert not watcher.is_alive()
