"""The browser tests start real workers the way the acceptance tests do."""

from __future__ import annotations

from tests.acceptance.conftest import workers

__all__ = ["workers"]
