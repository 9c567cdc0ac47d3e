"""A job's Sentry events, masked by ratchet's rules (:mod:`flask_ratchet.redact`) before they
leave the process, as the console masks what it shows.

The masking runs as the client's last step: ratchet wraps the client's ``before_send`` and
``before_send_transaction`` (the user's own hooks, if any, then get the masked event). An event
processor would run too early: sentry-sdk adds a thread's stack (``attach_stacktrace``) after
the processors, and the request's data (in eager mode) with a processor of the request's scope
that runs after a global one. By the time ``before_send`` runs, sentry-sdk has turned every
value into JSON's kinds, cut to its own depth, breadth and length limits (a variable's object
is its ``repr``), in every version from 2.11 on, so the pass here is bounded by what is sent.

What is masked, in an event tagged with a job (``ratchet.job_id``):

- every stack frame's variables (the job's arguments among them): values under secret-looking
  keys at any depth sentry-sdk keeps, URL passwords and ``password=…``-style secrets in any
  string (a key too), and ``[key, value]`` pairs with a secret-looking key. Below sentry-sdk's
  depth (5), and inside an object's ``repr``, only the free-text rules apply (URL passwords,
  ``password=…``/``token: …`` pairs); a secret under a key they do not know (``cvv``) stays;
- the frames' source lines, by the free-text rules;
- ratchet's own frames go without their variables: they hold the job's arguments (``args``,
  ``kwargs``, the claimed row) under no name that says what they are; and the parameters of a
  log call (``args`` in the ``logging`` module's frames, as ``attach_stacktrace`` shows them)
  are masked whole;
- the exceptions' messages, the plain message, the transaction's name;
- breadcrumbs (the job's log lines: their text and data);
- the log entry of an event made from a log line: one whose text masking changes is sent as
  that masked text, without its parameters (a secret may sit in a parameter that says nothing
  of itself: ``"token=%s"``); its template stays, so Sentry still groups it;
- ``extra``, ``user``, ``tags``, ``request`` and every context but ``trace`` (sentry-sdk's own
  sampling data) and ``ratchet`` (ours);
- a transaction's spans: their descriptions, data and tags.

Not masked: Sentry Logs (``enable_logs``), which are sent apart from events and carry no job.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ..redact import MASK, free_text_masked, text_masked

if TYPE_CHECKING:
    from sentry_sdk.client import BaseClient
    from sentry_sdk.types import Event, Hint

log = logging.getLogger("flask_ratchet.worker")

#: The tag that marks an event as sent from a job's scope.
JOB_TAG = "ratchet.job_id"
#: Parts of an event walked whole.
WALKED = ("extra", "user", "tags", "request")
#: Contexts left as they are: sentry-sdk's trace (its sampling data holds a DSN's public key,
#: which is no secret and must reach Sentry as it is) and ratchet's own.
KEPT_CONTEXTS = frozenset({"trace", "ratchet"})
#: The client's hooks that get the masking, last before sending.
HOOKS = ("before_send", "before_send_transaction")

Hook = Callable[["Event", "Hint"], "Event | None"]


class MaskingHook:
    """A client hook that masks a job's events, then hands them to the hook it wraps."""

    def __init__(self, wrapped: Hook | None) -> None:
        self.wrapped = wrapped

    def __call__(self, event: Event, hint: Hint) -> Event | None:
        if JOB_TAG in (event.get("tags") or {}):
            try:
                event = masked_event(event)
            except Exception:
                # Never sent unmasked: dropped (sentry-sdk counts it as lost).
                log.warning("a job's Sentry event could not be masked: not sent", exc_info=True)
                return None
        return event if self.wrapped is None else self.wrapped(event, hint)


def guard(client: BaseClient) -> None:
    """Make ``client`` mask a job's events as its last step before sending (once per client)."""
    options = client.options
    for name in HOOKS:
        hook = options.get(name)
        if not isinstance(hook, MaskingHook):
            options[name] = MaskingHook(hook)


