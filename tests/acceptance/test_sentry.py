"""A real worker whose app set up Sentry: one event per failed attempt, tagged with the job, read
back from a real sentry-sdk client's transport (tests/sentry_app.py writes each event to a file)."""

from __future__ import annotations

import signal
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from tests.acceptance.conftest import Workers, wait_until
from tests.apps import add, fail_until, ratchet, refuse
from tests.sentry_app import SET_UP, always_fails, complains, read_events, stalls

APP = "tests.sentry_app:create_app()"


@pytest.fixture
def events_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the worker's Sentry transport writes its events (the worker inherits the env)."""
    path = tmp_path / "sentry-events.jsonl"
    monkeypatch.setenv("RATCHET_TEST_SENTRY_EVENTS", str(path))
    return path


def ended(*job_ids: object) -> bool:
    return all(ratchet.get_job(i).is_terminal for i in job_ids)  # type: ignore[arg-type,union-attr]


def by_job(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Events by their ``ratchet.job_id`` tag, in the order they were sent."""
    found: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for event in events:
        job_id = event.get("tags", {}).get("ratchet.job_id")
        if job_id is not None:
            found[job_id].append(event)
    return found


def exception(event: dict[str, Any]) -> tuple[str, str, str]:
    """The event's (innermost) exception: its type, message and mechanism."""
    value = event["exception"]["values"][-1]
    return value["type"], value["value"], value["mechanism"]["type"]


def all_crumbs(event: dict[str, Any]) -> list[str]:
    return [c.get("message") for c in event.get("breadcrumbs", {}).get("values", [])]


def crumbs(event: dict[str, Any]) -> list[str]:
    """The lines jobs logged (``ctx.logger``) that the event carries as breadcrumbs (not the
    SQL sentry-sdk's SQLAlchemy integration adds: a "still mine?" check may run one)."""
    values = event.get("breadcrumbs", {}).get("values", [])
    return [c["message"] for c in values if c.get("category") == "flask_ratchet.job"]


def stop(workers: Workers, proc: Any) -> None:
    """SIGTERM, and wait for the exit: the worker has logged every outcome by then."""
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, workers.output(proc)


def test_each_failed_attempt_reaches_sentry_once_with_the_jobs_tags(
    app: Flask, workers: Workers, events_file: Path
) -> None:
    flaky = fail_until.enqueue(2).id  # fails once (retried 1 s later), then works
    doomed = always_fails.enqueue(7).id  # max_retries=1: retried once, then fails for good
    stalled = stalls.enqueue().id  # runs past its timeout, no retries
    quiet = add.enqueue(1, 2).id
    loud = complains.enqueue().id  # logs an error of its own, and succeeds
    # One job thread: every job runs on the same thread, after the others' breadcrumbs.
    proc = workers.start("--concurrency", "1", app=APP)
    wait_until(lambda: ended(flaky, doomed, stalled, quiet, loud), what="the jobs to end")
    stop(workers, proc)
    events = read_events(str(events_file))
    jobs = by_job(events)
    node = jobs[str(flaky)][0]["tags"]["ratchet.node"]
    assert node.endswith(f":{proc.pid}")

    (retried,) = jobs[str(flaky)]  # the attempt that worked sent nothing
    assert retried["level"] == "warning"
    assert retried["tags"] == {
        "ratchet.job_id": str(flaky),
        "ratchet.task": "tests.apps:fail_until",
        "ratchet.queue": "default",
        "ratchet.attempt": "1",
        "ratchet.node": node,
        "ratchet.final": "false",
    }
    assert exception(retried) == (
        "ConnectionError",
        "attempt 1 failed, password=***",  # masked as the stored error is
        "flask_ratchet",
    )
    assert retried["transaction"] == "tests.apps:fail_until"
    assert retried["contexts"]["ratchet"]["retry_in_seconds"] == 1.0
    assert crumbs(retried) == ["attempt 1"]  # the job's own log line

    first, last = jobs[str(doomed)]
    assert [
        (e["level"], e["tags"]["ratchet.attempt"], e["tags"]["ratchet.final"])
        for e in (first, last)
    ] == [
        ("warning", "1", "false"),
        ("error", "2", "true"),
    ]
    assert exception(first) == (
        "LookupError",
        "order 7 not found (attempt 1), token=***",
        "flask_ratchet",
    )
    assert exception(last)[:2] == ("LookupError", "order 7 not found (attempt 2), token=***")
    assert last["contexts"]["ratchet"] == {
        "job_id": str(doomed),
        "task": "tests.sentry_app:always_fails",
        "queue": "default",
        "attempt": 2,
        "max_retries": 1,
        "node": node,
        "final": True,
        "retry_in_seconds": None,
    }
    # Each attempt in a scope of its own: only its own lines as breadcrumbs (not even those from
    # before it, on the thread that made the app), and a trace of its own.
    assert not [e for e in events if SET_UP in all_crumbs(e)]
    assert crumbs(first) == ["charging order 7, attempt 1"]
    assert crumbs(last) == ["charging order 7, attempt 2"]
    traces = {e["contexts"]["trace"]["trace_id"] for e in (retried, first, last)}
    assert len(traces) == 3

    (timed_out,) = jobs[str(stalled)]  # reported by the watchdog; the thread's raise is not
    assert timed_out["level"] == "error" and timed_out["tags"]["ratchet.final"] == "true"
    assert exception(timed_out)[:2] == ("JobTimeout", "ran longer than its timeout of 0.5s")
    assert timed_out["fingerprint"] == ["flask_ratchet", "tests.sentry_app:stalls", "JobTimeout"]
    assert crumbs(timed_out) == ["stalling"]  # the job's scope, sent from the watchdog's thread

    assert str(quiet) not in jobs  # a success sends nothing
    (own,) = jobs[str(loud)]  # what the job's code logged carries the job's tags
    assert own["logger"] == "flask_ratchet.job"
    assert own["logentry"]["message"] == "the printer is on fire"
    assert own["tags"]["ratchet.task"] == "tests.sentry_app:complains"
    assert "ratchet.final" not in own["tags"]

    # The worker's ERROR lines for the two dead letters made no second event.
    assert not [e for e in events if e.get("logger") == "flask_ratchet.worker"], events
    assert len(events) == 5


def test_disabled_the_dead_letter_line_is_all_sentry_hears(
    app: Flask, workers: Workers, events_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RATCHET_TEST_SENTRY", "disabled")  # disabled_integrations names ours
    dead = refuse.enqueue("card expired").id
    proc = workers.start("--burst", app=APP)
    assert proc.wait(120) == 0, workers.output(proc)
    assert ended(dead)
    events = read_events(str(events_file))
    assert not by_job(events)  # no job tags, no exception: nothing of ratchet's integration
    (line,) = events  # sentry-sdk's logging integration, on its own, makes the ERROR line one
    assert line["logger"] == "flask_ratchet.worker"
    assert line["logentry"]["message"].startswith("job %s (%s) failed for good")
    assert line["extra"]["job_id"] == str(dead)  # the line's fields, as sentry-sdk copies them
    assert "exception" not in line
    assert SET_UP in all_crumbs(line)  # the completer's thread started with it
