"""Rows written straight into the tables, holding what ratchet never writes: every reader
(``get_job``, the console's pages, ``flask ratchet jobs show``, the claim) reads them without
raising, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import math
import uuid
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from flask import Flask
from markupsafe import escape

from flask_ratchet import JobStatus
from flask_ratchet.columns import EARLIEST, LATEST, UNREADABLE_ID, StoredUuid
from flask_ratchet.console.present import duration
from flask_ratchet.maintenance.tasks import orphan_recovery, retention
from flask_ratchet.options import JobOptions
from flask_ratchet.payload import Unreadable
from flask_ratchet.recurring import RecurringStatus, encode_options
from flask_ratchet.schema import (
    audit,
    batch,
    dlq_alert,
    execution,
    job,
    job_archive,
    job_log,
    job_queue,
    metadata,
    recurring,
    resource_permit,
    resource_start,
)
from tests.apps import add, db, ratchet
from tests.integration.helpers import finish, job_in
from tests.integration.test_console import Console
from tests.integration.test_recurring import (
    MONTHLY,
    children,
    firer,
    master,
    set_next_fire,
    two_masters,
)

READ = {"X-Role": "read"}

#: (column of ratchet_job, what it holds, the Job field that shows it).
POISON = [
    ("payload", "<b>not json", "args"),
    ("payload", "[]", "args"),
    ("payload", '{"args": 5, "kwargs": {}}', "args"),
    ("payload", '"x"', "args"),
    ("payload", "[" * 100_000, "args"),
    ("params", "<b>not json", "params"),
    ("params", "[1]", "params"),
    ("result", "<b>not json", "result"),
]


def write(table: sa.Table, job_id: uuid.UUID, **values: object) -> None:
    """Write ``values`` into a job's row as a hand or a damaged disk would: no checks."""
    with db.engine.begin() as conn:
        conn.execute(sa.update(table).where(table.c.job_id == job_id).values(**values))


def write_raw(sql: str, job_id: uuid.UUID) -> None:
    """Run ``sql`` with ``:id`` bound to the job's id (its own text: times out of range)."""
    with db.engine.begin() as conn:
        conn.execute(sa.text(sql).bindparams(sa.bindparam("id", job_id, type_=StoredUuid())))


def ended_job() -> uuid.UUID:
    """A job that succeeded (so its result column is read)."""
    job_id = ratchet.enqueue_now(add, 1, 2).id
    assert [c.job_id for c in ratchet.claim_due(10, "node-a")] == [job_id]
    assert finish(job_id, JobStatus.SUCCEEDED)
    return job_id


def poisoned(column: str, text: str) -> uuid.UUID:
    job_id = ended_job()
    write(job, job_id, **{column: text})
    return job_id


@pytest.mark.parametrize(("column", "text", "field"), POISON)
def test_get_job_holds_the_raw_text_of_an_unreadable_column(
    app: Flask, column: str, text: str, field: str
) -> None:
    job_id = poisoned(column, text)
    found = ratchet.get_job(job_id)
    assert found is not None
    value = getattr(found, field)
    assert isinstance(value, Unreadable), value
    assert value.text == text
    assert f"column {column!r}" in value.reason
    assert found.status == JobStatus.SUCCEEDED  # the rest of the snapshot is read as usual
    assert ratchet.find_jobs().items[0].id == job_id


@pytest.mark.parametrize(("column", "text", "field"), POISON)
def test_console_shows_the_raw_text_escaped(app: Flask, column: str, text: str, field: str) -> None:
    job_id = poisoned(column, text)
    client = app.test_client()
    with app.app_context():
        page = client.get(f"/ratchet/jobs/{job_id}", headers=READ)
    assert page.status_code == 200
    assert escape(text[:1000]) in page.text
    assert "<b>not json" not in page.text
    assert f"column {escape(repr(column))}" in page.text
    with app.app_context():
        listed = client.get("/ratchet/jobs", headers=READ)
    assert listed.status_code == 200 and str(job_id) in listed.text


