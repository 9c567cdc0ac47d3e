"""Text a job or its task wrote, as the console shows it: characters that change how the text
around them reads (bidirectional overrides, zero-width spaces) are shown as escapes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

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


#: Right-to-left words (Arabic, Hebrew) and the override that reverses what follows it.
ARABIC = "\u0645\u0631\u062d\u0628\u0627"
HEBREW = "\u05e9\u05dc\u05d5\u05dd"
RLO = "\u202e"


def test_right_to_left_user_text_is_isolated_and_its_controls_shown(console: Console) -> None:
    tag, key, node = f"{ARABIC}{RLO}gat", f"{HEBREW}{RLO}yek", f"{HEBREW}-node{RLO}"
    job = ratchet.enqueue(send_mail, f"{ARABIC} {RLO}x").with_tags(tag).with_business_key(key)
    job_id = job.submit().id
    (claimed,) = ratchet.claim_due(10, node)
    error = f"ValueError: {ARABIC} {RLO}fdp.exe"
    shown = f"ValueError: {ARABIC} \\u202efdp.exe"
    outcome = Finished(
        job_id, Outcome.FAILED, claimed.task, claimed.attempt, datetime.now(UTC), 5.0, error=error
    )
    runtime = ratchet.runtime
    with runtime.store.begin(runtime.engine) as conn:
        assert job_id in runtime.store.executions.complete_many(conn, node, [outcome])
    batch = ratchet.enqueue_batch(f"{ARABIC}{RLO}batch")
    batch.add(send_mail, "ann")
    batch_id = batch.submit().id
    master = ratchet.schedule_recurring(timedelta(hours=1), "UTC", send_mail, "bob")
    master.with_name(f"{HEBREW}{RLO}ylthgin").submit()

    page = console.get(f"/ratchet/jobs/{job_id}").text
    assert '<a class="tag" href="/ratchet/jobs?tag=' in page
    assert f"><bdi>{ARABIC}\\u202egat</bdi></a>" in page  # an inline tag, isolated
    assert '<dd dir="auto"><a href="/ratchet/jobs?business_key=' in page
    assert f">{HEBREW}\\u202eyek</a></dd>" in page
    assert f'<td dir="auto">{HEBREW}-node\\u202e</td>' in page  # the execution's node
    assert f'<pre class="error" dir="auto" hx-disable>{shown}' in page
    assert f'<pre dir="auto" hx-disable>{{\n  &#34;args&#34;: [\n    &#34;{ARABIC} \\u202ex' in page
    dead = console.get("/ratchet/dead-letters").text
    assert f'<bdi class="error">{shown}</bdi>' in dead
    batches = console.get("/ratchet/batches").text
    assert f"<bdi>{ARABIC}\\u202ebatch</bdi></a>" in batches
    one = console.get(f"/ratchet/batches/{batch_id}").text
    assert f'<span class="batch-name"><bdi>{ARABIC}\\u202ebatch</bdi></span>' in one
    recurring = console.get("/ratchet/recurring").text
    assert f'<span class="muted"><bdi>{HEBREW}\\u202eylthgin</bdi></span>' in recurring
    for text in (page, dead, batches, one, recurring):
        assert RLO not in text and (ARABIC in text or HEBREW in text)
