"""Screenshots of the console for the console guide, taken from the demo, never by hand.

    python docs/screenshots.py

Starts the demo (``python -m examples.demo``: the example shop under gunicorn, a worker and
sign-up traffic, on a SQLite file in a temporary folder), waits until its jobs have succeeded,
retried and failed, and saves each console page as seen by headless Chromium (driven by
Selenium, as the browser tests do) into ``docs/_static/screenshots/<page>.png``. Needs Debian's
``chromium`` and ``chromium-driver`` (``make system-deps``).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "_static" / "screenshots"
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
#: The console's pages, by the file each is saved as.
PAGES = {
    "overview": "/",
    "queues": "/queues",
    "jobs": "/jobs",
    "dead-letters": "/dead-letters",
    "batches": "/batches",
    "recurring": "/recurring",
    "resources": "/resources",
    "breakers": "/breakers",
    "nodes": "/nodes",
}
#: How long the demo may take to have jobs of every outcome.
READY_TIMEOUT = 120.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def metric(url: str, name: str) -> float:
    """The sum of a cluster metric's series at ``url``'s ``/ratchet/metrics`` (0 if none)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return sum(float(v) for v in re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))


def wait_for_jobs(url: str, demo: subprocess.Popen[bytes]) -> None:
    """Until the demo has dead letters and succeeded jobs to show, or raise."""
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if demo.poll() is not None:
            raise SystemExit(f"the demo stopped (exit code {demo.returncode})")
        try:
            if metric(url, "ratchet_dead_letter_jobs") >= 1 and metric(url, "ratchet_jobs") >= 50:
                return
        except OSError:
            pass  # not up yet
        time.sleep(1)
    raise SystemExit(f"the demo had no dead letter within {READY_TIMEOUT:.0f} s")


def browser() -> WebDriver:
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"):
        options.add_argument(flag)
    options.add_argument("--window-size=1360,900")
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(30)
    return driver


def shoot(driver: WebDriver, url: str, name: str) -> Path:
    driver.get(url)
    driver.find_element(By.TAG_NAME, "main")  # the page is drawn
    path = OUT / f"{name}.png"
    driver.save_screenshot(str(path))
    return path


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    port = free_port()
    with tempfile.TemporaryDirectory() as instance:
        env = os.environ | {
            "DEMO_PORT": str(port),
            "DEMO_INSTANCE": instance,
            "DEMO_SECONDS": str(int(READY_TIMEOUT) + 120),
        }
        demo = subprocess.Popen(
            [sys.executable, "-m", "examples.demo"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            url = f"http://127.0.0.1:{port}/ratchet"
            wait_for_jobs(url, demo)
            driver = browser()
            try:
                for name, path in PAGES.items():
                    print(shoot(driver, url + path, name).relative_to(ROOT))
                # One failed job's page: its attempts, error and traceback.
                driver.get(f"{url}/jobs?status=FAILED")
                link = driver.find_element(By.CSS_SELECTOR, "a[href*='/ratchet/jobs/0']")
                print(shoot(driver, link.get_attribute("href") or url, "job").relative_to(ROOT))
            finally:
                driver.quit()
        finally:
            demo.send_signal(signal.SIGINT)  # the demo stops its web server and worker
            try:
                demo.wait(30)
            except subprocess.TimeoutExpired:
                demo.kill()


if __name__ == "__main__":
    main()