@pytest.mark.parametrize(("column", "text", "field"), POISON)
def test_jobs_show_prints_the_raw_text(app: Flask, column: str, text: str, field: str) -> None:
    job_id = poisoned(column, text)
    shown = app.test_cli_runner().invoke(args=["ratchet", "jobs", "show", str(job_id)])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output)[field] == text


def test_unreadable_progress_is_shown_as_stored(app: Flask) -> None:
    job_id = ratchet.enqueue_now(add, 1, 2).id
    write(job_queue, job_id, progress="<b>{oops")
    with app.app_context():
        page = app.test_client().get(f"/ratchet/jobs/{job_id}", headers=READ)
    assert page.status_code == 200
    assert "&lt;b&gt;{oops" in page.text and "column &#39;progress&#39;" in page.text
    found = ratchet.get_job(job_id)
    assert found is not None and isinstance(found.progress, Unreadable)
    assert found.progress.text == "<b>{oops"


# MariaDB's DATETIME holds no year past 9999: not a test there.
@pytest.mark.parametrize("database_url", ["sqlite", "postgresql"], indirect=True)
def test_a_time_past_year_9999_reads_as_the_latest_and_is_never_due(
    app: Flask, dialect: str
) -> None:
    job_id = ratchet.enqueue_now(add, 1, 2).id
    far = "'33715-01-01 00:00:00+00'" if dialect == "postgresql" else "'33715-01-01 00:00:00'"
    for table, column in (
        ("ratchet_job_queue", "scheduled_time"),
        ("ratchet_job", "first_due_at"),
        ("ratchet_job", "created_at"),
    ):
        write_raw(f"UPDATE {table} SET {column} = {far} WHERE job_id = :id", job_id)
    found = ratchet.get_job(job_id)
    assert found is not None
    assert (found.scheduled_at, found.created_at) == (LATEST, LATEST)
    assert ratchet.claim_due(10, "node-a") == []
    client = app.test_client()
    for url in (
        "/ratchet/",
        "/ratchet/jobs",
        f"/ratchet/jobs/{job_id}",
        "/ratchet/jobs?sort=oldest",
    ):
        with app.app_context():
            assert client.get(url, headers=READ).status_code == 200, url
    assert ratchet.queue_health()["counts"]["PENDING"] == 1


def test_a_due_time_before_year_1_is_claimed_as_the_earliest(app: Flask, dialect: str) -> None:
    job_id = ratchet.enqueue_now(add, 1, 2).id
    early = {
        "postgresql": "'-infinity'",
        "sqlite": "'0000-01-01 00:00:00'",
        "mariadb": "'0000-00-00 00:00:00'",  # the zero date, which sql_mode may allow
    }[dialect]
    write_raw(f"UPDATE ratchet_job_queue SET scheduled_time = {early} WHERE job_id = :id", job_id)
    with app.app_context():
        assert app.test_client().get("/ratchet/jobs", headers=READ).status_code == 200
    (claimed,) = ratchet.claim_due(10, "node-a")
    assert (claimed.job_id, claimed.scheduled_time) == (job_id, EARLIEST)
    assert claimed.picked_at > datetime(2000, 1, 1, tzinfo=UTC)


# -- statuses ratchet never writes -------------------------------------------------------------

UNKNOWN = "<b>LOST"


def with_unknown_status(where: str) -> uuid.UUID:
    """A job whose status column (``where``) holds :data:`UNKNOWN`: a live job's hot row, an
    ended job's cold row, or the status a paused job was paused from."""
    if where == "terminal_status":
        job_id = ended_job()
        write(job, job_id, terminal_status=UNKNOWN)
    elif where == "paused_from_status":
        job_id = job_in(JobStatus.PAUSED)
        write(job_queue, job_id, paused_from_status=UNKNOWN)
    else:
        job_id = ratchet.enqueue_now(add, 1, 2).id
        write(job_queue, job_id, status=UNKNOWN)
    return job_id


STATUS_COLUMNS = [
    ("status", "status"),
    ("terminal_status", "status"),
    ("paused_from_status", "paused_from"),
]


