"""A claimed row, read as untrusted on the job's own thread: its columns checked and its call
decoded before anything runs (:func:`read_claimed`), and whether a failed attempt is retried
(:func:`retry_decision`). A row ratchet could not have written fails its job for good, naming the
column, and never the worker."""

from __future__ import annotations

from typing import Any

from .. import payload
from ..errors import UnreadableJob
from ..options import Backoff
from ..retry import Decision, RetryRules, decide
from ..sealing import Keyring, is_sealed
from ..store.types import ClaimedJob


def read_claimed(
    claimed: ClaimedJob, keyring: Keyring
) -> tuple[list[Any], dict[str, Any], dict[str, Any] | None]:
    """Check what the claim read from the job's row and decode its JSON columns: the call's
    ``(args, kwargs)``, and the params (``None`` if the job has none), opened with ``keyring``
    if they are sealed (:mod:`flask_ratchet.sealing`).

    Runs once per job on the hot path: the checks are plain type and range tests (a NaN fails
    every comparison, so ``not x >= 0`` refuses it too).

    :raises UnreadableJob: naming the first column that ratchet could not have written.
    """
    text, params_text = claimed.payload, claimed.params
    if is_sealed(text):
        text = keyring.open(text, claimed.job_id, "payload")
    if params_text is not None and is_sealed(params_text):
        params_text = keyring.open(params_text, claimed.job_id, "params")
    args, kwargs = payload.decode_call(text)
    params = None
    if params_text is not None:
        params = payload.decode_stored("params", params_text, dict) or {}
    if claimed.backoff not in _BACKOFFS:
        raise UnreadableJob(
            f"column 'backoff' holds {claimed.backoff!r}, not one of {', '.join(_BACKOFFS)}"
        )
    base = claimed.backoff_base
    if type(base) not in _NUMBERS or not base >= 0:
        raise UnreadableJob(f"column 'backoff_base' holds {base!r}, not a number of seconds >= 0")
    timeout = claimed.timeout
    if timeout is not None and (type(timeout) not in _NUMBERS or not timeout > 0):
        raise UnreadableJob(
            f"column 'timeout' holds {timeout!r}, not a positive number of seconds or NULL"
        )
    if type(claimed.attempt) is not int:
        raise UnreadableJob(f"column 'attempts' holds {claimed.attempt!r}, not an integer")
    if type(claimed.max_retries) is not int:
        raise UnreadableJob(f"column 'max_retries' holds {claimed.max_retries!r}, not an integer")
    return args, kwargs, params


#: What a claimed row's ``backoff`` may hold, and the types its numbers may come back as (never
#: ``bool``, a subclass of ``int`` no driver returns for these columns).
_BACKOFFS = tuple(b.value for b in Backoff)
_NUMBERS = (int, float)


def retry_decision(claimed: ClaimedJob, exc: BaseException, rules: RetryRules) -> Decision:
    """Whether to retry a failed attempt, by the row's retry columns and the task's ``rules``.
    A row whose retry columns cannot be used (possible only if the watchdog ends the attempt
    before :func:`read_claimed` refused the row) is not retried."""
    try:
        return decide(
            exc,
            claimed.attempt,
            claimed.max_retries,
            Backoff(claimed.backoff),
            claimed.backoff_base,
            rules,
        )
    except (ValueError, TypeError, ArithmeticError):
        return Decision(retry=False)
