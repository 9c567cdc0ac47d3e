"""The console in a real browser: headless Chromium against a live server and a real worker.

Opens the overview, filters the job list, opens a failed job, presses Retry and watches the
status change once the worker has run it; then opens the recurring masters and pauses one, and
looks at the batches and at one batch, whose bar fills as the worker runs its children, at the
resource limits and circuit breakers pages, and pauses a queue. A screenshot of each page is
saved under ``tests/browser/screenshots/<database>/`` (ignored by git) for review.

Chromium and its driver are Debian's ``chromium`` and ``chromium-driver`` (``make system-deps``
installs them). Without them this test fails: it never skips.
"""

from __future__ import annotations

import re
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from flask import Flask
from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import Select
from werkzeug.serving import BaseWSGIServer, make_server

from flask_ratchet.recurring import RecurringStatus
from flask_ratchet.schema import job
from flask_ratchet.states import JobStatus
from tests.acceptance.conftest import Workers, wait_until
from tests.apps import add, create_app, db, ratchet, refuse, report, send_mail
from tests.integration.helpers import add_node, job_in
from tests.integration.test_substates import make_jobs

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
SHOTS = Path(__file__).parent / "screenshots"
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1360,1000",
)

pytestmark = pytest.mark.slow


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[WebDriver]:
    """Headless Chromium with a fresh profile."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        pytest.fail(
            f"{', '.join(missing)} missing: run 'make system-deps' "
            "(apt-get install -y chromium chromium-driver)",
            pytrace=False,
        )
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")
    # The console's log, so the test can tell the CSP refused nothing the pages need.
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


class LiveServer:
    """The test app served by werkzeug on a free port, in a thread."""

    def __init__(self, app: Flask) -> None:
        self.app = app
        self.server: BaseWSGIServer = make_server("127.0.0.1", 0, app, threaded=True)
        self.url = f"http://127.0.0.1:{self.server.server_port}/ratchet"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.thread.join(10)


@pytest.fixture
def live(database_url: str) -> Iterator[LiveServer]:
    app = create_app(database_url, RATCHET_CONSOLE_AUTH=lambda request: "admin")
    with app.app_context():
        app.extensions["ratchet"].ensure_schema()
    server = LiveServer(app)
    yield server
    server.stop()
    with app.app_context():
        db.engine.dispose()


def shoot(driver: WebDriver, folder: Path, name: str) -> Path:
    """Save a full-height screenshot of the current page."""
    folder.mkdir(parents=True, exist_ok=True)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1360, max(1000, min(int(height) + 40, 4000)))
    path = folder / f"{name}.png"
    driver.save_screenshot(str(path))
    driver.set_window_size(1360, 1000)
    return path


def text_of(driver: WebDriver, css: str) -> str:
    """The text of the first element matching ``css``; "" while htmx is swapping it."""
    try:
        return str(driver.find_element(By.CSS_SELECTOR, css).text)
    except (NoSuchElementException, StaleElementReferenceException):
        return ""


def csp_violations(driver: WebDriver) -> list[str]:
    """Browser log entries since the last call that report a Content-Security-Policy refusal."""
    return [
        str(entry.get("message", ""))
        for entry in driver.get_log("browser")
        if "Content Security Policy" in str(entry.get("message", ""))
        or "Content-Security-Policy" in str(entry.get("message", ""))
    ]


def status_of(app: Flask, job_id: uuid.UUID) -> JobStatus | None:
    with app.app_context():
        job = ratchet.get_job(job_id)
        return job.status if job else None


def test_operator_retries_a_failed_job_in_the_browser(
    browser: WebDriver, live: LiveServer, workers: Workers, dialect: str
) -> None:
    app = live.app
    shots = SHOTS / dialect
    if shots.exists():
        shutil.rmtree(shots)
    with app.app_context():
        # Failed by hand (no execution), before any job a worker could claim.
        broken = job_in(JobStatus.FAILED)
        refused = ratchet.enqueue(refuse, "card declined").with_tags("billing").submit().id
        ratchet.enqueue_many(ratchet.enqueue(add, i, i).with_tags("batch") for i in range(12))
        ratchet.enqueue(report, 5).submit()
        ratchet.enqueue(send_mail, "a@example.com").submit()  # the "mail" queue's
        nightly = (
            ratchet.schedule_recurring("0 0 2 * * ?", "Europe/Berlin", add, 1, 2)
            .with_business_key("nightly-report")
            .with_name("Nightly report")
            .submit()
            .id
        )
        # Every child succeeds, so that the failed-job counts above stay as they are.
        batch = ratchet.enqueue_batch("nightly import")
        for i in range(6):
            batch.add(add, i, i)
        batch_id = batch.on_success(add, 0, 0).on_failure(add, 9, 9).submit().id
    worker = workers.start("--concurrency", "4")
    wait_until(lambda: status_of(app, refused) == JobStatus.FAILED, 60, "the worker to fail a job")

    # Overview: counts, chart, a live node.
    browser.get(live.url + "/")
    assert browser.title == "Overview · Ratchet"
    wait_until(
        lambda: text_of(browser, ".card.status-failed .count") == "2",
        20,
        "the overview to count both failed jobs",
    )
    assert browser.find_elements(By.CSS_SELECTOR, "svg.chart rect.ok")
    assert browser.execute_script("return typeof htmx") == "object"  # loaded under the CSP
    assert csp_violations(browser) == []
    shoot(browser, shots, "01-overview")

    # Jobs list, filtered to FAILED through the form.
    browser.find_element(By.LINK_TEXT, "Jobs").click()
    browser.find_element(By.CSS_SELECTOR, "details.filter-panel > summary").click()  # unfold
    Select(browser.find_element(By.NAME, "status")).select_by_value("FAILED")
    browser.find_element(By.CSS_SELECTOR, ".filters button[type=submit]").click()
    wait_until(lambda: "status=FAILED" in browser.current_url, 10, "the filtered list")
    rows = browser.find_elements(By.CSS_SELECTOR, "table.jobs tbody tr")
    ids = {c.get_attribute("value") for c in browser.find_elements(By.NAME, "job_id")}
    assert ids == {str(broken), str(refused)}, [r.text for r in rows]
    shoot(browser, shots, "02-jobs-failed")

    # Tick one row and pause it from the list: htmx posts the form, the list refreshes itself.
    browser.find_element(By.CSS_SELECTOR, f'input[name="job_id"][value="{refused}"]').click()
    browser.find_element(By.CSS_SELECTOR, '#selected button[value="pause"]').click()
    wait_until(lambda: "paused" in text_of(browser, "#notice"), 10, "the notice")
    wait_until(
        lambda: not browser.find_elements(By.CSS_SELECTOR, f'input[value="{refused}"]'),
        10,
        "the paused job to leave the FAILED list",
    )
    assert status_of(app, refused) == JobStatus.PAUSED
    assert "/jobs/selected" not in browser.current_url  # htmx posted it; no navigation
    assert csp_violations(browser) == []
    shoot(browser, shots, "03-jobs-after-pause")

    # The failed job's page: Retry, then watch it run.
    browser.find_element(By.CSS_SELECTOR, f'a[href$="/jobs/{broken}"]').click()
    wait_until(lambda: str(broken) in browser.page_source, 10, "the job page")
    assert browser.find_element(By.CSS_SELECTOR, "h1 .pill").text == "FAILED"
    shoot(browser, shots, "04-job-failed")
    browser.find_element(By.CSS_SELECTOR, 'button[data-action="retry"]').click()
    wait_until(lambda: "retried" in text_of(browser, "#notice"), 10, "the notice")
    wait_until(
        lambda: text_of(browser, "h1 .pill") == "SUCCEEDED",
        60,
        "the page to show the retried job succeeded",
    )
    assert status_of(app, broken) == JobStatus.SUCCEEDED
    assert browser.find_elements(By.CSS_SELECTOR, "table.jobs tbody tr")  # its execution
    shoot(browser, shots, "05-job-retried")

    # The job that failed for good in the worker: error, traceback, alert.
    browser.get(f"{live.url}/jobs/{refused}")
    assert "card declined" in browser.page_source
    shoot(browser, shots, "06-job-dead-letter")
    # Paused above, it left the dead letters (their Retry acts on FAILED jobs): resumed, it is back.
    browser.get(live.url + "/dead-letters")
    assert "No dead letters" in browser.find_element(By.TAG_NAME, "main").text
    with app.app_context():
        assert ratchet.resume_job(refused)
    browser.get(live.url + "/dead-letters")
    assert "could not process" in browser.find_element(By.TAG_NAME, "main").text
    shoot(browser, shots, "07-dead-letters")
    browser.get(live.url + "/nodes")
    assert re.search(r"\d+(\.\d+)? s ago", browser.find_element(By.TAG_NAME, "main").text)
    shoot(browser, shots, "08-nodes")
    browser.get(live.url + "/")
    wait_until(
        lambda: "retry" in text_of(browser, "table.compact"),
        10,
        "the audit row on the overview",
    )
    shoot(browser, shots, "09-overview-after")
    assert csp_violations(browser) == []

    # Recurring masters: three upcoming fire times, then Pause through htmx.
    browser.find_element(By.LINK_TEXT, "Recurring").click()
    wait_until(lambda: browser.title == "Recurring · Ratchet", 10, "the recurring page")
    row = f'tr[data-recurring="{nightly}"]'
    assert text_of(browser, f"{row} .pill") == "ACTIVE"
    assert len(browser.find_elements(By.CSS_SELECTOR, f"{row} td.upcoming li")) == 3
    shoot(browser, shots, "10-recurring")
    browser.find_element(By.CSS_SELECTOR, f'{row} button[data-action="pause"]').click()
    wait_until(lambda: "paused" in text_of(browser, "#notice"), 10, "the notice")
    wait_until(
        lambda: text_of(browser, f"{row} .pill") == "PAUSED",
        10,
        "the row to show the master paused",
    )
    assert text_of(browser, f"{row} td.upcoming") == "paused"
    assert browser.find_elements(By.CSS_SELECTOR, f'{row} button[data-action="resume"]')
    assert "/recurring/pause" not in browser.current_url  # htmx posted it; no navigation
    with app.app_context():
        paused = ratchet.get_recurring(nightly)
    assert paused is not None and paused.status == RecurringStatus.PAUSED
    assert csp_violations(browser) == []
    shoot(browser, shots, "11-recurring-paused")

    # Batches: the list (it refreshes itself while the batch runs), then the batch's own page.
    browser.find_element(By.LINK_TEXT, "Batches").click()
    wait_until(lambda: browser.title == "Batches · Ratchet", 10, "the batches page")
    row = f'tr[data-batch="{batch_id}"]'
    wait_until(
        lambda: "6 succeeded" in text_of(browser, row), 60, "the batch list to show it finished"
    )
    assert browser.find_elements(By.CSS_SELECTOR, f"{row} svg.batch-bar rect.ok")
    shoot(browser, shots, "12-batches")
    browser.find_element(By.CSS_SELECTOR, f"{row} a.batch-name").click()
    wait_until(lambda: browser.title == "Batch nightly import · Ratchet", 10, "the batch page")
    assert text_of(browser, "h1 .pill") == "complete"  # the batch state, not its parent's status
    assert len(browser.find_elements(By.CSS_SELECTOR, "#batch-live .decision-triggered")) == 1
    assert csp_violations(browser) == []
    shoot(browser, shots, "13-batch")

    # Resource limits and circuit breakers: a look at each page.
    browser.find_element(By.LINK_TEXT, "Resources").click()
    wait_until(lambda: browser.title == "Resources · Ratchet", 10, "the resources page")
    assert csp_violations(browser) == []
    shoot(browser, shots, "14-resources")
    browser.find_element(By.LINK_TEXT, "Breakers").click()
    wait_until(lambda: browser.title == "Breakers · Ratchet", 10, "the breakers page")
    assert csp_violations(browser) == []
    shoot(browser, shots, "15-breakers")

    # Queues: the mail queue's job ran; pause the queue through htmx, and a new job waits.
    browser.find_element(By.LINK_TEXT, "Queues").click()
    wait_until(lambda: browser.title == "Queues · Ratchet", 10, "the queues page")
    row = 'tr[data-queue="mail"]'
    assert text_of(browser, f"{row} .pill") == "active"
    wait_until(lambda: "1 succeeded" in text_of(browser, row), 20, "the mail job's run")
    shoot(browser, shots, "16-queues")
    browser.find_element(By.CSS_SELECTOR, f'{row} button[data-action="pause"]').click()
    wait_until(lambda: "paused" in text_of(browser, "#notice"), 10, "the notice")
    wait_until(lambda: text_of(browser, f"{row} .pill") == "paused", 10, "the row to show it")
    assert browser.find_elements(By.CSS_SELECTOR, f'{row} button[data-action="resume"]')
    assert "/queues/pause" not in browser.current_url  # htmx posted it; no navigation
    with app.app_context():
        held = ratchet.enqueue(send_mail, "b@example.com").submit().id
        assert [q.paused for q in ratchet.queues() if q.name == "mail"] == [True]
    time.sleep(1.5)  # several of the worker's polls
    assert status_of(app, held) == JobStatus.PENDING
    assert csp_violations(browser) == []
    shoot(browser, shots, "17-queue-paused")
    assert worker.poll() is None, workers.output(worker)


def alarms_shown(driver: WebDriver) -> dict[str, str]:
    """The alarms in the page's header strip, by ``data-alarm``; {} while htmx swaps it."""
    try:
        return {
            str(item.get_attribute("data-alarm")): str(item.text)
            for item in driver.find_elements(By.CSS_SELECTOR, "#alarms li.alarm")
        }
    except StaleElementReferenceException:
        return {}


