"""Refusals: the workers that handed a job back because they do not know its task (pure).

A job's hot row keeps, while it lives, when it was first refused and by whom (``refused_since``,
``refused_by``: a JSON list of ``[node, reason]`` pairs, the newest last, one per node). A worker
that refuses a job whose first refusal is older than ``RATCHET_UNKNOWN_TASK_GRACE`` fails it
for good instead, with :func:`dead_letter_reason`, so that a task no worker knows ends in the
dead-letter queue rather than circling for ever.
"""

from __future__ import annotations

import json
from datetime import datetime

#: The most refusing nodes a row remembers (the newest): a reason names them, it need not name
#: every pod of a large deploy.
MAX_REFUSALS = 10
#: The most characters of one reason kept.
MAX_REASON = 300

Refusals = list[tuple[str, str]]


def read_refusals(text: str | None) -> Refusals:
    """The refusals a row holds; what ratchet never writes there reads as none (the column is
    only ever shown, never trusted)."""
    if not text:
        return []
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError):
        return []
    if not isinstance(raw, list):
        return []
    return [
        (item[0][:64], item[1][:MAX_REASON])
        for item in raw[-MAX_REFUSALS:]
        if isinstance(item, list)
        and len(item) == 2
        and isinstance(item[0], str)
        and isinstance(item[1], str)
    ]


def with_refusal(refusals: Refusals, node: str, reason: str) -> Refusals:
    """``refusals`` with ``node``'s (new) one last, the oldest dropped past the cap."""
    kept = [(n, r) for n, r in refusals if n != node]
    return [*kept, (node, reason[:MAX_REASON])][-MAX_REFUSALS:]


def write_refusals(refusals: Refusals) -> str:
    return json.dumps([list(r) for r in refusals], separators=(",", ":"))


def dead_letter_reason(task: str, refusals: Refusals, since: datetime, grace: float) -> str:
    """Why a job goes to the dead-letter queue after the grace: which workers refused it."""
    who = "; ".join(f"{node}: {reason}" for node, reason in refusals)
    return (
        f"no worker ran task {task!r} within {grace:g}s of the first refusal "
        f"({since:%Y-%m-%d %H:%M:%S} UTC); refused by {who}"
    )
