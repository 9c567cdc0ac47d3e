"""Jobs that await a signal, on every database: never claimed while WAITING, released by their
signal (by key or id, once), rejected, timed out with and without retries, canceled, and
changed by nothing in a rolled-back request."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask

from flask_ratchet import JobStatus, events, facts
from flask_ratchet.errors import InvalidOption
from flask_ratchet.maintenance import signal_timeouts
from flask_ratchet.schema import audit, dlq_alert, job_queue
from flask_ratchet.store import bulk
from tests.apps import approve, create_app, db, ratchet
from tests.integration.helpers import count, heard
from tests.integration.test_console import Console
from tests.integration.test_flows import work


def status(job_id: uuid.UUID) -> JobStatus:
    found = ratchet.get_job(job_id)
    assert found is not None
    return found.status  # type: ignore[return-value]


def waiting(name: str, key: str, timeout: float = 3600, **options: Any) -> uuid.UUID:
    builder = ratchet.enqueue(approve, name).await_signal(key, timeout=timedelta(seconds=timeout))
    if options:
        builder = builder.with_max_retries(options["max_retries"])
    return builder.submit().id


def time_out_now(app: Flask) -> list[facts.Event]:
    """Move every wait's deadline to the past and run the timeout scan, as maintenance does;
    the facts it recorded (a worker's announcer sends them as events)."""
    runtime = ratchet.runtime
    with runtime.store.begin(runtime.engine) as conn:
        now = runtime.store.now(conn)
        conn.execute(
            sa.update(job_queue)
            .where(job_queue.c.status == "WAITING")
            .values(scheduled_time=now - timedelta(seconds=1))
        )
    recorded: list[facts.Event] = []
    signal_timeouts(runtime.config, recorded.extend).run(runtime.store, runtime.engine)
    return recorded


def test_a_waiting_job_runs_only_once_its_signal_comes(app: Flask) -> None:
    with heard(events.job_signal_waiting) as parked:
        job_id = waiting("refund-7", "refund:7")
    assert status(job_id) == JobStatus.WAITING
    assert parked == [{"job_id": job_id, "key": "refund:7"}]
    work(app)
    assert status(job_id) == JobStatus.WAITING and count("run") == 0
    with heard(events.job_signaled) as signaled:
        assert ratchet.deliver_signal("refund:7", {"approved_by": "ada"}) == 1
    assert signaled == [{"job_id": job_id, "key": "refund:7"}]
    assert ratchet.deliver_signal("refund:7") == 0  # nothing waits any more
    work(app)
    found = ratchet.get_job(job_id)
    assert found is not None and found.status == JobStatus.SUCCEEDED
    assert found.result == {"name": "refund-7", "signal": {"approved_by": "ada"}}
    assert count("run") == 1


def test_a_key_releases_every_job_waiting_on_it_and_an_id_one(app: Flask) -> None:
    three = [waiting(f"n{i}", "batch-approved") for i in range(3)]
    other = waiting("other", "something-else")
    alone = waiting("alone", "by-id")
    assert ratchet.deliver_signal("batch-approved") == 3
    assert ratchet.deliver_signal(alone) == 1 and ratchet.deliver_signal(alone) == 0
    work(app)
    assert [status(i) for i in three] == [JobStatus.SUCCEEDED] * 3
    assert status(alone) == JobStatus.SUCCEEDED and status(other) == JobStatus.WAITING
    assert count("run") == 4


def test_concurrent_deliveries_of_one_key_release_the_job_once(database_url: str) -> None:
    app = create_app(database_url)
    with app.app_context():
        app.extensions["ratchet"].ensure_schema()
        job_id = waiting("once", "race")
        db.session.commit()
    released: list[int] = []
    start = threading.Barrier(4)

    def deliver() -> None:
        with app.app_context():
            start.wait()
            with ratchet.transaction():
                released.append(ratchet.deliver_signal("race", {"n": 1}))
            db.session.remove()

    threads = [threading.Thread(target=deliver) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(released) == [0, 0, 0, 1]
    with app.app_context():
        work(app)
        assert status(job_id) == JobStatus.SUCCEEDED and count("run") == 1
        db.session.remove()
        db.engine.dispose()


def test_a_rejected_signal_fails_the_job_without_running_it(app: Flask) -> None:
    job_id = waiting("refund-8", "refund:8")
    assert ratchet.reject_signal("refund:8", "refund refused by finance") == 1
    work(app)
    found = ratchet.get_job(job_id)
    assert found is not None and found.status == JobStatus.FAILED
    assert (found.error, found.attempts) == ("refund refused by finance", 0)
    assert count("run") == 0 and count("ratchet_dlq_alert") == 1
    assert ratchet.deliver_signal("refund:8") == 0
    with pytest.raises(InvalidOption, match="reason must be a non-empty text"):
        ratchet.reject_signal("refund:8", " ")


def test_a_timeout_fails_the_job_or_waits_again_while_retries_remain(app: Flask) -> None:
    once = waiting("once", "late", timeout=60)
    twice = waiting("twice", "late-too", timeout=60, max_retries=1)
    timed = [e.data for e in time_out_now(app) if e.kind == facts.JOB_SIGNAL_TIMED_OUT]
    assert status(once) == JobStatus.FAILED and status(twice) == JobStatus.WAITING
    failed = ratchet.get_job(once)
    assert failed is not None and failed.attempts == 1
    assert failed.error == "signal 'late' not delivered within 60 s"
    assert sorted((e["key"], e["final"]) for e in timed) == [("late", True), ("late-too", False)]
    again = ratchet.get_job(twice)
    assert again is not None and again.attempts == 1
    time_out_now(app)
    assert status(twice) == JobStatus.FAILED and ratchet.get_job(twice).attempts == 2  # type: ignore[union-attr]
    with db.engine.connect() as conn:
        tasks = conn.execute(sa.select(dlq_alert.c.task)).scalars().all()
    assert tasks == ["tests.apps:approve", "tests.apps:approve"]
    assert count("run") == 0


def test_a_waiting_job_can_be_canceled(app: Flask) -> None:
    job_id = waiting("canceled", "never")
    assert ratchet.cancel_job(job_id) is True
    assert status(job_id) == JobStatus.CANCELED
    assert ratchet.deliver_signal("never") == 0


def test_a_waiting_jobs_replacement_waits_for_the_same_signal(app: Flask) -> None:
    old = waiting("first", "replace-me", timeout=600)
    new = ratchet.replace(old, 0, approve, "second").id
    assert status(old) == JobStatus.CANCELED and status(new) == JobStatus.WAITING
    found = ratchet.get_job(new)
    assert found is not None and (found.signal_key, found.signal_wait) == ("replace-me", 600)
    work(app)
    assert count("run") == 0
    assert ratchet.deliver_signal("replace-me") == 1
    work(app)
    assert ratchet.get_job(new).result == {"name": "second", "signal": None}  # type: ignore[union-attr]


def test_a_signal_in_a_rolled_back_request_changes_nothing(database_url: str) -> None:
    app = create_app(database_url)

    @app.post("/approve")
    def approve_refund() -> str:
        assert ratchet.deliver_signal("undo", {"x": 1}) == 1
        raise RuntimeError("the request fails after the signal")

    with app.app_context():
        app.extensions["ratchet"].ensure_schema()
        job_id = waiting("rolled", "undo")
    app.config["PROPAGATE_EXCEPTIONS"] = False
    with heard(events.job_signaled) as got:
        assert app.test_client().post("/approve").status_code == 500
    with app.app_context():
        assert status(job_id) == JobStatus.WAITING and got == []
        work(app)
        assert count("run") == 0
        db.session.remove()
        db.engine.dispose()


def test_bad_signal_input_is_refused_before_anything_is_written(app: Flask) -> None:
    with pytest.raises(InvalidOption, match="timeout"):
        ratchet.enqueue(approve, "x").await_signal("k", timeout=0)
    with pytest.raises(InvalidOption, match="signal key"):
        ratchet.enqueue(approve, "x").await_signal("", timeout=10)
    with pytest.raises(InvalidOption, match="signal key"):
        ratchet.deliver_signal("")
    assert count("ratchet_job") == 0


def test_the_cli_delivers_and_rejects_signals(app: Flask) -> None:
    two = [waiting(f"c{i}", "cli-key") for i in range(2)]
    by_id = waiting("by-id", "other-key")
    refused = waiting("refused", "no")
    runner = app.test_cli_runner()
    sent = runner.invoke(
        args=["ratchet", "signals", "deliver", "cli-key", "--payload", '{"ok": 1}']
    )
    assert sent.exit_code == 0 and "2 jobs signaled" in sent.output, sent.output
    one = runner.invoke(args=["ratchet", "signals", "deliver", "--id", str(by_id)])
    assert one.exit_code == 0 and "1 job signaled" in one.output, one.output
    no = runner.invoke(args=["ratchet", "signals", "reject", "no", "--reason", "declined"])
    assert no.exit_code == 0 and "1 job rejected" in no.output, no.output
    bad = runner.invoke(args=["ratchet", "signals", "deliver", "cli-key", "--payload", "{"])
    assert bad.exit_code == 2 and "--payload must be JSON" in bad.output
    work(app)
    assert [ratchet.get_job(i).result["signal"] for i in two] == [{"ok": 1}] * 2  # type: ignore[union-attr]
    assert status(by_id) == JobStatus.SUCCEEDED
    assert ratchet.get_job(refused).error == "declined"  # type: ignore[union-attr]


def test_deliver_signals_releases_every_waiting_job_a_filter_matches(
    app: Flask, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bulk, "BULK_CHUNK", 2)  # three chunks for five jobs
    tagged = [
        h.id
        for h in ratchet.enqueue_many(
            ratchet.enqueue(approve, f"t{i}")
            .await_signal(f"own-{i}", timeout=timedelta(hours=1))
            .with_tags("review")
            for i in range(5)
        )
    ]
    other = waiting("other", "own-other")
    pending = ratchet.enqueue(approve, "not-waiting").with_tags("review").submit().id
    with pytest.raises(ValueError, match="needs at least one filter"):
        ratchet.deliver_signals({"ok": True})
    with heard(events.jobs_bulk_signaled) as got, heard(events.job_signaled) as each:
        assert ratchet.deliver_signals({"ok": True}, tag="review", actor="ops") == 5
    assert got == [{"count": 5, "filter": {"tag": "review"}}] and each == []
    with db.engine.connect() as conn:
        (row,) = conn.execute(sa.select(audit)).all()
    assert (row.actor, row.action, row.changed) == ("ops", "signal", 5)
    assert ratchet.deliver_signals(tag="review") == 0  # nothing waits any more
    work(app)
    assert [ratchet.get_job(i).result["signal"] for i in tagged] == [{"ok": True}] * 5  # type: ignore[union-attr]
    assert status(other) == JobStatus.WAITING and status(pending) == JobStatus.SUCCEEDED


def test_the_cli_delivers_signals_by_filter(app: Flask) -> None:
    ids = [waiting(f"f{i}", f"key-{i}") for i in range(3)]
    runner = app.test_cli_runner()
    dry = runner.invoke(
        args=["ratchet", "signals", "deliver", "--task", "tests.apps:approve", "--dry-run"]
    )
    assert dry.exit_code == 0 and "3 jobs would be signaled" in dry.output, dry.output
    assert all(status(i) == JobStatus.WAITING for i in ids)
    sent = runner.invoke(
        args=["ratchet", "signals", "deliver", "--status", "waiting", "--payload", '{"n": 2}']
    )
    assert sent.exit_code == 0 and "3 jobs signaled" in sent.output, sent.output
    both = runner.invoke(args=["ratchet", "signals", "deliver", "key-1", "--task", "x"])
    assert both.exit_code == 2 and "not several" in both.output
    none = runner.invoke(args=["ratchet", "signals", "deliver"])
    assert none.exit_code == 2 and "at least one filter" in none.output
    assert all(status(i) == JobStatus.PENDING for i in ids)


def test_the_console_lists_waiting_jobs_and_shows_their_key(app: Flask) -> None:
    job_id = waiting("shown", "console-key")
    other = ratchet.enqueue(approve, "pending").submit().id
    client = app.test_client()
    admin = {"X-Role": "admin"}
    listed = client.get("/ratchet/jobs?status=WAITING", headers=admin)
    assert listed.status_code == 200
    assert str(job_id) in listed.text and str(other) not in listed.text
    assert "pill status-waiting" in listed.text
    page = client.get(f"/ratchet/jobs/{job_id}", headers=admin).text
    assert "awaits <code><bdi>console-key</bdi></code> until" in page


def test_a_chain_step_waits_for_its_signal_from_its_release(app: Flask) -> None:
    first, step = (
        ratchet.enqueue(approve, "first")
        .then(ratchet.enqueue(approve, "step").await_signal("step-key", timeout=3600))
        .submit()
        .ids
    )
    assert status(first) == JobStatus.PENDING and status(step) == JobStatus.PENDING  # held
    assert ratchet.deliver_signal("step-key") == 0  # it does not wait yet: its parent runs
    work(app)
    assert status(first) == JobStatus.SUCCEEDED and status(step) == JobStatus.WAITING
    assert ratchet.deliver_signal("step-key", "go") == 1
    work(app)
    assert ratchet.get_job(step).result == {"name": "step", "signal": "go"}  # type: ignore[union-attr]


def test_an_admin_delivers_or_rejects_a_signal_from_the_job_page(app: Flask) -> None:
    delivered, rejected = waiting("by-console", "c1"), waiting("declined", "c2")
    admin = Console(app.test_client())
    page = admin.get(f"/ratchet/jobs/{delivered}").text
    assert 'data-action="deliver-signal"' in page and 'data-action="reject-signal"' in page
    # The page polls while the job waits: the refresh keeps the fields being typed in.
    assert 'id="signal-payload" hx-preserve' in page and 'id="signal-reason" hx-preserve' in page
    sent = admin.post(
        f"/ratchet/jobs/{delivered}/signal",
        {"decision": "deliver", "payload": '{"by": "ops"}'},
        htmx=True,
    )
    assert sent.status_code == 200 and f"Job {delivered} signaled." in sent.text
    again = admin.post(f"/ratchet/jobs/{delivered}/signal", {"decision": "deliver"}, htmx=True)
    assert "was not signaled: only WAITING jobs can be" in again.text
    bad = admin.post(
        f"/ratchet/jobs/{rejected}/signal", {"decision": "deliver", "payload": "{"}, htmx=True
    )
    assert bad.status_code == 400 and "payload must be JSON" in bad.text
    no = admin.post(
        f"/ratchet/jobs/{rejected}/signal", {"decision": "reject", "reason": "no"}, htmx=True
    )
    assert f"Job {rejected} rejected." in no.text
    reader = Console(app.test_client(), role="read")
    refused = reader.post(f"/ratchet/jobs/{delivered}/signal", {"decision": "reject"})
    assert refused.status_code == 403
    work(app)
    assert ratchet.get_job(delivered).result == {"name": "by-console", "signal": {"by": "ops"}}  # type: ignore[union-attr]
    assert status(rejected) == JobStatus.FAILED
    with db.engine.connect() as conn:
        rows = conn.execute(sa.select(audit.c.action, audit.c.changed)).all()
    assert sorted(map(tuple, rows)) == [
        ("signal-deliver", 0),
        ("signal-deliver", 1),
        ("signal-reject", 1),
    ]