def click_live(browser: WebDriver, selector: str) -> None:
    """Click what ``selector`` finds in the header, which the page swaps in anew every few
    seconds: an element found a moment before the swap is gone, so find it again."""

    def clicked() -> bool:
        try:
            browser.find_element(By.CSS_SELECTOR, selector).click()
        except StaleElementReferenceException:
            return False
        return True

    wait_until(clicked, 10, f"a click on {selector}")


def test_the_header_raises_each_alarm_live_and_the_overview_charts_attempts(
    browser: WebDriver, live: LiveServer, workers: Workers, dialect: str
) -> None:
    """No worker while a job is due, a job due too long, a paused queue and a job that failed
    for good: each appears in the header of a page other than the overview as its strip
    refreshes itself, and goes once it no longer holds. Then the overview's chart: its y
    axis, its legend and its windows."""
    app = live.app
    shots = SHOTS / dialect / "alarms"
    if shots.exists():
        shutil.rmtree(shots)
    browser.get(live.url + "/jobs")
    assert browser.title == "Jobs · Ratchet"
    assert alarms_shown(browser) == {}  # nothing is wrong yet: an empty strip

    # A job due ten minutes ago (over the 5-minute threshold) with no worker, and a paused
    # queue: the open page's strip says so at its next refresh, without a reload.
    with app.app_context():
        late = ratchet.schedule_at(
            datetime.now(UTC) - timedelta(minutes=10), refuse, "card declined"
        ).submit()
        ratchet.pause_queue("reports")
    wait_until(
        lambda: alarms_shown(browser).keys() == {"no-live-worker", "overdue", "paused"},
        20,
        "the jobs page's header to raise three alarms",
    )
    shown = alarms_shown(browser)
    assert "No live worker while jobs are due" in shown["no-live-worker"]
    assert re.search(r"oldest due job \(queue default\) has waited 10 m \d\d s", shown["overdue"])
    assert "longer than 5 m 00 s" in shown["overdue"]
    assert "Queue paused: reports; no worker takes its jobs." in shown["paused"]
    assert browser.current_url == live.url + "/jobs"  # refreshed in place
    assert csp_violations(browser) == []
    shoot(browser, shots, "01-jobs-alarms")

    # Each alarm links to the page that shows it: the oldest due job, and the queues.
    click_live(browser, '[data-alarm="overdue"] a:not(.go)')
    wait_until(lambda: browser.current_url.endswith(f"/jobs/{late.id}"), 10, "the late job")
    assert text_of(browser, "h1 .pill") == "PENDING"
    assert alarms_shown(browser).keys() == {"no-live-worker", "overdue", "paused"}
    click_live(browser, '[data-alarm="paused"] a.go')
    wait_until(lambda: browser.title == "Queues · Ratchet", 10, "the queues page")
    assert text_of(browser, 'tr[data-queue="reports"] .pill') == "paused"

    # A worker starts and runs the late job, which fails for good: the worker and wait alarms
    # go, the dead-letter alarm comes.
    worker = workers.start("--concurrency", "2")
    wait_until(
        lambda: alarms_shown(browser).keys() == {"paused", "dead-letters"},
        40,
        "the queues page's header to show the worker's run",
    )
    assert (
        "Dead letters growing: 1 job failed for good in the last 15 m 00 s."
        in alarms_shown(browser)["dead-letters"]
    )
    assert status_of(app, late.id) == JobStatus.FAILED
    shoot(browser, shots, "02-queues-alarms")
    click_live(browser, '[data-alarm="dead-letters"] a.go')
    wait_until(lambda: browser.title == "Dead letters · Ratchet", 10, "the dead letters page")
    assert "could not process" in browser.find_element(By.TAG_NAME, "main").text
    assert alarms_shown(browser).keys() == {"paused", "dead-letters"}

    # Resumed through the console's own button: the strip refreshes at once (the page's
    # "changed" event), not only at its next tick.
    browser.get(live.url + "/queues")
    browser.find_element(
        By.CSS_SELECTOR, 'tr[data-queue="reports"] button[data-action="resume"]'
    ).click()
    wait_until(
        lambda: alarms_shown(browser).keys() == {"dead-letters"}, 10, "the paused alarm to go"
    )
    assert csp_violations(browser) == []
    shoot(browser, shots, "03-queue-resumed")

    # The overview: a y axis of round values with gridlines, a legend of attempts, windows.
    browser.get(live.url + "/")
    assert alarms_shown(browser).keys() == {"dead-letters"}  # the overview's header too
    assert "resume-queue queue reports" in text_of(browser, "table.compact")
    heading = text_of(browser, ".chart-panel h2")
    assert heading.startswith("Executions, last hour") and "1 failed" in heading, heading
    ticks = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "svg.chart g.tick text")]
    assert ticks == ["0", "1"], ticks
    assert len(browser.find_elements(By.CSS_SELECTOR, "svg.chart line.grid")) == 1
    assert len(browser.find_elements(By.CSS_SELECTOR, "svg.chart g.bar")) == 60
    assert browser.find_elements(By.CSS_SELECTOR, "svg.chart rect.failed")
    assert browser.find_elements(By.CSS_SELECTOR, "svg.chart g.time text")
    legend = text_of(browser, ".chart-panel .legend")
    assert "succeeded attempts" in legend and "failed attempts" in legend
    assert "Executions, not jobs" in legend and "Times in UTC" in legend
    shoot(browser, shots, "04-overview-hour")
    browser.find_element(By.CSS_SELECTOR, '.windows a[data-window="24h"]').click()
    wait_until(lambda: browser.current_url.endswith("/?window=24h"), 10, "the 24-hour chart")
    assert text_of(browser, ".chart-panel h2").startswith("Executions, last 24 hours")
    assert len(browser.find_elements(By.CSS_SELECTOR, "svg.chart g.bar")) == 48
    current = browser.find_element(By.CSS_SELECTOR, '.windows a[aria-current="true"]')
    assert current.get_attribute("data-window") == "24h"
    assert "per 30 minutes" in text_of(browser, ".chart-panel h2")
    shoot(browser, shots, "05-overview-day")
    browser.find_element(By.CSS_SELECTOR, '.windows a[data-window="15m"]').click()
    wait_until(lambda: browser.current_url.endswith("/?window=15m"), 10, "the 15-minute chart")
    assert len(browser.find_elements(By.CSS_SELECTOR, "svg.chart g.bar")) == 15
    # The live refresh (every 5 s) keeps the window on screen.
    marker = browser.find_element(By.CSS_SELECTOR, "#overview-live")
    wait_until(lambda: not _attached(marker), 15, "the overview's refresh")
    assert len(browser.find_elements(By.CSS_SELECTOR, "svg.chart g.bar")) == 15
    assert csp_violations(browser) == []
    shoot(browser, shots, "06-overview-quarter")
    assert worker.poll() is None, workers.output(worker)


