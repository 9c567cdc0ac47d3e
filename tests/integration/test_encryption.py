"""Payload encryption on every database: sealed arguments, params and results (the raw rows
hold no clear text), bound to their job and column, key rotation, and bad settings refused at
``init_app``."""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from flask import Flask

from flask_ratchet import JobStatus
from flask_ratchet.errors import ConfigError, InvalidOption
from flask_ratchet.maintenance.recurring import RecurringFirer
from flask_ratchet.options import JobOptions
from flask_ratchet.payload import Sealed, Unreadable
from flask_ratchet.recurring import Misfire, RecurringDefinition
from flask_ratchet.schema import job, metadata, recurring
from flask_ratchet.sealing import PREFIX
from flask_ratchet.testing import run_jobs
from tests.apps import add, approve, create_app, db, greet_privately, ratchet
from tests.flow_tasks import (
    batch_item,
    callback_result,
    follow_up,
    gather,
    is_big,
    produce,
)
from tests.integration.helpers import count
from tests.integration.test_flows import noted, work

OLD = base64.b64encode(b"o" * 32).decode()
NEW = base64.b64encode(b"n" * 32).decode()
MARKER = "Ada-Lovelace-7d1f"


def keyed(url: str, keys: dict[str, str], current: str, **config: object) -> Flask:
    return create_app(
        url, RATCHET_ENCRYPTION_KEYS=keys, RATCHET_ENCRYPTION_CURRENT_KEY=current, **config
    )


@pytest.fixture
def sealed_app(database_url: str) -> Iterator[Flask]:
    app = keyed(database_url, {"old": OLD}, "old")
    with app.app_context():
        app.extensions["ratchet"].ensure_schema()
        yield app
        db.session.remove()
        db.engine.dispose()


def every_stored_text() -> str:
    """Every row of every ratchet table, as text."""
    with db.engine.connect() as conn:
        return "\n".join(
            repr(row) for table in metadata.sorted_tables for row in conn.execute(sa.select(table))
        )


def stored(job_id: object, column: str) -> str:
    with db.engine.connect() as conn:
        value = conn.execute(sa.select(job.c[column]).where(job.c.job_id == job_id)).scalar_one()
        assert isinstance(value, str)
        return value


def test_the_rows_hold_no_clear_text_and_the_app_reads_it_back(sealed_app: Flask) -> None:
    handle = greet_privately.builder(MARKER).with_param("owner", MARKER).submit()
    clear = ratchet.enqueue(add, 2, 3).with_encrypted_payload().submit()  # one job, opted in
    work(sealed_app)
    assert MARKER not in every_stored_text()
    assert stored(handle.id, "payload").startswith(f"{PREFIX}old:")
    assert stored(handle.id, "result").startswith(f"{PREFIX}old:")
    found = ratchet.get_job(handle.id)
    assert found is not None and found.status == JobStatus.SUCCEEDED
    assert (found.args, found.params, found.result) == (
        [MARKER],
        {"owner": MARKER},
        f"hello {MARKER}",
    )
    assert ratchet.get_job(clear.id).result == 5  # type: ignore[union-attr]
    assert [j.args for j in ratchet.find_jobs(task=greet_privately).items] == [[MARKER]]
    # What holds no key (the console's reads) sees "encrypted", never the text.
    with db.engine.connect() as conn:
        raw = ratchet.runtime.store.jobs.get_job(conn, handle.id)
    assert raw is not None and isinstance(raw.args, Sealed) and str(raw.result) == "encrypted"


def test_a_ciphertext_copied_to_another_job_fails_only_that_job(sealed_app: Flask) -> None:
    victim = greet_privately.enqueue("Grace").id
    thief = greet_privately.enqueue("Alan").id
    with db.engine.begin() as conn:
        conn.execute(
            sa.update(job).where(job.c.job_id == thief).values(payload=stored(victim, "payload"))
        )
    work(sealed_app)
    ran, refused = ratchet.get_job(victim), ratchet.get_job(thief)
    assert ran is not None and ran.result == "hello Grace"
    assert refused is not None and refused.status == JobStatus.FAILED and refused.attempts == 1
    assert "column 'payload' does not decrypt as this job's" in (refused.error or "")
    assert isinstance(refused.args, Unreadable)  # get_job says why, and does not raise