def masked_event(event: Event) -> Event:
    """``event`` (as sentry-sdk has serialized it) with what a job had or said masked."""
    for frame in _frames(event):
        module = str(frame.get("module") or "")
        if module == "flask_ratchet" or module.startswith("flask_ratchet."):
            frame.pop("vars", None)  # the job's arguments, under no name that says what they are
        elif (
            module == "logging" and isinstance(frame.get("vars"), dict) and "args" in frame["vars"]
        ):
            frame["vars"]["args"] = MASK  # a log call's parameters: "token=%s", ("t-1",)
        for key in ("vars", "pre_context", "context_line", "post_context"):
            if key in frame:
                frame[key] = free_text_masked(frame[key])
    for value in _values(event, "exception"):
        if isinstance(value.get("value"), str):
            value["value"] = text_masked(value["value"])
    for crumb in _values(event, "breadcrumbs"):
        for key in ("message", "data"):
            if key in crumb:
                crumb[key] = free_text_masked(crumb[key])
    entry = event.get("logentry")
    if isinstance(entry, dict):
        event["logentry"] = masked_logentry(entry)
    for key in ("message", "transaction"):
        if isinstance(event.get(key), str):
            event[key] = text_masked(event[key])  # type: ignore[literal-required]
    for key in WALKED:
        if key in event:
            event[key] = free_text_masked(event[key])  # type: ignore[literal-required]
    contexts = event.get("contexts")
    if isinstance(contexts, dict):
        event["contexts"] = {
            name: context if name in KEPT_CONTEXTS else free_text_masked(context)
            for name, context in contexts.items()
        }
    spans = event.get("spans")
    for span in spans if isinstance(spans, list) else ():
        if isinstance(span, dict):
            for key in ("description", "data", "tags"):
                if key in span:
                    span[key] = free_text_masked(span[key])
    return event


def masked_logentry(entry: dict[str, Any]) -> dict[str, Any]:
    """A log line's entry (``message``, ``params``, ``formatted``), masked as the line reads.

    The template (``message``) is kept, for Sentry's grouping. When masking hides part of a
    parameter, the line's text is made again from the masked parameters; when the text shows a
    secret no parameter reveals by its key (``"token=%s"``), the line goes as that text masked,
    without its parameters.
    """
    message, params = entry.get("message"), entry.get("params")
    hidden_params = free_text_masked(params)
    if hidden_params != params:
        text = _formatted(message, hidden_params)
        if text is None:
            return {"message": free_text_masked(message), "params": []}
        return {"message": message, "params": hidden_params, "formatted": text_masked(text)}
    text = entry.get("formatted")
    if not isinstance(text, str):
        text = _formatted(message, params)
    if text is None:  # parameters that do not fit the template: Sentry could not show them
        return {"message": free_text_masked(message), "params": []}
    hidden = text_masked(text)
    if hidden != text:
        return {"message": message, "params": [], "formatted": hidden}
    return free_text_masked(entry)  # type: ignore[no-any-return]


def _formatted(message: object, params: object) -> str | None:
    """The line's text, as logging would have made it; ``None`` if it cannot be made."""
    if not isinstance(message, str):
        return None
    if not params:
        return message
    try:
        return message % (tuple(params) if isinstance(params, list) else params)
    except Exception:  # a line whose parameters do not fit its template
        return None


def _values(event: Event, part: str) -> Iterator[dict[str, Any]]:
    """The entries of ``event[part]["values"]`` that are dicts."""
    found = event.get(part)
    values = found.get("values") if isinstance(found, dict) else None
    for value in values or ():
        if isinstance(value, dict):
            yield value


def _frames(event: Event) -> Iterator[dict[str, Any]]:
    """Every stack frame of ``event``: its exceptions' and its threads'."""
    for part in ("exception", "threads"):
        for value in _values(event, part):
            stacktrace = value.get("stacktrace")
            frames = stacktrace.get("frames") if isinstance(stacktrace, dict) else None
            for frame in frames or ():
                if isinstance(frame, dict):
                    yield frame
