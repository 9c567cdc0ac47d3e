"""A job's Sentry events, masked by ratchet's rules (:mod:`flask_ratchet.redact`) before they
leave the process, as the console masks what it shows.

The masking runs as the client's last step: ratchet wraps the client's ``before_send`` and
``before_send_transaction`` (the user's own hooks, if any, then get the masked event), at each
attempt and again, by a global event processor, for each job event (a hook set since, or a new
client, is wrapped before it is read). An event processor could not mask by itself: it runs too
early, before sentry-sdk adds a thread's stack (``attach_stacktrace``), and before a processor
of a request's scope adds the request (in eager mode). By the time ``before_send`` runs,
sentry-sdk has turned every value into JSON's kinds in every version from 2.11 on (an object
is its ``repr``), and cut variables, ``extra``, breadcrumb data and request bodies to its depth,
breadth and length limits; the pass here is linear in what is sent.

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
- the exceptions' messages, the plain message;
- breadcrumbs (the job's log lines: their text and data);
- the log entry of an event made from a log line: one that shows a secret is sent as its text,
  masked, without its parameters (a secret may sit in a parameter that says nothing of itself:
  ``"token=%s"``); its template, masked between its placeholders, stays, so Sentry still
  groups the lines of one call together;
- ``extra``, ``user``, ``request``, the tags but ratchet's own (``ratchet.task`` is a task's
  name, never a secret), every context but ratchet's, and of sentry-sdk's ``trace`` context
  the span's description, data and tags (its ids and sampling data go as they are);
- a transaction's spans: their descriptions, data and tags.

Not masked: the transaction's name (a task's or a route's; sentry-sdk also sends it in the
envelope's header, which no hook reaches); what sentry-sdk sends apart from events, which
carries no job: Sentry Logs (``enable_logs``), metrics, and spans sent one by one
(``trace_lifecycle="stream"``); and in eager mode the spans a job makes inside the request's
transaction, which is the request's event, not the job's.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ..redact import MASK, free_text_masked, text_masked

if TYPE_CHECKING:
    from sentry_sdk.client import BaseClient
    from sentry_sdk.types import Event, Hint

log = logging.getLogger("flask_ratchet.worker")

#: The tag that marks an event as sent from a job's scope.
JOB_TAG = "ratchet.job_id"
#: The tag of an encrypted job's events ("true"): their frames go without variables.
ENCRYPTED_TAG = "ratchet.encrypted"
#: Parts of an event walked whole.
WALKED = ("extra", "user", "request")
#: Tags left as they are: ratchet's own (the job's id, task, queue, attempt, node).
OWN_TAGS = "ratchet."
#: The parts of a span, and of sentry-sdk's ``trace`` context, that hold what the job's code
#: said (the rest: ids, op, status, and the sampling data, whose DSN public key is no secret
#: and must reach Sentry as it is).
SAID = ("description", "data", "tags")
#: The client's hooks that get the masking, last before sending.
HOOKS = ("before_send", "before_send_transaction")

Hook = Callable[["Event", "Hint"], "Event | None"]

#: A ``%``-style placeholder of a log call's template (``%s``, ``%(name)r``, ``%-8.3f``, ``%%``).
_PLACEHOLDER = re.compile(
    r"%(?:\([^)%]*+\))?[#0 +\-]*(?:\*|\d+)?(?:\.(?:\*|\d+))?[hlL]?[diouxXeEfFgGcrsa%]"
)


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
    """``event`` (as sentry-sdk has serialized it) with what a job had or said masked, and
    every frame's variables dropped if the job is encrypted."""
    tags = event.get("tags")
    if isinstance(tags, dict) and tags.get(ENCRYPTED_TAG) == "true":
        without_variables(event)
    for frame in _frames(event):
        module = str(frame.get("module") or "")
        if module == "flask_ratchet" or module.startswith("flask_ratchet."):
            frame.pop("vars", None)  # the job's arguments, under no name that says what they are
        elif (
            module == "logging" and isinstance(frame.get("vars"), dict) and "args" in frame["vars"]
        ):
            frame["vars"]["args"] = MASK  # a log call's parameters: "token=%s", ("t-1",)
        _mask_parts(frame, ("vars", "pre_context", "context_line", "post_context"))
    for value in _values(event, "exception"):
        if isinstance(value.get("value"), str):
            value["value"] = text_masked(value["value"])
    for crumb in _values(event, "breadcrumbs"):
        _mask_parts(crumb, ("message", "data"))
    entry = event.get("logentry")
    if isinstance(entry, dict):
        event["logentry"] = masked_logentry(entry)
    if isinstance(event.get("message"), str):
        event["message"] = text_masked(event["message"])
    _mask_parts(event, WALKED)  # type: ignore[arg-type]
    if isinstance(tags, dict):
        # Ratchet's own tags name the job: a task's name is no secret, even in a module
        # called password_reset, and masked it would merge tasks in Sentry's search.
        own = {name: value for name, value in tags.items() if str(name).startswith(OWN_TAGS)}
        others = {name: value for name, value in tags.items() if name not in own}
        event["tags"] = own | free_text_masked(others)
    contexts = event.get("contexts")
    if isinstance(contexts, dict):
        event["contexts"] = {
            name: _masked_context(name, context) for name, context in contexts.items()
        }
    spans = event.get("spans")
    for span in spans if isinstance(spans, list) else ():
        if isinstance(span, dict):
            _mask_parts(span, SAID)
    return event


