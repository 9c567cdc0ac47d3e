"""Jobs run in-process (``run_jobs``) with a real sentry-sdk client: one event per failed
attempt, when sentry-sdk's configuration lets ratchet's integration report."""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sentry_sdk
import sentry_sdk.integrations as sentry_integrations
from flask import Flask
from sentry_sdk.scope import Scope

from flask_ratchet.testing import run_jobs
from flask_ratchet.worker.sentry import RatchetIntegration
from tests.apps import add, create_app, db, fail_until, ratchet, refuse
from tests.async_tasks import async_fail_until
from tests.sentry_app import DSN, FileTransport, always_fails, leaks, read_events

Events = Callable[[], list[dict[str, Any]]]


@pytest.fixture
def sentry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Events]]:
    """``sentry(**options)`` sets up a real client in this process, whose events the returned
    function reads back; the client is closed and unset after the test."""
    path = tmp_path / "sentry-events.jsonl"
    monkeypatch.setenv("RATCHET_TEST_SENTRY_EVENTS", str(path))

    def init(**options: Any) -> Events:
        # Not sentry-sdk's integrations for Flask and SQLAlchemy: in the test process they
        # would stay installed (inert) for every later test.
        sentry_sdk.init(
            dsn=DSN, transport=FileTransport, auto_enabling_integrations=False, **options
        )
        return lambda: read_events(str(path))

    yield init
    sentry_sdk.get_client().close()
    Scope.get_global_scope().set_client(None)
    # sentry-sdk sets each integration up once per process: one a test disabled is marked as
    # seen and never set up by a later init in the same test process (an app inits once).
    installed = sentry_integrations._installed_integrations
    if RatchetIntegration.identifier not in installed:
        sentry_integrations._processed_integrations.discard(RatchetIntegration.identifier)


def test_in_process_runs_report_each_failed_attempt(
    app: Flask, sentry: Callable[..., Events]
) -> None:
    events = sentry(integrations=[RatchetIntegration()])  # listed: on whatever the defaults
    flaky = fail_until.enqueue(2).id
    doomed = always_fails.enqueue(3).id
    flaky_async = async_fail_until.enqueue(2).id
    add.enqueue(1, 1)
    run_jobs(app)
    sent = events()
    seen = [
        (
            e["tags"]["ratchet.job_id"],
            e["tags"]["ratchet.attempt"],
            e["tags"]["ratchet.final"],
            e["level"],
            e["exception"]["values"][-1]["type"],
        )
        for e in sent
    ]
    assert sorted(seen) == sorted(
        [
            (str(flaky), "1", "false", "warning", "ConnectionError"),
            (str(doomed), "1", "false", "warning", "LookupError"),
            (str(doomed), "2", "true", "error", "LookupError"),
            (str(flaky_async), "1", "false", "warning", "ConnectionError"),
        ]
    )
    (from_async,) = [e for e in sent if e["tags"]["ratchet.job_id"] == str(flaky_async)]
    assert from_async["exception"]["values"][-1]["value"] == "async attempt 1 failed"
    assert from_async["tags"]["ratchet.task"] == "tests.async_tasks:async_fail_until"
    assert {e["tags"]["ratchet.node"] for e in sent} == {"inline"}
    # In-process, an attempt stays in the caller's trace (a request's, in eager mode).
    caller_trace = sentry_sdk.get_traceparent().split("-")[0]  # type: ignore[union-attr]
    assert {e["contexts"]["trace"]["trace_id"] for e in sent} == {caller_trace}