def test_keys_rotate_and_a_missing_key_fails_only_its_jobs(database_url: str) -> None:
    first = keyed(database_url, {"old": OLD}, "old")
    with first.app_context():
        first.extensions["ratchet"].ensure_schema()
        before = greet_privately.enqueue("Edsger").id
        db.engine.dispose()
    rotated = keyed(database_url, {"old": OLD, "new": NEW}, "new")
    with rotated.app_context():
        after = greet_privately.enqueue("Barbara").id
        assert stored(after, "payload").startswith(f"{PREFIX}new:")
        work(rotated)  # the old job still opens with the old key
        assert ratchet.get_job(before).result == "hello Edsger"  # type: ignore[union-attr]
        assert stored(before, "result").startswith(f"{PREFIX}new:")
        late = greet_privately.enqueue("Ken").id
        db.engine.dispose()
    retired = keyed(database_url, {"new": NEW}, "new")
    with retired.app_context():
        old_only = ratchet.enqueue(add, 1, 1).submit().id
        with db.engine.begin() as conn:  # a job sealed with the retired key, by hand
            conn.execute(
                sa.update(job).where(job.c.job_id == late).values(payload=stored(before, "payload"))
            )
        work(retired)
        failed = ratchet.get_job(late)
        assert failed is not None and failed.status == JobStatus.FAILED
        assert "encrypted with key 'old', which RATCHET_ENCRYPTION_KEYS does not hold" in (
            failed.error or ""
        )
        assert ratchet.get_job(old_only).result == 2  # type: ignore[union-attr]
        db.session.remove()
        db.engine.dispose()


@pytest.mark.parametrize(
    ("config", "error"),
    [
        ({"RATCHET_ENCRYPTION_KEYS": {"k": "c2hvcnQ="}}, "must be 32 bytes in base64"),
        ({"RATCHET_ENCRYPTION_KEYS": {"k": "not base64!"}}, "must be 32 bytes in base64"),
        ({"RATCHET_ENCRYPTION_KEYS": {"a:b": OLD}}, "key id 'a:b' must be"),
        ({"RATCHET_ENCRYPTION_KEYS": {"k": OLD}}, "RATCHET_ENCRYPTION_CURRENT_KEY is not"),
        (
            {"RATCHET_ENCRYPTION_KEYS": {"k": OLD}, "RATCHET_ENCRYPTION_CURRENT_KEY": "j"},
            "'j', which is not a key id",
        ),
        ({"RATCHET_ENCRYPT_ALL": True}, "RATCHET_ENCRYPT_ALL needs RATCHET_ENCRYPTION_KEYS"),
    ],
)
def test_bad_encryption_settings_are_refused_at_init_app(
    database_url: str, config: dict[str, object], error: str
) -> None:
    with pytest.raises(ConfigError, match=error) as refused:
        create_app(database_url, **config)
    assert OLD not in str(refused.value)  # a key is never shown


def test_asking_for_encryption_without_keys_writes_nothing(app: Flask) -> None:
    with pytest.raises(ConfigError, match="needs RATCHET_ENCRYPTION_KEYS"):
        ratchet.enqueue(add, 1, 2).with_encrypted_payload()
    with pytest.raises(ConfigError, match="RATCHET_ENCRYPTION_KEYS is not set"):
        greet_privately.enqueue("nobody")
    with db.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(job)).scalar_one() == 0


def test_every_job_is_sealed_with_encrypt_all(database_url: str) -> None:
    app = keyed(database_url, {"k": NEW}, "k", RATCHET_ENCRYPT_ALL=True)
    with app.app_context():
        app.extensions["ratchet"].ensure_schema()
        plain = ratchet.enqueue(add, 4, 5).submit().id
        assert stored(plain, "payload").startswith(f"{PREFIX}k:")
        work(app)
        assert ratchet.get_job(plain).result == 9  # type: ignore[union-attr]
        db.session.remove()
        db.engine.dispose()


