"""The console on a laptop (1366 by 900) and a phone (390 by 844), light and dark, in headless
Chromium: axe-core finds no serious or critical accessibility violation on any page, the phone
shows the menu folded, no page scrolls sideways, actions stay in reach, the skip link leads
to the content and the alarm region says what was raised.

axe-core is vendored under ``vendor/`` (``axe.min.js``, MPL-2.0, its notice kept) and injected
by the driver: the console itself never loads it. No worker runs: the jobs are put in their
states by hand, so every page has something to draw.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver

from flask_ratchet.states import JobStatus
from tests.acceptance.conftest import wait_until
from tests.apps import add, ratchet, refuse
from tests.browser.test_console_browser import SHOTS, LiveServer, csp_violations, text_of
from tests.integration.helpers import job_in

pytestmark = [pytest.mark.slow, pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)]

AXE = Path(__file__).parent / "vendor" / "axe.min.js"
LAPTOP = (1366, 900)
PHONE = (390, 844)
#: What fails the check: axe's two worst impacts (minor and moderate ones are reported only).
BLOCKING = {"serious", "critical"}

RUN_AXE = """
const done = arguments[arguments.length - 1];
axe.run(document, {resultTypes: ["violations"]}).then(
  (r) => done(r.violations.map((v) => ({
    id: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.slice(0, 4).map((n) => n.target.join(" ") + " :: " + (n.failureSummary || "")),
  }))),
  (e) => done([{id: "axe-error", impact: "critical", help: String(e), nodes: []}]),
);
"""


@dataclass(frozen=True)
class Seeded:
    """What the pages show: a job in each status, a recurring master, a batch."""

    failed: uuid.UUID
    running: uuid.UUID
    pending: uuid.UUID
    recurring_id: str
    batch_id: uuid.UUID


@pytest.fixture
def seeded(live: LiveServer) -> Seeded:
    with live.app.app_context():
        failed = job_in(JobStatus.FAILED)
        running = job_in(JobStatus.RUNNING)
        job_in(JobStatus.SUCCEEDED)
        job_in(JobStatus.CANCELED)
        job_in(JobStatus.PAUSED)
        pending = ratchet.enqueue(refuse, "card declined").with_tags("billing").submit().id
        ratchet.schedule_at(datetime.now(UTC) - timedelta(minutes=10), add, 1, 1).submit()
        master = (
            ratchet.schedule_recurring("0 0 2 * * ?", "Europe/Berlin", add, 1, 2)
            .with_name("Nightly report")
            .submit()
            .id
        )
        batch = ratchet.enqueue_batch("nightly import")
        for i in range(3):
            batch.add(add, i, i)
        batch_id = batch.on_success(add, 0, 0).submit().id
    return Seeded(failed, running, pending, str(master), batch_id)


@pytest.fixture
def phone_browser(browser: WebDriver) -> Iterator[WebDriver]:
    browser.set_script_timeout(60)
    yield browser
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
    browser.set_window_size(1360, 1000)


def pages(url: str, seeded: Seeded) -> dict[str, str]:
    """Every console page an operator opens, and two error pages."""
    return {
        "overview": url + "/",
        "jobs": url + "/jobs",
        "jobs-failed": url + "/jobs?status=failed",
        "job-failed": f"{url}/jobs/{seeded.failed}",
        "job-running": f"{url}/jobs/{seeded.running}",
        "bulk-confirm": url + "/jobs/bulk?action=retry&status=FAILED",
        "queues": url + "/queues",
        "recurring": url + "/recurring",
        "recurring-cancel": f"{url}/recurring/cancel?id={seeded.recurring_id}",
        "batches": url + "/batches",
        "batch": f"{url}/batches/{seeded.batch_id}",
        "resources": url + "/resources",
        "resource-limit": url + "/resources/limit?name=payments",
        "breakers": url + "/breakers",
        "dead-letters": url + "/dead-letters",
        "nodes": url + "/nodes",
        "error-400": url + "/jobs?priority=urgent&queue=mail",
        "error-404": f"{url}/jobs/{uuid.uuid4()}",
    }


def axe_violations(driver: WebDriver) -> list[dict[str, Any]]:
    """axe-core's violations on the page on screen (injected into it for the check)."""
    if not driver.execute_script("return typeof axe === 'object'"):
        driver.execute_script(AXE.read_text(encoding="utf-8"))
    found: list[dict[str, Any]] = driver.execute_async_script(RUN_AXE)
    return found


