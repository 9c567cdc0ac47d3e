"""The dead-letter page in a real browser, at 1366 by 900: FAILED jobs grouped by task and
fingerprint, a hundred groups a page with the total, and one group retried from its card, which
retries exactly the jobs the card counts.

Headless Chromium against a live server, as :mod:`.test_console_browser` starts them (its
fixtures); no worker runs, so the retried jobs stay PENDING where the test can count them.
Screenshots go to ``tests/browser/screenshots/<database>/`` (ignored by git).
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from flask_ratchet.schema import job, job_queue
from flask_ratchet.states import JobStatus
from tests.acceptance.conftest import wait_until
from tests.apps import charge, ratchet
from tests.browser.test_console_browser import (  # the fixtures, and what they share
    SHOTS,
    LiveServer,
    browser,
    csp_violations,
    live,
    text_of,
)
from tests.integration.helpers import dead_letters

__all__ = ["browser", "live"]  # fixtures this module uses

pytestmark = pytest.mark.slow

#: The window the page is checked at: a laptop's.
WIDTH, HEIGHT = 1366, 900
ORDERS = "ValueError: order {n} not found"
#: Between the first and the last group's number on the page.
DASH = "\N{EN DASH}"


def cards(driver: WebDriver) -> list[tuple[str, str, str]]:
    """Each card on the page: (fingerprint, task, "N jobs · M samples"), in order."""
    return [
        (
            card.find_element(By.CSS_SELECTOR, "code.fingerprint").text,
            card.get_attribute("data-task") or "",
            card.find_element(By.CSS_SELECTOR, "h2 small").text,
        )
        for card in driver.find_elements(By.CSS_SELECTOR, "section.group")
    ]


def statuses(live: LiveServer, ids: list[uuid.UUID]) -> dict[str, int]:
    """How many of ``ids`` are in each status (the hot row's while live, else the cold row's)."""
    with live.app.app_context(), ratchet.transaction() as conn:
        rows = conn.execute(
            sa.select(job.c.terminal_status, job_queue.c.status)
            .select_from(job.outerjoin(job_queue, job_queue.c.job_id == job.c.job_id))
            .where(job.c.job_id.in_(ids))
        ).all()
    counted: dict[str, int] = {}
    for ended, live_status in rows:
        name = live_status or ended
        counted[name] = counted.get(name, 0) + 1
    return counted


def fits(driver: WebDriver) -> bool:
    """Nothing on the page is wider than the window (no sideways scrolling)."""
    return bool(
        driver.execute_script(
            "return document.documentElement.scrollWidth <= document.documentElement.clientWidth"
        )
    )


def test_dead_letters_are_grouped_paged_and_retried_a_group_at_a_time(
    browser: WebDriver, live: LiveServer, database_url: str
) -> None:
    shots = SHOTS / database_url.split(":", 1)[0].split("+", 1)[0] / "dead-letters"
    with live.app.app_context():
        # 92 jobs failing one way with their own ids in the message, 3 another way, one job of
        # another task with the first message, and 102 groups of one job each: 105 groups.
        orders = dead_letters([f"ValueError: order {40_000 + n} not found" for n in range(92)])
        invoices = dead_letters([f"ValueError: invoice 'INV-{n}' missing" for n in range(3)])
        singles = dead_letters([f"Error{n:03d}: the {n}th thing broke" for n in range(102)])
        # The most recent failure: first among the groups of one job.
        charges = dead_letters(["ValueError: order 12 not found"], task=charge)
    others = invoices + charges + singles
    browser.set_window_size(WIDTH, HEIGHT)

    browser.get(live.url + "/dead-letters")
    assert browser.title == "Dead letters · Ratchet"
    shown = cards(browser)
    assert len(shown) == 100
    assert shown[0] == (ORDERS, "tests.apps:add", "92 jobs · 3 samples")
    assert shown[1] == ("ValueError: invoice '{s}' missing", "tests.apps:add", "3 jobs · 3 samples")
    assert shown[2] == (ORDERS, "billing.charge", "1 job · 1 sample")
    assert text_of(browser, "#dlq-showing") == f"Showing 1{DASH}100 of 105 groups"
    first = browser.find_element(By.CSS_SELECTOR, "section.group")
    samples = first.find_elements(By.CSS_SELECTOR, "ul.samples li")
    assert len(samples) == 3
    assert all(re.search(r"ValueError: order 400\d\d not found", s.text) for s in samples)
    # The card and its actions fit the window: the largest group is seen without scrolling.
    retry = first.find_element(By.PARTIAL_LINK_TEXT, "Retry 92")
    assert retry.rect["y"] + retry.rect["height"] <= HEIGHT
    assert fits(browser)
    assert csp_violations(browser) == []
    _shoot(browser, shots, "01-groups")

    # The next page holds the five smallest groups, and the total again.
    browser.find_element(By.CSS_SELECTOR, 'a[rel="next"]').click()
    wait_until(lambda: f"Showing 101{DASH}105" in text_of(browser, "#dlq-showing"), 10, "page two")
    assert text_of(browser, "#dlq-showing") == f"Showing 101{DASH}105 of 105 groups"
    assert len(cards(browser)) == 5 and not set(cards(browser)) & set(shown)
    assert not browser.find_elements(By.CSS_SELECTOR, 'a[rel="next"]')
    _shoot(browser, shots, "02-page-two")
    browser.find_element(By.PARTIAL_LINK_TEXT, "First page").click()
    wait_until(lambda: f"Showing 1{DASH}100" in text_of(browser, "#dlq-showing"), 10, "page one")

    # Retry the largest group: the confirmation counts its 92 jobs, and only they are retried.
    browser.find_element(By.CSS_SELECTOR, "section.group").find_element(
        By.PARTIAL_LINK_TEXT, "Retry 92"
    ).click()
    wait_until(lambda: browser.title.startswith("Confirm"), 10, "the confirmation")
    assert "92 jobs match this filter" in browser.find_element(By.TAG_NAME, "main").text
    button = browser.find_element(By.CSS_SELECTOR, "form button.danger")
    assert button.text == "Retry 92 jobs"
    assert fits(browser)
    _shoot(browser, shots, "03-confirm")
    button.click()
    wait_until(
        lambda: "92 of 92 jobs retried" in text_of(browser, "main"),  # "" while it loads
        10,
        "the notice",
    )
    _shoot(browser, shots, "04-retried")
    assert statuses(live, orders) == {JobStatus.PENDING: 92}
    assert statuses(live, others) == {JobStatus.FAILED: len(others)}

    browser.find_element(By.LINK_TEXT, "Back").click()  # to the page the group was on
    wait_until(lambda: browser.title == "Dead letters · Ratchet", 10, "the dead letters")
    assert text_of(browser, "#dlq-showing") == f"Showing 1{DASH}100 of 104 groups"
    shown = cards(browser)
    assert shown[0] == ("ValueError: invoice '{s}' missing", "tests.apps:add", "3 jobs · 3 samples")
    assert (ORDERS, "tests.apps:add", "92 jobs · 3 samples") not in shown
    assert csp_violations(browser) == []
    _shoot(browser, shots, "05-after-retry")


def _shoot(driver: WebDriver, folder: Path, name: str) -> None:
    """A screenshot of the window as the operator sees it (1366 by 900, not the full page)."""
    folder.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(folder / f"{name}.png"))