def test_the_console_shows_encrypted_and_never_the_text(sealed_app: Flask) -> None:
    handle = greet_privately.builder(MARKER).with_param("owner", MARKER).submit()
    work(sealed_app)
    client = sealed_app.test_client()
    admin = {"X-Role": "admin"}
    for url in (f"/ratchet/jobs/{handle.id}", "/ratchet/jobs", "/ratchet/jobs?search=Ada"):
        with sealed_app.app_context():
            page = client.get(url, headers=admin)
        assert page.status_code == 200, url
        assert MARKER not in page.text, url
    with sealed_app.app_context():
        detail = client.get(f"/ratchet/jobs/{handle.id}", headers=admin).text
    assert "encrypted with key &#39;old&#39;: the console does not decrypt" in detail


def test_batch_children_are_sealed_and_their_callback_reads_their_results(
    database_url: str,
) -> None:
    items = [7, 3, 11]
    app = keyed(database_url, {"k": NEW}, "k", RATCHET_ENCRYPT_ALL=True)
    with app.app_context():
        app.extensions["ratchet"].ensure_schema()
        batch = ratchet.enqueue_batch("sealed")
        for i in items:
            batch.add(batch_item, i)
        chord = batch.on_success(gather, "sealed").submit().id
        streamed = (
            ratchet.streaming_batch("sealed-stream")
            .from_iterable(items)
            .process(batch_item)
            .with_param("owner", MARKER)
            .start()
            .id
        )
        db.session.commit()
        work(app)
        with db.engine.connect() as conn:
            texts = conn.execute(
                sa.select(job.c.task, job.c.payload, job.c.params, job.c.result)
            ).all()
        clear = [row for row in texts if any(v and not v.startswith(PREFIX) for v in row[1:])]
        # Only the batch parents: no arguments, and a result of counts ratchet writes.
        assert {row.task for row in clear} == {"flask_ratchet:batch"}
        assert {row.result for row in clear} == {'{"total": 3, "succeeded": 3, "failed": 0}'}
        assert MARKER not in every_stored_text()
        (done,) = [j for j in ratchet.find_jobs(task=gather).items if j.depends_on == chord]
        assert done.result["results"] == items  # opened for the callback, in order
        children = ratchet.find_jobs(batch=streamed).items
        assert sorted(c.result for c in children) == sorted(items)
        assert {c.params["owner"] for c in children} == {MARKER}
        db.session.remove()
        db.engine.dispose()


def test_every_read_of_the_app_opens_an_encrypted_job(sealed_app: Flask) -> None:
    waited = greet_privately.enqueue("Ada")
    ran = {j.id: j for j in run_jobs(sealed_app)}  # the testing kit's snapshots
    assert ran[waited.id].result == "hello Ada"
    assert waited.wait(timeout=5).result == "hello Ada"
    root, big = (
        ratchet.enqueue(produce, 20)
        .with_encrypted_payload()
        .on_success(callback_result)
        .when(is_big, follow_up, "big")  # the predicate reads the opened result
        .submit()
        .ids
    )
    work(sealed_app)
    assert ratchet.get_job(big).status == JobStatus.SUCCEEDED  # type: ignore[union-attr]
    assert stored(root, "result").startswith(PREFIX)
    assert [v for _, v in noted("callback-result")] == ["{'n': 20}"]
    # A replacement keeps the replaced job's params, and its encryption.
    old = ratchet.enqueue(add, 1, 2).with_param("owner", MARKER).with_encrypted_payload().submit()
    new = ratchet.replace(old.id, 0, add, 3, 4)
    assert stored(new.id, "payload").startswith(PREFIX)
    assert stored(new.id, "params").startswith(PREFIX)
    assert ratchet.get_job(new.id).params == {"owner": MARKER}  # type: ignore[union-attr]
    assert MARKER not in every_stored_text()


def test_an_encrypted_jobs_signal_payload_is_sealed(sealed_app: Flask) -> None:
    job_id = (
        ratchet.enqueue(approve, "secret")
        .with_encrypted_payload()
        .await_signal("sealed-signal", timeout=3600)
        .submit()
        .id
    )
    assert ratchet.deliver_signal("sealed-signal", {"who": MARKER}) == 1
    assert stored(job_id, "signal_payload").startswith(f"{PREFIX}old:")
    work(sealed_app)
    assert MARKER not in every_stored_text()
    assert ratchet.get_job(job_id).result == {"name": "secret", "signal": {"who": MARKER}}  # type: ignore[union-attr]