@pytest.mark.parametrize(
    "options",
    [
        {},  # sentry-sdk's auto-enabling integrations off (the fixture's), ours not listed
        {"integrations": [RatchetIntegration()], "disabled_integrations": [RatchetIntegration]},
    ],
    ids=["not-auto-enabled", "disabled"],
)
def test_when_sentry_sdk_leaves_ratchet_out_only_the_log_line_is_sent(
    app: Flask, sentry: Callable[..., Events], options: dict[str, Any]
) -> None:
    events = sentry(**options)
    dead = refuse.enqueue("card expired").id
    run_jobs(app)
    (line,) = events()  # sentry-sdk's logging integration makes the worker's ERROR line one
    assert line["logger"] == "flask_ratchet.worker"
    assert line["logentry"]["message"].startswith("job %s (%s) failed for good")
    assert line["extra"]["job_id"] == str(dead)  # the line's fields, as sentry-sdk copies them
    assert "exception" not in line and "ratchet.job_id" not in line.get("tags", {})


def test_a_sentry_scope_that_cannot_be_opened_never_fails_a_job(
    app: Flask, sentry: Callable[..., Events], monkeypatch: pytest.MonkeyPatch
) -> None:
    events = sentry(integrations=[RatchetIntegration()])

    def broken() -> None:
        raise RuntimeError("no scope today")

    monkeypatch.setattr(sentry_sdk, "isolation_scope", broken)
    ok = add.enqueue(1, 1).id
    flaky = fail_until.enqueue(2).id
    ran = {job.id: job.status.value for job in run_jobs(app)}
    assert ran == {ok: "SUCCEEDED", flaky: "SUCCEEDED"}
    # The failed attempt is still reported, from the caller's scope.
    (event,) = events()
    assert event["tags"]["ratchet.job_id"] == str(flaky)


