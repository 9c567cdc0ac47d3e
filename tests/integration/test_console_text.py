"""Text a job or its task wrote, as the console shows it: characters that change how the text
around them reads (bidirectional overrides, zero-width spaces) are shown as escapes."""

from __future__ import annotations

import pytest
from flask import Flask

from flask_ratchet.store.types import Finished, Outcome
from tests.apps import ratchet, send_mail
from tests.integration.test_console import Console

#: An error that would read "payment for invoice_exe.pdf" with its override applied.
TRICK = "ValueError: payment for invoice_\u202efdp.exe\u200b"


@pytest.fixture
def console(app: Flask) -> Console:
    return Console(app.test_client())


def test_overrides_and_zero_width_characters_are_shown_as_escapes(console: Console) -> None:
    job_id = ratchet.enqueue(send_mail, "ann\u2066x\u2069\ufeff").submit().id
    (claimed,) = ratchet.claim_due(10, "node-a")
    outcome = Finished(job_id, Outcome.FAILED, claimed.task, claimed.attempt, error=TRICK)
    runtime = ratchet.runtime
    with runtime.store.begin(runtime.engine) as conn:
        assert job_id in runtime.store.executions.complete_many(conn, "node-a", [outcome])
    for url in (f"/ratchet/jobs/{job_id}", "/ratchet/jobs?status=FAILED", "/ratchet/dead-letters"):
        page = console.get(url).text
        assert "invoice_\\u202efdp.exe\\u200b" in page, url
        for char in "\u202e\u200b\u2066\u2069\ufeff":
            assert char not in page, (url, hex(ord(char)))
    assert "ann\\u2066x\\u2069\\ufeff" in console.get(f"/ratchet/jobs/{job_id}").text
