"""The console's shell and its error pages through ``app.test_client()``, on every database:
what every page carries for a phone and a screen reader, times with their zone and age, actions
offered only where the state table allows them, errors drawn in the layout, ``status=failed``."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from flask import Flask

from flask_ratchet.console.offers import SOURCES, offered
from flask_ratchet.schema import job
from flask_ratchet.states import Action, JobStatus, allowed
from tests.apps import create_app, db, ratchet
from tests.integration.helpers import job_in
from tests.integration.test_console import ADMIN, ORIGIN, Console

PAGES = (
    "/ratchet/",
    "/ratchet/jobs",
    "/ratchet/queues",
    "/ratchet/recurring",
    "/ratchet/batches",
    "/ratchet/resources",
    "/ratchet/breakers",
    "/ratchet/dead-letters",
    "/ratchet/nodes",
)


@pytest.fixture
def console(app: Flask) -> Console:
    return Console(app.test_client())


def buttons(html: str) -> list[str]:
    """The ``data-action`` of every job action button on a job's page."""
    return re.findall(r'<button type="submit" class="[^"]*" data-action="([a-z]+)"', html)


def test_every_page_has_a_skip_link_a_favicon_a_menu_and_a_live_alarm_region(
    console: Console,
) -> None:
    for url in PAGES:
        html = console.get(url).text
        assert '<html lang="en">' in html, url
        assert re.search(r'<a class="skip" href="#main">Skip to content</a>', html), url
        assert '<main id="main" tabindex="-1">' in html, url
        assert 'rel="icon" type="image/svg+xml"' in html, url
        assert 'class="nav-toggle" aria-expanded="false" aria-controls="console-nav"' in html
        assert re.search(r'id="alarm-news"[^>]*aria-live="polite"', html), url
    with console.get("/ratchet/static/favicon.svg") as icon:
        assert icon.status_code == 200 and icon.mimetype == "image/svg+xml"
    with console.get("/ratchet/static/console.js") as script:
        assert script.status_code == 200 and "alarm-news" in script.text


def test_times_show_their_age_by_the_database_clock_and_the_exact_time_on_hover(
    console: Console,
) -> None:
    job_id = job_in(JobStatus.PENDING)
    created = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    with ratchet.transaction() as conn:
        conn.execute(sa.update(job).where(job.c.job_id == job_id).values(created_at=created))
        now = ratchet.runtime.store.now(conn)
    days = int((now - created).total_seconds() // 86400)
    expected = (
        f'<time datetime="2026-01-02T03:04:05+00:00" title="2026-01-02 03:04:05 UTC">'
        f"{days} d ago</time>"
    )
    assert expected in console.get(f"/ratchet/jobs/{job_id}").text
    assert expected in console.get("/ratchet/jobs").text


def test_a_job_page_offers_only_the_actions_its_status_allows(console: Console) -> None:
    # Made before any pending job, so that the claim inside job_in takes the right one.
    running = job_in(JobStatus.RUNNING)
    failed = job_in(JobStatus.FAILED)
    pending = job_in(JobStatus.PENDING)
    paused = job_in(JobStatus.PAUSED)
    assert buttons(console.get(f"/ratchet/jobs/{running}").text) == ["cancel"]
    assert buttons(console.get(f"/ratchet/jobs/{failed}").text) == ["retry", "pause", "delete"]
    assert buttons(console.get(f"/ratchet/jobs/{pending}").text) == ["pause", "cancel"]
    assert buttons(console.get(f"/ratchet/jobs/{paused}").text) == ["resume", "cancel"]


def test_the_list_offers_what_applies_to_the_jobs_on_screen_or_the_filtered_status(
    console: Console,
) -> None:
    job_in(JobStatus.RUNNING)

    def offered_on(url: str) -> tuple[list[str], list[str]]:
        html = console.get(url).text
        selected = re.findall(r'<button type="submit" name="action" value="([a-z]+)"', html)
        bulk = re.findall(r"/ratchet/jobs/bulk\?action=([a-z]+)", html)
        return selected, bulk

    assert offered_on("/ratchet/jobs?status=RUNNING") == (["cancel"], ["cancel"])
    assert offered_on("/ratchet/jobs?status=SUCCEEDED") == ([], ["delete"])  # none on screen


@pytest.mark.parametrize("status", list(JobStatus))
def test_the_offers_are_the_state_tables(status: JobStatus) -> None:
    names = {"retry": Action.RETRY, "pause": Action.PAUSE, "resume": Action.RESUME}
    names |= {"cancel": Action.CANCEL}
    expected = [n for n in SOURCES if n in names and allowed(names[n], status)]
    if status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELED):
        expected.append("delete")
    assert offered([status]) == expected
    assert offered([status, "NOT-A-STATUS"]) == expected  # unreadable stored text: skipped


def test_status_failed_is_the_failed_status(console: Console) -> None:
    failed = job_in(JobStatus.FAILED)
    job_in(JobStatus.PENDING)
    for value in ("failed", "Failed", "FAILED", " failed "):
        page = console.get(f"/ratchet/jobs?status={value}")
        assert page.status_code == 200, value
        assert re.findall(r'name="job_id" value="([^"]+)"', page.text) == [str(failed)]
        assert '<option value="FAILED" selected' in page.text  # the form shows it chosen


