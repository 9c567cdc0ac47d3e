"""Setting a resource's limit (what a limit is: :mod:`flask_ratchet.resources`)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ..resources import ResourceLimit, resource_limit
from ..runtime import Runtime


def configure_resource(
    runtime: Runtime,
    name: str,
    max_concurrent: int | None,
    retry_delay: timedelta | float,
    rate: Any = None,
) -> ResourceLimit:
    """Validate the limit, then write it in the caller's transaction or one of its own.

    :raises InvalidOption: naming the bad value; nothing is written.
    """
    limit = resource_limit(name, max_concurrent, retry_delay, rate)
    runtime.run(lambda conn: runtime.store.resources.set_resource_limit(conn, limit))
    return limit