def test_a_sentry_sdk_the_hooks_cannot_use_turns_reports_off_and_runs_the_jobs(
    app: Flask, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from flask_ratchet.worker import runs

    # As with sentry-sdk 1.x imported by the app: importing the hooks fails.
    monkeypatch.setattr(runs, "_sentry", None)
    monkeypatch.setitem(sys.modules, "flask_ratchet.worker.sentry", None)
    assert "sentry_sdk" in sys.modules
    flaky = fail_until.enqueue(2).id
    ran = {job.id: job.status.value for job in run_jobs(app)}
    assert ran == {flaky: "SUCCEEDED"}
    assert runs.error_reports() is None
    assert "needs sentry-sdk 2.0 or later" in caplog.text


def test_when_a_report_fails_the_dead_letter_line_is_the_event(
    app: Flask, sentry: Callable[..., Events], monkeypatch: pytest.MonkeyPatch
) -> None:
    from flask_ratchet.worker import sentry as hooks

    events = sentry(integrations=[RatchetIntegration()])

    def broken(*_: object) -> None:
        raise RuntimeError("the report failed")

    monkeypatch.setattr(hooks, "_capture", broken)
    doomed = refuse.enqueue("card expired").id  # fails for good at once
    (ran,) = run_jobs(app)
    assert ran.id == doomed and ran.status.value == "FAILED"
    # Not ratchet's event (its report failed): the worker's ERROR line, through sentry-sdk's
    # logging integration, which is otherwise dropped as a repeat.
    (event,) = events()
    assert event["logger"] == "flask_ratchet.worker"
    assert event["level"] == "error"
    line = str(event["logentry"])  # "formatted", or "message" and "params" (sentry-sdk 2.11)
    assert str(doomed) in line and "failed for good" in line


def test_a_jobs_events_show_no_secret_of_its_arguments_locals_or_log_lines(
    app: Flask, sentry: Callable[..., Events]
) -> None:
    # attach_stacktrace: sentry-sdk adds a log line's stack, with its variables, after every
    # event processor has run.
    events = sentry(integrations=[RatchetIntegration()], attach_stacktrace=True)
    # Made here, not written out: with attach_stacktrace, this test's own source lines are sent.
    key, password = "sk_live_" + "51Hx", "hunter" + "2"
    settings = {
        "stripe": {"client_secret": key},  # below the top level: sentry-sdk's
        "dsn": f"postgresql://shop:{password}@db/prod",  # scrubber reads top-level names only
    }
    job = leaks.enqueue(settings).id
    run_jobs(app)
    sent = events()
    assert [e["tags"]["ratchet.job_id"] for e in sent] == [str(job), str(job)]
    text = json.dumps(sent)
    assert key not in text and password not in text
    line, error = sent
    # The job's logger masked the line before any handler, Sentry's too, saw it.
    assert line["logentry"]["message"] == "the gateway refused token=***"
    assert str(line["logentry"].get("formatted", "")) in ("", "the gateway refused token=***")
    assert not line["logentry"].get("params")
    (job_frame,) = [
        f for f in line["threads"]["values"][0]["stacktrace"]["frames"] if f["function"] == "leaks"
    ]
    assert job_frame["vars"]["settings"]["stripe"]["client_secret"].strip("'") == "••••••"
    for event in sent:
        assert event["contexts"]["stripe"] == {"client_secret": "••••••"}
        assert event["tags"]["database"] == "postgresql://shop:***@db/prod"
        assert event["user"] == {"id": 7, "session": "••••••"}
    crumbs = [c["message"] for c in error["breadcrumbs"]["values"]]
    assert "paying with client_secret=***" in crumbs
    frames = error["exception"]["values"][-1]["stacktrace"]["frames"]
    ours = [f for f in frames if f["module"].startswith("flask_ratchet.")]
    assert ours and all("vars" not in f for f in ours)  # the executor's args and kwargs
    frame = frames[-1]
    assert frame["function"] == "leaks"
    assert frame["vars"]["client_secret"].strip("'") == "••••••"  # quoted by sentry-sdk 2.11
    assert frame["vars"]["settings"]["stripe"]["client_secret"].strip("'") == "••••••"
    assert frame["vars"]["settings"]["dsn"] == "'postgresql://shop:***@db/prod'"
    assert error["exception"]["values"][-1]["value"] == "cannot reach postgresql://shop:***@db/prod"


def test_a_before_send_set_after_the_first_job_still_gets_masked_events(
    app: Flask, sentry: Callable[..., Events]
) -> None:
    events = sentry(integrations=[RatchetIntegration()])
    key = "sk_live_" + "L8r"
    leaks.enqueue({"stripe": {"client_secret": key}, "dsn": "sqlite://"})
    run_jobs(app)  # the client's hooks are wrapped at this first attempt
    seen: list[str] = []

    def users_hook(event: Any, hint: Any) -> Any:
        seen.append(json.dumps(event))
        return event

    sentry_sdk.get_client().options["before_send"] = users_hook  # replaces ratchet's wrapper
    leaks.enqueue({"stripe": {"client_secret": key}, "dsn": "sqlite://"})
    run_jobs(app)
    assert len(seen) == 2 and not any(key in text for text in seen)
    assert len(events()) == 4 and key not in json.dumps(events())


def test_an_encrypted_jobs_events_carry_no_frame_variables(
    database_url: str, sentry: Callable[..., Events]
) -> None:
    events = sentry(integrations=[RatchetIntegration()], attach_stacktrace=True)
    key = base64.b64encode(b"k" * 32).decode()
    app = create_app(
        database_url, RATCHET_ENCRYPTION_KEYS={"k": key}, RATCHET_ENCRYPTION_CURRENT_KEY="k"
    )
    customer = "Ada-" + "Lovelace"  # in no secret-looking field: only encryption hides it
    settings = {"customer": customer, "stripe": {"client_secret": "x"}, "dsn": "sqlite://"}
    with app.app_context():
        app.extensions["ratchet"].ensure_schema()
        job = ratchet.enqueue(leaks, settings).with_encrypted_payload().submit().id
        run_jobs(app)
        db.session.remove()
        db.engine.dispose()
    sent = events()
    assert [e["tags"]["ratchet.job_id"] for e in sent] == [str(job), str(job)]
    assert all(e["tags"]["ratchet.encrypted"] == "true" for e in sent)
    assert customer not in json.dumps(sent)
    frames = sent[1]["exception"]["values"][-1]["stacktrace"]["frames"]
    assert frames[-1]["function"] == "leaks" and "vars" not in frames[-1]