@pytest.mark.parametrize(("column", "field"), STATUS_COLUMNS)
def test_an_unknown_status_is_read_as_its_raw_text(app: Flask, column: str, field: str) -> None:
    job_id = with_unknown_status(column)
    found = ratchet.get_job(job_id)
    assert found is not None
    value = getattr(found, field)
    assert isinstance(value, Unreadable) and value.text == UNKNOWN
    assert f"column {column!r}" in value.reason
    assert [j.id for j in ratchet.find_jobs().items] == [job_id]
    assert ratchet.claim_due(10, "node-a") == []  # the claim takes PENDING rows only
    client = app.test_client()
    for url in ("/ratchet/", "/ratchet/jobs", f"/ratchet/jobs/{job_id}"):
        with app.app_context():
            page = client.get(url, headers=READ)
        assert page.status_code == 200, url
        assert UNKNOWN not in page.text, url
    listed = app.test_cli_runner().invoke(args=["ratchet", "jobs", "list"])
    assert listed.exit_code == 0, listed.output
    if field == "status":
        assert escape(UNKNOWN) in page.text  # the job page
        assert f"{job_id}  {UNKNOWN}" in listed.output
    shown = app.test_cli_runner().invoke(args=["ratchet", "jobs", "show", str(job_id)])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output)[field] == UNKNOWN


@pytest.mark.parametrize("column", ["status", "terminal_status"])
def test_no_action_moves_a_job_of_unknown_status(app: Flask, column: str) -> None:
    job_id = with_unknown_status(column)
    for action in ("retry", "pause", "resume", "cancel"):
        assert getattr(ratchet, f"{action}_job")(job_id) is False, action
    console = Console(app.test_client())
    for action in ("retry", "pause", "resume", "cancel", "delete"):
        answer = console.post(f"/ratchet/jobs/{job_id}/{action}")
        assert answer.status_code == 200 and "was not" in answer.text, action
    found = ratchet.get_job(job_id)
    assert found is not None and isinstance(found.status, Unreadable)
    assert found.status.text == UNKNOWN


def test_a_batch_parent_of_unknown_status_is_listed(app: Flask) -> None:
    batch_id = ratchet.enqueue_batch("nightly").add(add, 1, 2).submit().id
    write(job_queue, batch_id, status=UNKNOWN)
    (child,) = [j.id for j in ratchet.find_jobs().items if j.id != batch_id]
    client = app.test_client()
    for url in ("/ratchet/batches", f"/ratchet/batches/{batch_id}", f"/ratchet/jobs/{child}"):
        with app.app_context():
            page = client.get(url, headers=READ)
        assert page.status_code == 200, url
        assert escape(UNKNOWN) in page.text and UNKNOWN not in page.text, url


# -- recurring masters -------------------------------------------------------------------------

#: (column of ratchet_recurring, what it holds): each damaged in turn.
MASTER_POISON = [
    ("options", "<b>not json"),
    ("options", '{"priority": 2}'),
    ("options", json.dumps(json.loads(encode_options(JobOptions())) | {"priority": 99})),
    ("payload", "<b>not json"),
    ("payload", "[]"),
    ("misfire", "<b>SOMETIMES"),
    ("cron", "<b>every day"),
    ("zone", "<b>Mars/Olympus"),
]


def damage(recurring_id: str, column: str, text: str) -> None:
    with db.engine.begin() as conn:
        conn.execute(
            sa.update(recurring)
            .where(recurring.c.recurring_id == recurring_id)
            .values({column: text})
        )


#: What the readers could not read before (a cron or zone that cannot be evaluated always read).
UNREADABLE_MASTER = [(c, t) for c, t in MASTER_POISON if c not in ("cron", "zone")]


@pytest.mark.parametrize(("column", "text"), [*UNREADABLE_MASTER, ("status", UNKNOWN)])
def test_readers_show_a_damaged_master_as_stored(app: Flask, column: str, text: str) -> None:
    _, bad, _ = two_masters()
    damage(bad.id, column, text)
    found = ratchet.get_recurring(bad.id)
    assert found is not None
    shown = getattr(found, "args" if column == "payload" else column)
    assert str(shown) == text
    if isinstance(shown, Unreadable):
        assert f"column {column!r}" in shown.reason
    assert bad.id in [m.id for m in ratchet.list_recurring(include_canceled=True)]
    client = app.test_client()
    for url in ("/ratchet/recurring?canceled=1", f"/ratchet/recurring/cancel?id={bad.id}"):
        with app.app_context():
            page = client.get(url, headers=READ)
        assert page.status_code == 200, url
        assert text not in page.text, url
        if column in ("status", "misfire") and "cancel" not in url:
            assert escape(text) in page.text, url
    listed = app.test_cli_runner().invoke(args=["ratchet", "recurring", "list", "--all"])
    assert listed.exit_code == 0, listed.output
    assert bad.id in listed.output


