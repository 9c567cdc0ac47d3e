"""Lifecycle events as blinker signals (Flask's own signal library), sent after the commit.

Connect a receiver as with Flask's signals; the sender is the Flask app and every signal carries
``job_id`` (a batch's: ``batch_id``)::

    from flask_ratchet import events

    @events.job_dead_lettered.connect
    def page_someone(app, job_id, task, error, **extra): ...

Each is sent once the transaction that did what it tells of has committed (see
``flask_ratchet.facts``), so a receiver never hears of a change that was rolled back. A worker
sends them from a thread of its own (a slow receiver does not hold up job completion); a web
process sends them in the thread that committed. A receiver that raises is logged and changes
nothing.
"""

from __future__ import annotations

from blinker import NamedSignal, Namespace

from . import facts

_signals = Namespace()

#: A worker started running an attempt (``job_id``, ``task``, ``attempt``).
job_started = _signals.signal(facts.JOB_STARTED)
#: A job SUCCEEDED (``job_id``, ``task``, ``result``: the JSON text or None).
job_completed = _signals.signal(facts.JOB_COMPLETED)
#: An attempt failed (``job_id``, ``task``, ``attempt``, ``error``), retried or not.
job_failed = _signals.signal(facts.JOB_FAILED)
#: A failed attempt will be retried (``job_id``, ``task``, ``attempt``, ``error``, ``delay``).
job_retrying = _signals.signal(facts.JOB_RETRYING)
#: A job FAILED for good: it is in the dead-letter queue (``job_id``, ``task``, ``error``).
job_dead_lettered = _signals.signal(facts.JOB_DEAD_LETTERED)
#: A job was CANCELED (``job_id``, ``cascade``: True when an upstream job's end canceled it).
job_canceled = _signals.signal(facts.JOB_CANCELED)
#: A job was PAUSED (``job_id``).
job_paused = _signals.signal(facts.JOB_PAUSED)
#: A job was resumed (``job_id``).
job_resumed = _signals.signal(facts.JOB_RESUMED)
#: A FAILED job was retried by hand (``job_id``): PENDING again, attempts reset, due now.
job_retried = _signals.signal(facts.JOB_RETRIED)
#: A batch ended (``batch_id``, ``name``, ``status``, ``total``, ``succeeded``, ``failed``).
batch_completed = _signals.signal(facts.BATCH_COMPLETED)
#: The last step of a chain SUCCEEDED (``job_id``: that step).
chain_completed = _signals.signal(facts.CHAIN_COMPLETED)
#: A chain step FAILED or was CANCELED; its downstream steps are canceled (``job_id``).
chain_failed = _signals.signal(facts.CHAIN_FAILED)
#: A dependent's condition held and it is due now (``job_id``, ``parent_id``, ``condition``).
branch_triggered = _signals.signal(facts.BRANCH_TRIGGERED)
#: Jobs matching a filter were canceled at once (``count``, ``filter``: what matched, as
#: given); no per-job ``job_canceled`` is sent for them.
jobs_bulk_canceled = _signals.signal(facts.JOBS_BULK_CANCELED)
#: FAILED jobs matching a filter were retried at once (``count``, ``filter``).
jobs_bulk_retried = _signals.signal(facts.JOBS_BULK_RETRIED)
#: Ended jobs matching a filter were deleted at once (``count``, ``filter``).
jobs_bulk_deleted = _signals.signal(facts.JOBS_BULK_DELETED)
#: WAITING jobs matching a filter were signaled at once (``count``, ``filter``); no per-job
#: ``job_signaled`` is sent for them.
jobs_bulk_signaled = _signals.signal(facts.JOBS_BULK_SIGNALED)
#: A job was written WAITING for a signal (``job_id``, ``key``).
job_signal_waiting = _signals.signal(facts.JOB_SIGNAL_WAITING)
#: A WAITING job's signal arrived: it is due now (``job_id``, ``key``).
job_signaled = _signals.signal(facts.JOB_SIGNALED)
#: A WAITING job's wait ended without its signal (``job_id``, ``key``, ``final``: it failed for
#: good; otherwise it waits again, one attempt spent).
job_signal_timed_out = _signals.signal(facts.JOB_SIGNAL_TIMED_OUT)

SIGNALS: dict[str, NamedSignal] = {
    s.name: s
    for s in (
        job_started,
        job_completed,
        job_failed,
        job_retrying,
        job_dead_lettered,
        job_canceled,
        job_paused,
        job_resumed,
        job_retried,
        batch_completed,
        chain_completed,
        chain_failed,
        branch_triggered,
        jobs_bulk_canceled,
        jobs_bulk_retried,
        jobs_bulk_deleted,
        jobs_bulk_signaled,
        job_signal_waiting,
        job_signaled,
        job_signal_timed_out,
    )
}


def wanted(signal: NamedSignal) -> bool:
    """Whether anyone listens: the hot path builds no event nobody would hear."""
    return bool(signal.receivers)