def test_a_bad_filter_is_a_page_naming_the_field_with_the_form_again(console: Console) -> None:
    page = console.get("/ratchet/jobs?queue=mail&priority=urgent&status=failed")
    assert page.status_code == 400
    html = page.text
    assert "<title>400 Bad Request · Ratchet</title>" in html
    assert 'id="console-nav"' in html  # in the layout, its menu and all
    assert "priority must be 0-4 or LOWEST, LOW, NORMAL, HIGH, CRITICAL" in html
    form = html[html.index("data-error-form") : html.index("</form>")]
    assert '<input name="priority" value="urgent" aria-invalid="true"' in form
    assert '<input name="queue" value="mail">' in form
    assert '<input name="status" value="failed">' in form
    assert 'action="/ratchet/jobs"' in html
    # A date, a size and a cursor are named too.
    for query, field in (
        ("created_after=yesterday", "created_after"),
        ("size=7", "size"),
        ("cursor=garbage", "cursor"),
        ("status=DONE", "status"),
    ):
        html = console.get(f"/ratchet/jobs?{query}").text
        assert re.search(rf'<input name="{field}" value="[^"]*" aria-invalid="true"', html), query


def test_a_missing_job_page_says_how_long_ended_jobs_are_kept(console: Console) -> None:
    unknown = uuid.uuid4()
    page = console.get(f"/ratchet/jobs/{unknown}")
    assert page.status_code == 404
    assert "<title>404 Not Found · Ratchet</title>" in page.text
    assert (
        f"Job {unknown} was not found; ended jobs are archived after "
        "RATCHET_RETENTION_DAYS (7 days)." in page.text
    )


def test_an_archived_job_page_says_it_was_archived_and_when(console: Console) -> None:
    ended = job_in(JobStatus.SUCCEEDED)
    with ratchet.transaction() as conn:
        long_ago = datetime.now(UTC) - timedelta(days=30)
        conn.execute(sa.update(job).where(job.c.job_id == ended).values(finished_at=long_ago))
        moved = ratchet.runtime.store.cluster.archive_ended(conn, 7 * 86400, 100)
    assert moved == 1
    page = console.get(f"/ratchet/jobs/{ended}")
    assert page.status_code == 404
    assert re.search(
        rf"Job {ended} was archived at \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d UTC: ended jobs are "
        r"moved out of the job tables RATCHET_RETENTION_DAYS \(7 days\) after they end\.",
        page.text,
    )


def test_unrouted_urls_and_wrong_methods_are_pages_in_the_layout(console: Console) -> None:
    missing = console.get("/ratchet/no-such-page")
    assert missing.status_code == 404
    assert "<title>404 Not Found · Ratchet</title>" in missing.text
    assert 'id="console-nav"' in missing.text
    assert missing.headers["Content-Security-Policy"].startswith("default-src 'self'")
    csrf = {"X-Ratchet-CSRF": console.token}
    with console.client.application.app_context():
        wrong = console.client.put("/ratchet/jobs", headers=ADMIN | ORIGIN | csrf)
    assert wrong.status_code == 405
    assert "<title>405 Method Not Allowed · Ratchet</title>" in wrong.text
    assert "GET" in wrong.headers["Allow"]
    # A redirect is still a redirect (a trailing slash), not an error page.
    assert console.get("/ratchet").status_code in (301, 308)


def test_a_refused_request_gets_the_layout_without_the_menu_or_the_alarms(
    database_url: str,
) -> None:
    app = create_app(database_url, RATCHET_CONSOLE_AUTH=None)
    client = app.test_client()
    for url in ("/ratchet/", "/ratchet/no-such-page", f"/ratchet/jobs/{uuid.uuid4()}"):
        page = client.get(url, headers=ADMIN)
        assert page.status_code == 403, url
        assert "<title>403 Forbidden · Ratchet</title>" in page.text, url
        assert "RATCHET_CONSOLE_AUTH" in page.text
        assert 'id="console-nav"' not in page.text and 'id="alarms"' not in page.text
    with app.app_context():
        db.engine.dispose()


def test_htmx_errors_stay_a_notice(console: Console) -> None:
    page = console.get("/ratchet/jobs?priority=urgent", headers={"HX-Request": "true"})
    assert page.status_code == 400
    assert page.text.strip().startswith('<div class="notice warn" role="alert">400: priority')


def test_a_refused_form_names_its_field_and_links_back_to_its_page(console: Console) -> None:
    form_page = "http://localhost/ratchet/resources/limit?name=api"
    with console.client.application.app_context():
        page = console.client.post(
            "/ratchet/resources/limit",
            headers=ADMIN | ORIGIN | {"Referer": form_page},
            data={"csrf_token": console.token, "name": "api", "retry_delay": "x" * 50},
        )
    assert page.status_code == 400
    assert "<title>400 Bad Request · Ratchet</title>" in page.text
    assert "retry_delay must be a number of at most 40 characters" in page.text
    assert (
        '<a href="http://localhost/ratchet/resources/limit?name=api">Back to the form</a>: '
        "correct <b>retry delay</b>" in page.text
    )
    # Another site's page is not linked to.
    with console.client.application.app_context():
        page = console.client.post(
            "/ratchet/resources/limit",
            headers=ADMIN | ORIGIN | {"Referer": "http://elsewhere.example/"},
            data={"csrf_token": console.token, "name": "api", "retry_delay": "x" * 50},
        )
    assert page.status_code == 400 and "elsewhere" not in page.text
    assert "Go back, correct <b>retry delay</b>" in page.text