def _attached(element: WebElement) -> bool:
    """Whether ``element`` is still in the page (htmx replaces a live region on refresh)."""
    try:
        element.is_enabled()
    except StaleElementReferenceException:
        return False
    return True


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_the_job_list_shows_twenty_jobs_a_line_each_and_fits_a_phone(
    browser: WebDriver, live: LiveServer
) -> None:
    app = live.app
    with app.app_context():
        failed = [job_in(JobStatus.FAILED) for _ in range(30)]
        with ratchet.transaction() as conn:
            conn.execute(
                sa.update(job)
                .where(job.c.job_id.in_(failed))
                .values(
                    task="billing.payments.providers:charge_customer_invoice",
                    terminal_error="requests.exceptions.ConnectionError: HTTPSConnectionPool("
                    "host='api.payments.example.com', port=443): Max retries exceeded\\n"
                    "Traceback (most recent call last): ...",
                )
            )
    try:
        browser.set_window_size(1366, 900)
        browser.get(f"{live.url}/jobs?status=FAILED")
        rows = browser.find_elements(By.CSS_SELECTOR, "table.job-list tbody tr")
        assert len(rows) == 30
        height = browser.execute_script("return window.innerHeight")
        visible = [r for r in rows if r.rect["y"] + r.rect["height"] <= height]
        assert len(visible) >= 20, (len(visible), height)
        assert {r.rect["height"] for r in rows} == {rows[0].rect["height"]} and rows[0].rect[
            "height"
        ] < 32  # one line each, whatever the error's length
        error = browser.find_element(By.CSS_SELECTOR, "table.job-list td.error")
        assert error.get_attribute("title").startswith("requests.exceptions.ConnectionError")
        browser.set_window_size(390, 844)
        browser.get(f"{live.url}/jobs?status=FAILED")
        overflow = browser.execute_script(
            "return document.querySelector('table.job-list').getBoundingClientRect().right"
            " - document.documentElement.clientWidth"
        )
        assert overflow <= 0, overflow  # no sideways scrolling on a phone
    finally:
        browser.set_window_size(1360, 1000)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_the_job_list_tells_pending_and_running_jobs_apart(
    browser: WebDriver, live: LiveServer
) -> None:
    """At 1366x900: a line per job still, each PENDING or RUNNING job's sub-state and time in
    its "Due / next attempt" cell (the exact time on hover), the sub-state filter, the
    overview's counts; on a phone the cell is left out."""
    app = live.app
    with app.app_context():
        made = make_jobs()
        for n in range(24):
            ratchet.schedule(7200, add, n, n).submit()
        add_node("node-a")  # the worker holding the running jobs: live, no alarm for it
    try:
        browser.set_window_size(1366, 900)
        browser.get(f"{live.url}/jobs")
        shoot(browser, SHOTS / "sqlite", "19-jobs-sub-states")
        browser.set_window_size(1366, 900)
        rows = browser.find_elements(By.CSS_SELECTOR, "table.job-list tbody tr")
        assert len(rows) == 32
        height = browser.execute_script("return window.innerHeight")
        visible = [r for r in rows if r.rect["y"] + r.rect["height"] <= height]
        assert len(visible) >= 20, (len(visible), height)
        assert {r.rect["height"] for r in rows} == {rows[0].rect["height"]}
        assert rows[0].rect["height"] < 32  # one line each
        cells = {
            c.get_attribute("data-sub"): c
            for c in browser.find_elements(By.CSS_SELECTOR, "table.job-list td.due[data-sub]")
        }
        assert set(cells) == {"due", "scheduled", "retrying", "blocked", "started", "claimed"}
        assert re.fullmatch(r"attempt 2 in (59 min|1 h)", cells["retrying"].text)
        assert cells["claimed"].text == "waiting for a thread"
        assert "due 20" in (cells["retrying"].get_attribute("title") or "")
        for cell in cells.values():  # cut with an ellipsis, never wrapped or spilling over
            assert cell.rect["height"] == rows[0].rect["height"]
        browser.find_element(By.CSS_SELECTOR, "details.filter-panel > summary").click()
        Select(browser.find_element(By.NAME, "sub")).select_by_value("retrying")
        browser.find_element(By.CSS_SELECTOR, "form.filters button[type=submit]").click()
        wait_until(lambda: "sub=retrying" in browser.current_url, what="the filter to apply")
        ids = [
            a.get_attribute("href").rsplit("/", 1)[1]
            for a in browser.find_elements(By.CSS_SELECTOR, "table.job-list a.id")
        ]
        assert ids == [str(made.retrying)]
        assert "sub retrying" in text_of(browser, "details.filter-panel > summary")
        shoot(browser, SHOTS / "sqlite", "20-jobs-retrying")
        browser.get(f"{live.url}/")
        counts = text_of(browser, "nav.substates")
        assert "retrying 1" in counts and "waiting for a thread 1" in counts, counts
        browser.set_window_size(390, 844)
        browser.get(f"{live.url}/jobs")
        due = browser.find_element(By.CSS_SELECTOR, "table.job-list td.due")
        assert not due.is_displayed()
        overflow = browser.execute_script(
            "return document.querySelector('table.job-list').getBoundingClientRect().right"
            " - document.documentElement.clientWidth"
        )
        assert overflow <= 0, overflow
    finally:
        browser.set_window_size(1360, 1000)