def _mask_parts(part: dict[str, Any], keys: tuple[str, ...]) -> None:
    """Mask each of ``keys`` that ``part`` has, in place."""
    for key in keys:
        if key in part:
            part[key] = free_text_masked(part[key])


def _masked_context(name: str, context: Any) -> Any:
    if name == "ratchet":
        return context  # ours: the job, described as its tags are
    if name == "trace" and isinstance(context, dict):
        said = dict(context)  # a copy: the trace context is the scope's own
        _mask_parts(said, SAID)
        return said
    return free_text_masked(context)


def masked_logentry(entry: dict[str, Any]) -> dict[str, Any]:
    """A log line's entry (``message``, ``params``, ``formatted``), masked as the line reads.

    A line that shows nothing secret goes as it is. Otherwise it goes as its text, made from
    the masked template and parameters and masked again, without its parameters: a secret may
    sit in a parameter that says nothing of itself (``"token=%s"``), or in the template itself
    (an f-string's line). The template, masked, stays the entry's ``message``, so Sentry groups
    the lines of one call together as before.
    """
    message, params = entry.get("message"), entry.get("params")
    template = _template_masked(message) if isinstance(message, str) else free_text_masked(message)
    hidden_params = free_text_masked(params)
    text = entry.get("formatted")
    if not isinstance(text, str):
        text = _formatted(message, params)
    if text is None:  # parameters that do not fit the template: Sentry could not show them
        return {"message": template, "params": []}
    if template == message and hidden_params == params and text_masked(text) == text:
        return entry
    shown = _formatted(template, hidden_params) or text
    return {"message": template, "params": [], "formatted": text_masked(shown)}


def _template_masked(template: str) -> str:
    """A log call's template with the text between its placeholders masked: ``"token=%s"``
    stays as it is (the placeholder is no secret), an f-string's ``"token=t-1 for %s"`` loses
    its ``t-1``."""
    pieces, last = [], 0
    for placeholder in _PLACEHOLDER.finditer(template):
        pieces += [text_masked(template[last : placeholder.start()]), placeholder.group()]
        last = placeholder.end()
    return "".join([*pieces, text_masked(template[last:])])


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


def without_variables(event: Event) -> None:
    """Drop every frame's variables: an encrypted job's arguments are in its code's frames,
    under any name, and must leave the database sealed or not at all."""
    for frame in _frames(event):
        frame.pop("vars", None)


def _frames(event: Event) -> Iterator[dict[str, Any]]:
    """Every stack frame of ``event``: its exceptions' and its threads'."""
    for part in ("exception", "threads"):
        for value in _values(event, part):
            stacktrace = value.get("stacktrace")
            frames = stacktrace.get("frames") if isinstance(stacktrace, dict) else None
            for frame in frames or ():
                if isinstance(frame, dict):
                    yield frame
