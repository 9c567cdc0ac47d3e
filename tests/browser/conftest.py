"""The browser tests start real workers the way the acceptance tests do, and share the browser
and the live server of ``test_console_browser``."""

from __future__ import annotations

from tests.acceptance.conftest import workers
from tests.browser.test_console_browser import browser, live

__all__ = ["browser", "live", "workers"]
