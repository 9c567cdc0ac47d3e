"""Secrets stay masked wherever stored values are shown: the job page and ``flask ratchet jobs``,
on SQLite and PostgreSQL, also for rows written straight into the tables."""

from __future__ import annotations

import json
import logging
import uuid
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from flask import Flask

from flask_ratchet.redact import MASK
from flask_ratchet.schema import job, job_log, job_queue
from flask_ratchet.testing import run_jobs
from tests.apps import add, charge_card, logs_a_failure, logs_secrets, ratchet

ADMIN = {"X-Role": "admin"}
URL = "postgresql://u:secret@h/db"


def job_with_secrets() -> uuid.UUID:
    """A job whose arguments, params, result, error and log hold secrets in clear, as a row
    written by hand (or by an older version) would."""
    job_id = (
        ratchet.enqueue(add, {"password": "hunter2", "dsn": URL}, 1)
        .with_param("api_key", "k-123")
        .submit()
        .id
    )
    with ratchet.transaction() as conn:
        conn.execute(
            sa.update(job)
            .where(job.c.job_id == job_id)
            .values(result=json.dumps({"token": "t-456"}), terminal_error=f"failed: {URL}")
        )
        conn.execute(
            sa.update(job_queue)
            .where(job_queue.c.job_id == job_id)
            .values(last_error=f"failed: {URL}")
        )
        conn.execute(
            sa.insert(job_log).values(
                job_id=job_id,
                attempt=1,
                logged_at=datetime.now(UTC),
                level="INFO",
                message=f"connecting to {URL} with password=hunter3",
            )
        )
    return job_id


def test_the_job_page_masks_log_lines_and_errors(app: Flask) -> None:
    job_id = job_with_secrets()
    page = app.test_client().get(f"/ratchet/jobs/{job_id}", headers=ADMIN)
    assert page.status_code == 200
    assert "connecting to postgresql://u:***@h/db with password=***" in page.text
    assert "failed: postgresql://u:***@h/db" in page.text
    for secret in ("secret@", "hunter2", "hunter3", "k-123"):
        assert secret not in page.text


def test_jobs_show_masks_secrets_unless_asked(app: Flask) -> None:
    job_id = job_with_secrets()
    runner = app.test_cli_runner()
    shown = runner.invoke(args=["ratchet", "jobs", "show", str(job_id)])
    assert shown.exit_code == 0, shown.output
    fields = json.loads(shown.output)
    assert fields["args"][0] == {"password": MASK, "dsn": f"postgresql://u:{MASK}@h/db"}
    assert fields["params"] == {"api_key": MASK}
    assert fields["result"] == {"token": MASK}
    assert fields["error"] == "failed: postgresql://u:***@h/db"
    revealed = runner.invoke(args=["ratchet", "jobs", "show", "--reveal-secrets", str(job_id)])
    fields = json.loads(revealed.output)
    assert fields["args"][0] == {"password": "hunter2", "dsn": URL}
    assert fields["params"] == {"api_key": "k-123"} and fields["result"] == {"token": "t-456"}
    assert fields["error"] == f"failed: {URL}"


def test_jobs_logs_masks_url_passwords(app: Flask) -> None:
    job_id = job_with_secrets()
    runner = app.test_cli_runner()
    shown = runner.invoke(args=["ratchet", "jobs", "logs", str(job_id)])
    assert shown.exit_code == 0, shown.output
    assert "#1 INFO    connecting to postgresql://u:***@h/db with password=***" in shown.output
    assert "secret@" not in shown.output and "hunter3" not in shown.output
    refused = runner.invoke(args=["ratchet", "jobs", "logs", "not-an-id"])
    assert refused.exit_code == 1 and "is not a job id" in refused.output


def test_jobs_show_masks_the_raw_text_of_an_unreadable_column(app: Flask) -> None:
    job_id = ratchet.enqueue_now(add, 1, 2).id
    with ratchet.transaction() as conn:
        conn.execute(
            sa.update(job).where(job.c.job_id == job_id).values(params=f"{{not json {URL}")
        )
    shown = app.test_cli_runner().invoke(args=["ratchet", "jobs", "show", str(job_id)])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output)["params"] == "{not json postgresql://u:***@h/db"
    revealed = app.test_cli_runner().invoke(
        args=["ratchet", "jobs", "show", "--reveal-secrets", str(job_id)]
    )
    assert json.loads(revealed.output)["params"] == f"{{not json {URL}"


def test_the_apps_own_log_handlers_get_a_jobs_lines_masked(
    app: Flask, caplog: pytest.LogCaptureFixture
) -> None:
    password, token = "hunter" + "5", "t0k-" + "55"
    logs_secrets.enqueue(f"postgresql://shop:{password}@db/prod", token)
    with caplog.at_level(logging.INFO):
        run_jobs(app)
    own = [r for r in caplog.records if r.name == "flask_ratchet.job"]
    # The job logger's lines are masked before any handler (caplog's, here) sees them; a
    # module's own logger is the app's to configure.
    assert [r.getMessage() for r in own] == [
        "connecting to postgresql://shop:***@db/prod with token=***"
    ]


def test_an_argument_is_masked_by_the_name_of_the_parameter_it_binds_to(app: Flask) -> None:
    token = "tok_live_" + "8f2"
    job_id = charge_card.enqueue(token, 5).id
    page = app.test_client().get(f"/ratchet/jobs/{job_id}", headers=ADMIN)
    assert page.status_code == 200 and token not in page.text
    runner = app.test_cli_runner()
    shown = json.loads(runner.invoke(args=["ratchet", "jobs", "show", str(job_id)]).output)
    assert shown["args"] == [MASK, 5]  # card_token is secret, amount is not
    revealed = runner.invoke(args=["ratchet", "jobs", "show", "--reveal-secrets", str(job_id)])
    assert json.loads(revealed.output)["args"] == [token, 5]


def test_a_jobs_logged_traceback_reaches_the_apps_handlers_masked(
    app: Flask, caplog: pytest.LogCaptureFixture
) -> None:
    password = "hunter" + "6"
    logs_a_failure.enqueue(f"postgresql://shop:{password}@db/prod")
    with caplog.at_level(logging.INFO):
        run_jobs(app)
    (record,) = [r for r in caplog.records if r.name == "flask_ratchet.job"]
    shown = logging.Formatter().format(record)  # as an app's own handler prints it
    assert "giving up" in shown and "ConnectionError: cannot reach" in shown
    assert password not in shown and "postgresql://shop:***@db/prod" in shown


def test_the_workers_text_lines_keep_logger_names_that_look_like_keys() -> None:
    from flask_ratchet.worker.logs import TextFormatter

    record = logging.LogRecord("shop.api_tokens", logging.WARNING, "f", 1, "%s keys", (12,), None)
    assert TextFormatter().format(record).endswith("WARNING shop.api_tokens: 12 keys")
    secret = logging.LogRecord("shop", logging.WARNING, "f", 1, "token=%s", ("t-1",), None)
    assert TextFormatter().format(secret).endswith("WARNING shop: token=***")
