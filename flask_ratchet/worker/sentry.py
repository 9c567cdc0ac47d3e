"""Job errors reported to Sentry: one event for every failed attempt, tagged with its job.

Nothing to set up but ``sentry_sdk.init(...)`` in the app (or in the worker's process before the
app is made): an attempt that fails reaches Sentry as an event carrying the exception the job's
code raised, with the tags ``ratchet.job_id``, ``ratchet.task``, ``ratchet.queue``,
``ratchet.attempt``, ``ratchet.node`` and ``ratchet.final``, a ``ratchet`` context (those
fields, ``max_retries``, and the retry's delay), and the task as its transaction. An attempt
that will be retried is a ``warning`` with ``ratchet.final`` ``false``; a job that failed for
good (retries spent, ``DoNotRetry``, a timeout on its last attempt, an unreadable row, a task no
worker knows) is an ``error`` with ``ratchet.final`` ``true``.

Why an integration of ours and not sentry-sdk's logging integration: the worker logs a failed
attempt on the completer's thread once its outcome is written, where the exception is gone,
and logs a retry as a WARNING, which that integration keeps as a breadcrumb only. Here the
exception is reported where it is still alive, on the job's thread, once per attempt whose
outcome is handed to the completer (so a timeout, which the watchdog reports, is one event even
when the job's thread raises later). The worker's own line about the attempt is then marked
(:data:`~flask_ratchet.worker.logs.FAILED_ATTEMPT`) and its event dropped by a global event
processor: ignoring the ``flask_ratchet.worker`` logger would also silence the worker's other
errors, and the mark drops exactly the lines that repeat an event already sent (the breadcrumbs
stay). When a report fails, the line about that attempt is let through: for a job that failed
for good, an ERROR line, it is then the one event Sentry gets.

Grouping: every attempt of one error is one issue (Sentry's grouping by stack trace), so the
issue counts how often the error struck, and its ``ratchet.final`` tag how often a retry did not
save the job; an alert rule filtered on level ``error`` (or the tag) fires for lost jobs only.
An error ratchet made without a traceback (a timeout ended by the watchdog, a task no worker
knows) would be grouped by its message, which names the job's own numbers: it is grouped by
task and error type instead, as sentry-sdk's RQ and Celery integrations group their timeouts.

The error's message is masked as the job's stored error is (:func:`flask_ratchet.retry.sanitize`:
``password=``-style values, URL passwords), so Sentry shows what the console shows. Every event
sent from a job's scope (ours, and whatever the job's code sends) is then masked by the same
rules as the client's last step (:mod:`.sentry_masks`): its frames' variables, the job's
arguments among them, its breadcrumbs (the job's log lines), and the rest of what it carries.

Each attempt runs in an isolation scope of its own (as sentry-sdk's Celery and RQ integrations
run each task): breadcrumbs start empty (the job's own log lines become its breadcrumbs), and
whatever the job's code sends (``ctx.logger.error``, ``sentry_sdk.capture_exception``) carries
the job's tags. That costs about 8 µs a job when Sentry is set up; a process that never
imported ``sentry_sdk`` pays one dictionary lookup (the executor imports this module only then).

When it is on: the process's Sentry client is active, and either :class:`RatchetIntegration`
is among its integrations, or the client enables integrations by itself (``default_integrations``
and ``auto_enabling_integrations``, both true by default) and ``disabled_integrations`` does not
name :class:`RatchetIntegration`; as sentry-sdk's own integrations for other libraries behave.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING

import sentry_sdk
from sentry_sdk.integrations import Integration
from sentry_sdk.scope import Scope, add_global_event_processor, use_isolation_scope
from sentry_sdk.utils import event_from_exception

from ..retry import sanitize
from ..sealing import is_sealed
from ..store.types import ClaimedJob, Finished, Outcome
from . import sentry_masks
from .logs import FAILED_ATTEMPT

if TYPE_CHECKING:
    from sentry_sdk.client import BaseClient
    from sentry_sdk.types import Event, Hint

log = logging.getLogger("flask_ratchet.worker")

#: The ``mechanism`` of the events made here (how Sentry says an error was caught).
MECHANISM = "flask_ratchet"


class RatchetIntegration(Integration):
    """Job errors to Sentry, one event per failed attempt (see :mod:`flask_ratchet.worker.sentry`).

    On by itself wherever sentry-sdk enables integrations by itself; list it when you turn
    those off::

        sentry_sdk.init(dsn=..., default_integrations=False,
                        integrations=[RatchetIntegration()])

    and name it to turn the reports off: ``disabled_integrations=[RatchetIntegration()]``.
    """

    identifier = "flask_ratchet"

    @staticmethod
    def setup_once() -> None:
        _install()


def reporting() -> bool:
    """Whether job errors go to the Sentry client of this process now."""
    global _decided
    client = sentry_sdk.get_client()
    decided = _decided
    if decided[0] is client:
        return decided[1]
    answer = client.is_active() and _enabled(client)
    if answer:
        _install()
        sentry_masks.guard(client)
    _decided = (client, answer)
    return answer


def active() -> bool:
    """:func:`reporting`, never raising: a client that cannot say is taken as off (logged)."""
    try:
        return reporting()
    except Exception:
        log.warning("Sentry's client could not be read: job errors are not reported", exc_info=True)
        return False


@contextmanager
def attempt_scope(
    claimed: ClaimedJob, node: str | None, *, new_trace: bool = True
) -> Iterator[Scope | None]:
    """Run one attempt in an isolation scope of its own, tagged with the job, its breadcrumbs
    cleared; yield that scope (``None`` when nothing is reported).

    ``new_trace``: the attempt starts a trace of its own (a worker's job threads); otherwise it
    stays in the caller's (a job run in-process, as part of a request in eager mode).

    Never raises of its own: a scope that cannot be opened or closed is logged, and the
    attempt runs (or has run) all the same; what the attempt raises passes through.
    """
    stack = ExitStack()
    try:
        scope: Scope | None = None
        if reporting():
            scope = stack.enter_context(sentry_sdk.isolation_scope())
            scope.clear_breadcrumbs()
            if new_trace:
                scope.set_new_propagation_context()
            _describe(scope, claimed, node)
    except Exception:
        log.warning("job %s: no Sentry scope for this attempt", claimed.job_id, exc_info=True)
        _close(stack, claimed)
        stack, scope = ExitStack(), None
    try:
        yield scope
    finally:
        _close(stack, claimed)


def _close(stack: ExitStack, claimed: ClaimedJob) -> None:
    try:
        stack.close()
    except Exception:
        log.warning("job %s: its Sentry scope could not be closed", claimed.job_id, exc_info=True)


def report_failure(
    exc: BaseException,
    claimed: ClaimedJob,
    finished: Finished,
    node: str | None,
    job_scope: object = None,
) -> None:
    """Send one event for the failed attempt ``finished`` reports, carrying ``exc``.

    ``job_scope`` is the attempt's scope (:func:`attempt_scope`) when the event is sent from
    another thread (the watchdog's, for a timeout): its breadcrumbs, the job's log lines, go
    with the event. Never raises: a report that fails is logged, and the outcome is written
    all the same.
    """
    try:
        if reporting():
            _capture(exc, claimed, finished, node, job_scope)
    except Exception:
        # The worker's own line about this attempt is then the one event Sentry gets of it.
        _unreported(str(claimed.job_id), claimed.attempt)
        log.warning(
            "job %s: its error could not be reported to Sentry", claimed.job_id, exc_info=True
        )


def _capture(
    exc: BaseException,
    claimed: ClaimedJob,
    finished: Finished,
    node: str | None,
    job_scope: object,
) -> None:
    client = sentry_sdk.get_client()
    final = finished.outcome is Outcome.FAILED
    event, hint = event_from_exception(
        exc, client_options=client.options, mechanism={"type": MECHANISM, "handled": False}
    )
    for value in event.get("exception", {}).get("values", ()):
        if isinstance(value.get("value"), str):
            value["value"] = sanitize(value["value"])
    if is_sealed(claimed.payload):
        sentry_masks.without_variables(event)
    if exc.__traceback__ is None:
        event["fingerprint"] = [MECHANISM, str(claimed.task), type(exc).__name__]
    with ExitStack() as stack:
        if isinstance(job_scope, Scope) and job_scope is not Scope.get_isolation_scope():
            # A copy: the job's thread may still be adding breadcrumbs to its own.
            stack.enter_context(use_isolation_scope(job_scope.fork()))
        scope = stack.enter_context(sentry_sdk.new_scope())
        _describe(scope, claimed, node)
        scope.set_tag("ratchet.final", "true" if final else "false")
        scope.set_level("error" if final else "warning")
        scope.set_context(
            "ratchet",
            {
                "job_id": str(claimed.job_id),
                "task": claimed.task,
                "queue": claimed.queue,
                "attempt": claimed.attempt,
                "max_retries": claimed.max_retries,
                "node": node,
                "final": final,
                "retry_in_seconds": None if final else finished.delay,
            },
        )
        sentry_sdk.capture_event(event, hint=hint)


def _describe(scope: Scope, claimed: ClaimedJob, node: str | None) -> None:
    """Tag ``scope`` with the attempt's job, and name the task as its transaction."""
    tags = {
        sentry_masks.JOB_TAG: str(claimed.job_id),
        "ratchet.task": str(claimed.task),
        "ratchet.queue": str(claimed.queue),
        "ratchet.attempt": str(claimed.attempt),
    }
    if node is not None:
        tags["ratchet.node"] = node
    if is_sealed(claimed.payload):
        tags[sentry_masks.ENCRYPTED_TAG] = "true"
    scope.set_tags(tags)
    scope.set_transaction_name(str(claimed.task), source="task")


def _enabled(client: BaseClient) -> bool:
    """Whether the client's configuration lets ratchet report (see the module's docstring)."""
    options = client.options
    # First: sentry-sdk checks ``disabled_integrations`` only when it first installs an
    # integration in the process, so a later client may list one it disables.
    disabled = options.get("disabled_integrations") or ()
    if any(item is RatchetIntegration or isinstance(item, RatchetIntegration) for item in disabled):
        return False
    if client.get_integration(RatchetIntegration) is not None:
        return True
    return bool(options.get("default_integrations") and options.get("auto_enabling_integrations"))


def _drop_repeated_line(event: Event, hint: Hint) -> Event | None:
    """Drop the event sentry-sdk's logging integration makes of the worker's line about a failed
    attempt, when that attempt was reported here."""
    record = hint.get("log_record")
    if record is None or not getattr(record, FAILED_ATTEMPT, False) or not reporting():
        return event
    key = (str(getattr(record, "job_id", "")), getattr(record, "attempt", None))
    with _not_sent_lock:
        if key in _not_sent:
            del _not_sent[key]
            return event
    return None


def _guard_sending_client(event: Event, hint: Hint) -> Event | None:
    """Make sure the client about to send a job's event masks it: since the attempt began, its
    ``before_send`` may have been replaced, or the client itself. (Event processors run before
    the client reads its ``before_send``.)"""
    if sentry_masks.JOB_TAG in (event.get("tags") or {}):
        sentry_masks.guard(sentry_sdk.get_client())
    return event


def _unreported(job_id: str, attempt: int) -> None:
    """Remember an attempt whose report failed, so that the line about it is not dropped
    (at most :data:`UNREPORTED_KEPT`: past that the oldest are forgotten, dropped lines)."""
    with _not_sent_lock:
        _not_sent[(job_id, attempt)] = None
        while len(_not_sent) > UNREPORTED_KEPT:
            del _not_sent[next(iter(_not_sent))]


def _install() -> None:
    """Add the global event processor, once per process."""
    global _installed
    with _install_lock:
        if not _installed:
            add_global_event_processor(_drop_repeated_line)
            add_global_event_processor(_guard_sending_client)
            _installed = True


#: The client last asked about, and whether it reports (one question per client, not per job).
_decided: tuple[object, bool] = (None, False)
_installed = False
_install_lock = threading.Lock()
#: Attempts whose report failed, oldest first (a dict as an ordered set).
_not_sent: dict[tuple[str, object], None] = {}
_not_sent_lock = threading.Lock()
#: How many of those are remembered.
UNREPORTED_KEPT = 1000
