"""Work a cluster needs done now and then, by one node at a time: see :class:`Maintenance`."""

from .heartbeat import Heartbeat
from .locks import Lease
from .periodic import Maintenance, PeriodicTask
from .tasks import orphan_recovery, retention, signal_timeouts

__all__ = [
    "Heartbeat",
    "Lease",
    "Maintenance",
    "PeriodicTask",
    "orphan_recovery",
    "retention",
    "signal_timeouts",
]