@pytest.mark.parametrize(("column", "text"), MASTER_POISON)
def test_the_firing_sets_a_damaged_master_aside_and_fires_the_others(
    app: Flask, caplog: pytest.LogCaptureFixture, column: str, text: str
) -> None:
    good, bad, due = two_masters()
    for m in (good, bad):
        set_next_fire(m.id, due)
    damage(bad.id, column, text)
    assert [f.recurring_id for f in firer().fire_pass().fired] == [good.id]
    assert children(bad.id) == []
    set_aside = ratchet.get_recurring(bad.id)
    assert set_aside is not None
    assert (set_aside.status, set_aside.next_fire) == (RecurringStatus.PAUSED, None)
    (logged,) = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert f"recurring job {bad.id} cannot be evaluated (column {column!r}" in logged
    # Not resumed as it is: it would be set aside again. Run now needs no schedule, only
    # the arguments and options of its child.
    refused = ("resume",) if column in ("cron", "zone") else ("resume", "run")
    assert ratchet.resume_recurring(bad.id) is False
    if "run" in refused:
        assert ratchet.run_recurring_now(bad.id) is None
    console = Console(app.test_client())
    for action in refused:
        answer = console.post(f"/ratchet/recurring/{action}", {"id": bad.id})
        assert answer.status_code == 200 and "was not" in answer.text, action
    assert children(bad.id) == []


def test_a_master_of_unknown_status_is_never_fired_and_registers_anew(app: Flask) -> None:
    good, bad, due = two_masters()
    for m in (good, bad):
        set_next_fire(m.id, due)
    damage(bad.id, "status", UNKNOWN)
    assert [f.recurring_id for f in firer().fire_pass().fired] == [good.id]
    for change in (ratchet.pause_recurring, ratchet.resume_recurring, ratchet.cancel_recurring):
        assert change(bad.id) is False, change
    assert ratchet.run_recurring_now(bad.id) is None
    ratchet.schedule_recurring(MONTHLY, "UTC", add, 3, 4).with_business_key("bad").submit()
    assert master(bad.id).status == RecurringStatus.ACTIVE


# -- numbers no finished work adds up to -------------------------------------------------------


def test_a_batch_of_endless_metrics_is_shown_as_stored(app: Flask, dialect: str) -> None:
    batch_id = ratchet.enqueue_batch("nightly").add(add, 1, 2).submit().id
    # SQLite reads a stored NaN as NULL, and MariaDB holds neither NaN nor infinity: each
    # database gets the least sensible value it keeps.
    run = {"postgresql": math.nan, "sqlite": math.inf, "mariadb": 1.7e308}[dialect]
    wait = -1.7e308 if dialect == "mariadb" else -math.inf
    with db.engine.begin() as conn:
        conn.execute(
            sa.update(batch)
            .where(batch.c.batch_id == batch_id)
            .values(child_run_ms=run, child_wait_ms=wait)
        )
    client = app.test_client()
    for url in ("/ratchet/batches", f"/ratchet/batches/{batch_id}"):
        with app.app_context():
            page = client.get(url, headers=READ)
        assert page.status_code == 200, url
    assert duration(run / 1000) in page.text and duration(wait / 1000) in page.text


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_batch_counts_that_are_not_numbers_are_shown_as_stored(app: Flask) -> None:
    """Only SQLite keeps text or a blob in a number column: a test there only."""
    batch_id = ratchet.enqueue_batch("nightly").add(add, 1, 2).submit().id
    with db.engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE ratchet_batch SET total = '<b>lots', succeeded = x'00ff', "
                "child_run_ms = 'zz' WHERE batch_id = :id"
            ),
            {"id": batch_id.hex},
        )
    client = app.test_client()
    for url in ("/ratchet/batches", f"/ratchet/batches/{batch_id}", f"/ratchet/jobs/{batch_id}"):
        with app.app_context():
            page = client.get(url, headers=READ)
        assert page.status_code == 200, url
        assert "unreadable: total=&#39;&lt;b&gt;lots&#39;, succeeded=b&#39;\\x00\\xff&#39;" in (
            page.text
        ), url
    progress = ratchet.batch_progress(batch_id)
    assert progress is not None
    assert (progress.total, progress.succeeded, progress.child_run_ms) == (0, 0, 0.0)
    assert progress.damaged is not None and "child_run_ms='zz'" in progress.damaged


