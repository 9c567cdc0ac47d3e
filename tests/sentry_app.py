"""An app with Sentry set up, and the tasks the Sentry tests run. Importable by worker
subprocesses as ``tests.sentry_app``; importing it sets nothing up (``create_app`` does).

Events go to a real sentry-sdk client whose transport, instead of sending them anywhere, appends
each event as a JSON line to the file ``$RATCHET_TEST_SENTRY_EVENTS`` names.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from typing import Any

import sentry_sdk
from flask import Flask
from sentry_sdk.envelope import Envelope
from sentry_sdk.transport import Transport

from flask_ratchet import Backoff, JobContext
from flask_ratchet.worker.sentry import RatchetIntegration
from tests.apps import create_app as create_plain_app
from tests.apps import ratchet

#: sentry-sdk wants a DSN to build a client; nothing is ever sent to it.
DSN = "http://public@127.0.0.1:9/1"
#: What :func:`create_app` logs once Sentry is set up.
SET_UP = "sentry is set up"


class FileTransport(Transport):
    """Appends the events of each envelope to ``$RATCHET_TEST_SENTRY_EVENTS``, one JSON line
    each (sessions and client reports are not events: skipped)."""

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        super().__init__(options)
        self.path = os.environ["RATCHET_TEST_SENTRY_EVENTS"]
        self.lock = threading.Lock()

    def capture_envelope(self, envelope: Envelope) -> None:
        event = envelope.get_event()
        if event is None:
            return
        line = json.dumps(event, default=str) + "\n"
        with self.lock, open(self.path, "a", encoding="utf-8") as out:
            out.write(line)


def read_events(path: str) -> list[dict[str, Any]]:
    """The events a :class:`FileTransport` wrote to ``path`` so far."""
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.endswith("\n")]


def create_app(url: str | None = None, **config: Any) -> Flask:
    """The test app, with ``sentry_sdk.init`` called first as an app would in its factory.

    ``$RATCHET_TEST_SENTRY`` may say ``disabled`` (``disabled_integrations`` names ratchet's).
    """
    options: dict[str, Any] = {}
    if os.environ.get("RATCHET_TEST_SENTRY") == "disabled":
        options["disabled_integrations"] = [RatchetIntegration()]
    sentry_sdk.init(dsn=DSN, transport=FileTransport, **options)
    # A breadcrumb on the thread that makes the app: the worker's threads start with it.
    logging.getLogger(__name__).warning(SET_UP)
    return create_plain_app(url, **config)


# -- tasks ----------------------------------------------------------------------------------------


@ratchet.task(max_retries=1, backoff=Backoff.FIXED, backoff_base=0.2)
def always_fails(order: int) -> None:
    """Fails on every attempt: with ``max_retries=1``, once retried and once for good."""
    ctx = JobContext.current()
    ctx.logger.info("charging order %d, attempt %d", order, ctx.attempt)
    raise LookupError(f"order {order} not found (attempt {ctx.attempt}), token=s3cr3t")


@ratchet.task(max_retries=0, timeout=0.5)
def stalls() -> None:
    """Runs past its timeout of 0.5 s (in Python code, so the timeout reaches it)."""
    JobContext.current().logger.info("stalling")
    end = time.monotonic() + 30
    while time.monotonic() < end:
        time.sleep(0.02)


@ratchet.task
def complains() -> str:
    """Succeeds, after logging an error of its own."""
    JobContext.current().logger.error("the printer is on fire")
    return "done"


@ratchet.task(max_retries=0)
def leaks(settings: dict[str, Any]) -> None:
    """Holds secrets in its arguments, locals, log lines and what it tells Sentry, then fails
    for good."""
    ctx = JobContext.current()
    client_secret = settings["stripe"]["client_secret"]
    sentry_sdk.set_context("stripe", settings["stripe"])
    sentry_sdk.set_tag("database", settings["dsn"])
    sentry_sdk.set_user({"id": 7, "session": client_secret})
    ctx.logger.info("paying with client_secret=%s", client_secret)
    ctx.logger.error("the gateway refused token=%s", client_secret)
    raise ConnectionError(f"cannot reach {settings['dsn']}")
