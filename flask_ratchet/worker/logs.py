"""How a worker process logs when the app has not configured logging: plain lines for a
terminal, or one JSON object per line for a log shipper (``--log-format json``), with secrets
masked (:func:`flask_ratchet.redact.text_masked`) in either, whichever logger wrote the line."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from ..redact import text_masked
from ..store.types import ClaimedJob

#: Attributes of a record the JSON lines carry when set: a job's logger, and the worker's own
#: lines about a job, add them (see :func:`job_fields`).
_EXTRAS = ("job_id", "task", "queue", "attempt", "node")
#: Set (true) on the worker's line about a failed attempt (a retry, a dead letter). Error
#: trackers that report the attempt's exception themselves (:mod:`flask_ratchet.worker.sentry`)
#: drop an event made of such a line: the attempt is reported once. The leading underscore keeps
#: it out of the fields a handler copies from a record (sentry-sdk skips those).
FAILED_ATTEMPT = "_ratchet_failed_attempt"


def job_fields(
    job_id: object, task: str, queue: str, attempt: int, node: str | None
) -> dict[str, object]:
    """The fields a log line about one job carries (``extra=`` of a logging call)."""
    return {"job_id": str(job_id), "task": task, "queue": queue, "attempt": attempt, "node": node}


def claimed_fields(claimed: ClaimedJob, node: str | None) -> dict[str, object]:
    """The log fields of a claimed job's attempt."""
    return job_fields(claimed.job_id, claimed.task, claimed.queue, claimed.attempt, node)


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``time`` (UTC, ISO 8601), ``level``, ``logger``,
    ``message``; a job's ``job_id``, ``task``, ``queue``, ``attempt`` and ``node`` when the
    record has them (``attempt`` as a number); and ``exception`` (the formatted traceback)
    when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": text_masked(record.getMessage()),
        }
        for name in _EXTRAS:
            value = getattr(record, name, None)
            if value is not None:
                line[name] = value if isinstance(value, int) else str(value)
        if record.exc_info:
            # A job's line comes with its traceback formatted and masked already (exc_text).
            line["exception"] = text_masked(
                record.exc_text or self.formatException(record.exc_info)
            )
        return json.dumps(line, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """``time LEVEL logger: message``, and the traceback, with secrets masked in the message and
    the traceback (not in the logger's name: ``shop.tokens: …`` is no ``key: value``)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = text_masked(record.message)
        return super().formatMessage(record)

    def formatException(self, ei: Any) -> str:
        return text_masked(super().formatException(ei))


def configure(level: str | None, form: str) -> None:
    """Set up a worker's logging. ``level`` (a level name), when given, is the least severe
    line ratchet's loggers emit, and the least severe the handler added here writes (else
    INFO). If the app configured no handler, one is added to the root logger, writing ``form``
    (``text`` or ``json``) to stderr; else the app's configuration decides where lines go."""
    if level is not None:
        logging.getLogger("flask_ratchet").setLevel(level)
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler()
    if form == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter())
    # On the handler, not the root logger: lines propagated from a job's logger skip the
    # levels of the loggers above it, never a handler's.
    handler.setLevel(level or logging.INFO)
    root.addHandler(handler)
    root.setLevel(min(root.level, handler.level))