# -- ids that are not UUIDs (SQLite keeps any text in a uuid column) ------------------------------


def write_text_id(table: str, column: str, where: str, key: uuid.UUID, text: str) -> None:
    """Put ``text`` in ``table.column`` of the row whose ``where`` column is ``key``."""
    with db.engine.begin() as conn:
        conn.execute(
            sa.text(f"UPDATE {table} SET {column} = :text WHERE {where} = :key"),
            {"text": text, "key": key.hex},
        )


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("text", ["zz", "<b>not-a-uuid", ""])
def test_an_id_that_is_not_a_uuid_reads_as_the_nil_id(app: Flask, text: str) -> None:
    """Only SQLite can hold these (PostgreSQL's uuid type refuses them): a test there only."""
    job_id = ended_job()
    waiting = ratchet.enqueue_now(add, 3, 4).id
    for column in ("depends_on", "superseded_by", "batch_id"):
        write_text_id("ratchet_job", column, "job_id", job_id, text)
        write_text_id("ratchet_job", column, "job_id", waiting, text)
    found = ratchet.get_job(job_id)
    assert found is not None and found.depends_on == UNREADABLE_ID
    assert found.superseded_by == UNREADABLE_ID
    assert {j.id for j in ratchet.find_jobs().items} == {job_id, waiting}
    client = app.test_client()
    for url in ("/ratchet/jobs", f"/ratchet/jobs/{job_id}", f"/ratchet/jobs/{waiting}"):
        assert client.get(url, headers=READ).status_code == 200, url
    listed = app.test_cli_runner().invoke(args=["ratchet", "jobs", "list"])
    assert listed.exit_code == 0 and str(job_id) in listed.output, listed.output
    # The claim reads the same columns: it hands the job over, and the worker does not fail.
    (claimed,) = ratchet.claim_due(10, "node-a")
    assert claimed.job_id == waiting and claimed.depends_on == UNREADABLE_ID
    with db.engine.begin() as conn:
        assert ratchet.runtime.store.cluster.archive_ended(conn, older_than=0, limit=10) == 1


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_an_audit_row_whose_id_is_not_a_uuid_leaves_the_overview_working(app: Flask) -> None:
    failed = job_in(JobStatus.FAILED)
    console = Console(app.test_client())
    assert console.post(f"/ratchet/jobs/{failed}/retry").status_code in (200, 303)
    with db.engine.begin() as conn:
        assert conn.execute(sa.text("UPDATE ratchet_audit SET audit_id = 'zz'")).rowcount == 1
    assert console.get("/ratchet/").status_code == 200


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_ended_jobs_whose_id_is_not_a_uuid_leave_retention_archiving_the_others(
    app: Flask,
) -> None:
    """They cannot be deleted by their id: archiving a copy of each under the nil id failed
    every pass from the second on (or the first, with two), and no job was archived again."""
    damaged = [ended_job(), ended_job()]
    kept = ended_job()
    for key, text in zip(damaged, ["zz", "<b>not-a-uuid"], strict=True):
        write_text_id("ratchet_job", "job_id", "job_id", key, text)
    store = ratchet.runtime.store
    for _ in range(2):
        with db.engine.begin() as conn:
            store.cluster.archive_ended(conn, older_than=0, limit=10)
    assert ratchet.get_job(kept) is None
    with db.engine.connect() as conn:
        assert conn.execute(sa.select(job_archive.c.job_id)).scalars().all() == [kept]
        assert sorted(conn.exec_driver_sql("SELECT job_id FROM ratchet_job").scalars()) == [
            "<b>not-a-uuid",
            "zz",
        ]