def test_a_bulk_delivery_seals_each_encrypted_jobs_payload(sealed_app: Flask) -> None:
    sealed = ratchet.enqueue(approve, "s").with_encrypted_payload().await_signal("k1", timeout=60)
    clear = ratchet.enqueue(approve, "c").await_signal("k2", timeout=60)
    ids = [h.id for h in ratchet.enqueue_many([sealed.with_tags("both"), clear.with_tags("both")])]
    assert ratchet.deliver_signals({"who": MARKER}, tag="both") == 2
    assert stored(ids[0], "signal_payload").startswith(f"{PREFIX}old:")
    assert MARKER in stored(ids[1], "signal_payload")  # a job not encrypted: in the clear
    work(sealed_app)
    assert [ratchet.get_job(i).result["signal"] for i in ids] == [{"who": MARKER}] * 2  # type: ignore[union-attr]


def test_a_recurring_master_and_its_children_are_sealed(sealed_app: Flask) -> None:
    runtime = ratchet.runtime
    master = ratchet.schedule_recurring("@every 1s", "UTC", greet_privately, MARKER).submit()
    assert isinstance(master.args, Sealed)  # the store's snapshot: sealed as stored
    assert ratchet.get_recurring(master.id).args == [MARKER]  # type: ignore[union-attr]
    again = ratchet.schedule_recurring("@every 1s", "UTC", greet_privately, MARKER).build()
    with runtime.store.begin(runtime.engine) as conn:  # the same definition changes nothing
        assert runtime.store.recurring.register(conn, again, runtime.keyring)[1] is False
    handle = ratchet.run_recurring_now(master.id)
    assert handle is not None
    child = handle.id
    assert stored(child, "payload").startswith(f"{PREFIX}old:")
    with runtime.store.begin(runtime.engine) as conn:
        conn.execute(sa.update(recurring).values(next_fire=runtime.store.now(conn)))
    firer = RecurringFirer(
        runtime.store, runtime.engine, runtime.config, threading.Event(), keyring=runtime.keyring
    )
    (fired,) = firer.fire_pass().fired
    work(sealed_app)
    assert MARKER not in every_stored_text()
    results = [ratchet.get_job(i).result for i in (child, fired.job_id)]  # type: ignore[union-attr]
    assert results == [f"hello {MARKER}"] * 2


def test_an_encrypted_recurring_master_a_worker_cannot_open_is_set_aside(
    sealed_app: Flask,
) -> None:
    runtime = ratchet.runtime
    master = ratchet.schedule_recurring("@every 1s", "UTC", greet_privately, MARKER).submit()
    with runtime.store.begin(runtime.engine) as conn:
        conn.execute(sa.update(recurring).values(next_fire=runtime.store.now(conn)))
    keyless = RecurringFirer(runtime.store, runtime.engine, runtime.config, threading.Event())
    assert keyless.fire_pass().fired == []
    paused = ratchet.get_recurring(master.id)
    assert paused is not None and paused.status == "PAUSED"
    assert count("ratchet_job") == 0


def test_an_encrypted_recurring_master_refuses_params(sealed_app: Flask) -> None:
    builder = ratchet.schedule_recurring("@every 1s", "UTC", greet_privately, "x")
    with pytest.raises(InvalidOption, match="params would be stored in the clear"):
        builder.with_param("owner", MARKER).submit()
    assert count("ratchet_recurring") == 0


def test_a_declared_encrypted_master_with_params_is_refused(database_url: str) -> None:
    app = keyed(database_url, {"old": OLD}, "old", RATCHET_ENCRYPT_ALL=True)
    definitions = ratchet.recurring_definitions  # shared by every app of this extension
    definitions["params-in-clear"] = RecurringDefinition(
        id="params-in-clear",
        name="params-in-clear",
        task="tests.apps:not_registered",  # its definition's options, not a task's
        cron="@every 1h",
        zone="UTC",
        payload='{"args":[],"kwargs":{}}',
        options=JobOptions(params={"owner": MARKER}),
        misfire=Misfire.FIRE_ONCE,
    )
    try:
        with app.app_context(), pytest.raises(ConfigError, match="params would be stored"):
            ratchet.register_recurring()
    finally:
        del definitions["params-in-clear"]