def sideways_scroll(driver: WebDriver) -> int:
    """How far the page itself scrolls sideways, in CSS pixels (0: it fits the screen)."""
    return int(
        driver.execute_script(
            "return document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
    )


@pytest.mark.parametrize(
    ("size", "scheme"),
    [(LAPTOP, "light"), (PHONE, "light"), (LAPTOP, "dark"), (PHONE, "dark")],
    ids=["laptop-light", "phone-light", "laptop-dark", "phone-dark"],
)
def test_no_page_has_a_serious_accessibility_violation_or_scrolls_sideways(
    phone_browser: WebDriver, live: LiveServer, seeded: Seeded, size: tuple[int, int], scheme: str
) -> None:
    driver = phone_browser
    driver.set_window_size(*size)
    driver.execute_cdp_cmd(
        "Emulation.setEmulatedMedia",
        {"features": [{"name": "prefers-color-scheme", "value": scheme}]},
    )
    shots = SHOTS / "a11y" / f"{size[0]}x{size[1]}-{scheme}"
    shots.mkdir(parents=True, exist_ok=True)
    problems: dict[str, object] = {}
    for name, url in pages(live.url, seeded).items():
        driver.get(url)
        found = axe_violations(driver)
        blocking = [v for v in found if v["impact"] in BLOCKING]
        if blocking:
            problems[name] = blocking
        overflow = sideways_scroll(driver)
        if overflow > 0:
            problems[f"{name} scrolls sideways"] = overflow
        driver.save_screenshot(str(shots / f"{name}.png"))
    assert csp_violations(driver) == []
    assert not problems, json.dumps(problems, indent=1)


def test_the_phone_folds_the_menu_keeps_actions_in_reach_and_goes_dark(
    phone_browser: WebDriver, live: LiveServer, seeded: Seeded
) -> None:
    driver = phone_browser
    driver.set_window_size(*PHONE)
    driver.get(f"{live.url}/jobs/{seeded.failed}")
    nav = driver.find_element(By.ID, "console-nav")
    menu = driver.find_element(By.CSS_SELECTOR, "button.nav-toggle")
    assert not nav.is_displayed() and menu.is_displayed()
    assert menu.get_attribute("aria-expanded") == "false"
    menu.click()
    assert nav.is_displayed() and menu.get_attribute("aria-expanded") == "true"
    assert nav.find_element(By.LINK_TEXT, "Jobs").is_displayed()
    menu.click()
    assert not nav.is_displayed()

    # Only what the state table allows, each button whole on the screen and working.
    shown = [
        b.get_attribute("data-action")
        for b in driver.find_elements(By.CSS_SELECTOR, ".actions button[data-action]")
    ]
    assert shown == ["retry", "pause", "delete"]
    width = driver.execute_script("return document.documentElement.clientWidth")
    for button in driver.find_elements(By.CSS_SELECTOR, ".actions button[data-action]"):
        assert button.is_displayed() and 0 <= button.rect["x"]
        assert button.rect["x"] + button.rect["width"] <= width, button.text
    driver.find_element(By.CSS_SELECTOR, 'button[data-action="retry"]').click()
    wait_until(lambda: "retried" in text_of(driver, "#notice"), 10, "the notice")
    wait_until(lambda: text_of(driver, "h1 .pill") == "PENDING", 10, "the page to redraw")
    shown = [
        b.get_attribute("data-action")
        for b in driver.find_elements(By.CSS_SELECTOR, ".actions button[data-action]")
    ]
    assert shown == ["pause", "cancel"]  # no Retry on a PENDING job

    # A wide table scrolls in its box, not the page.
    driver.get(f"{live.url}/jobs/{seeded.failed}")
    assert sideways_scroll(driver) == 0
    wrapped = driver.execute_script(
        "return [...document.querySelectorAll('.table-wrap')].map("
        "w => getComputedStyle(w).overflowX)"
    )
    assert wrapped and set(wrapped) == {"auto"}

    # Times: an age on screen, the exact time with its zone on hover.
    times = driver.find_elements(By.CSS_SELECTOR, "dl.facts time")
    assert times
    assert all(str(t.get_attribute("title")).endswith(" UTC") for t in times)
    assert all(t.text.endswith("ago") or t.text == "just now" for t in times)

    # Dark: the page's colours follow the system's.
    light = driver.execute_script("return getComputedStyle(document.body).backgroundColor")
    driver.execute_cdp_cmd(
        "Emulation.setEmulatedMedia",
        {"features": [{"name": "prefers-color-scheme", "value": "dark"}]},
    )
    dark = driver.execute_script("return getComputedStyle(document.body).backgroundColor")
    assert light == "rgb(246, 247, 249)" and dark == "rgb(13, 17, 23)"


def test_the_skip_link_leads_to_the_content_and_alarms_are_announced(
    phone_browser: WebDriver, live: LiveServer, seeded: Seeded
) -> None:
    driver = phone_browser
    driver.set_window_size(*LAPTOP)
    driver.get(live.url + "/jobs")
    assert driver.find_element(By.ID, "console-nav").is_displayed()
    assert not driver.find_element(By.CSS_SELECTOR, "button.nav-toggle").is_displayed()
    ActionChains(driver).send_keys(Keys.TAB).perform()
    skip = driver.switch_to.active_element
    assert skip.text == "Skip to content" and skip.rect["y"] >= 0  # shown once focused
    skip.send_keys(Keys.ENTER)
    wait_until(
        lambda: driver.switch_to.active_element.get_attribute("id") == "main",
        5,
        "the focus to move to the content",
    )

    # A queue paused while the page is open: the live region names the new alarm once.
    news = driver.find_element(By.ID, "alarm-news")
    assert news.get_attribute("aria-live") == "polite" and news.text == ""
    with live.app.app_context():
        ratchet.pause_queue("mail")
    wait_until(
        lambda: "Alarm: Queue" in str(news.get_attribute("textContent")),
        20,
        "the live region to announce the paused queue",
    )
    said = str(news.get_attribute("textContent"))
    assert said.count("Alarm:") == 1, said  # only what changed, not every alarm again
    assert csp_violations(driver) == []