def _id_columns() -> list[str]:
    return [
        f"{t.name}.{c.name}"
        for t in metadata.sorted_tables
        for c in t.columns
        if isinstance(c.type, StoredUuid)
    ]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("column", _id_columns())
def test_any_id_column_that_is_not_a_uuid_leaves_pages_commands_and_maintenance_working(
    app: Flask, column: str
) -> None:
    """Every id column of every table, written as text that is not a UUID in one row."""
    failed = job_in(JobStatus.FAILED)
    running = job_in(JobStatus.RUNNING)
    pending = ratchet.enqueue(add, 1, 2).with_business_key("k").with_tags("t").submit().id
    parent = ratchet.enqueue_batch("nightly").add(add, 1, 2).submit().id
    first = ratchet.enqueue(add, 1, 1).then(add, 2, 2).submit().id
    now = datetime.now(UTC)
    with db.engine.begin() as conn:
        conn.execute(
            sa.insert(execution).values(
                execution_id=uuid.uuid4(), job_id=failed, attempt=1, node_id="node-a",
                status="FAILED", started_at=now, finished_at=now, error="boom",
            )
        )  # fmt: skip
        conn.execute(
            sa.insert(job_log).values(
                job_id=failed, attempt=1, logged_at=now, level="INFO", message="hi"
            )
        )
        conn.execute(
            sa.insert(dlq_alert).values(
                alert_id=uuid.uuid4(), job_id=failed, task="tests.apps.add", error_hash="x",
                error="boom", hour=now, occurrences=1, created_at=now, last_seen_at=now,
            )
        )  # fmt: skip
        conn.execute(
            sa.insert(resource_permit).values(
                job_id=running, resource_name="probe-api", node_id="node-a", acquired_at=now
            )
        )
        conn.execute(
            sa.insert(resource_start).values(
                job_id=running, resource_name="probe-api", started_at=now
            )
        )
        conn.execute(
            sa.insert(job_archive).values(
                job_id=uuid.uuid4(), task="tests.apps.add", terminal_status="SUCCEEDED",
                created_at=now, finished_at=now, archived_at=now, data="{}",
            )
        )  # fmt: skip
        conn.execute(
            sa.insert(audit).values(
                audit_id=uuid.uuid4(), at=now, actor="a", role="admin", action="retry",
                scope="job", target=str(failed), requested=1, changed=1,
            )
        )  # fmt: skip
    table, name = column.split(".")
    with db.engine.begin() as conn:
        changed = conn.exec_driver_sql(
            f"UPDATE {table} SET {name} = 'zz' WHERE rowid = (SELECT min(rowid) FROM {table})"
        ).rowcount
    assert changed == 1
    client = app.test_client()
    urls = [
        "/ratchet/",
        "/ratchet/jobs",
        "/ratchet/jobs?status=FAILED",
        "/ratchet/dead-letters",
        "/ratchet/batches",
        "/ratchet/resources",
    ]
    for url in urls:
        assert client.get(url, headers=READ).status_code == 200, url
    # A job whose own id was damaged can no longer be found by it: the usual 404.
    pages = [f"/ratchet/jobs/{key}" for key in (failed, running, pending, parent, first)]
    for url in [*pages, f"/ratchet/batches/{parent}"]:
        assert client.get(url, headers=READ).status_code in (200, 404), url
    assert client.get(f"/ratchet/jobs/{UNREADABLE_ID}", headers=READ).status_code == 404
    runner = app.test_cli_runner()
    for args in (["jobs", "list"], ["jobs", "show", str(failed)], ["jobs", "logs", str(failed)]):
        done = runner.invoke(args=["ratchet", *args])
        # Exits cleanly: "no job has id …" for the job whose own id was damaged.
        assert done.exception is None or isinstance(done.exception, SystemExit), args
    config, store = ratchet.runtime.config, ratchet.runtime.store
    for task in (retention(config), orphan_recovery(config), retention(config)):
        task.run(store, db.engine)
    ratchet.claim_due(10, "node-b")
