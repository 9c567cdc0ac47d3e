"""What a worker is told on its command line or in the config: the queues it takes (with
their thread limits) and where it serves its metrics. Each is read from text (``--queues
mail=4,default``, ``--metrics-port 127.0.0.1:9100``) or from a ``RATCHET_*`` value."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .errors import ConfigError, InvalidOption
from .options import validate_queue


def parse_metrics_address(value: str | int) -> tuple[str, int]:
    """Where a worker serves ``/metrics``: ``9100`` (every interface) or ``"127.0.0.1:9100"``.

    :raises ValueError: saying what is wrong and how to write it.
    """
    text = str(value).strip() if not isinstance(value, bool) else ""
    host, colon, port = text.rpartition(":")
    if not colon:
        host = ""
    if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        raise ValueError(
            f"{value!r} is not a metrics port: write a port from 1 to 65535 ('9100') or an "
            "address and a port ('127.0.0.1:9100')"
        )
    return host or "0.0.0.0", int(port)


def metrics_address_setting(key: str, value: Any) -> tuple[str, int] | None:
    if value is None:
        return None
    try:
        return parse_metrics_address(value)
    except ValueError as exc:
        raise ConfigError(f"{key}: {exc}") from None


def parse_queues(text: str) -> dict[str, int | None]:
    """``"mail=4,reports=1,default"`` as ``{"mail": 4, "reports": 1, "default": None}``: the
    queues a worker takes, each with the most threads its jobs may use (none given: no limit).

    :raises ValueError: saying what is wrong and how to write it.
    """
    queues: dict[str, int | None] = {}
    for item in text.split(","):
        name, has_limit, limit = item.strip().partition("=")
        try:
            name = validate_queue(name.strip())
        except InvalidOption as exc:
            raise ValueError(f"{exc}; write queues as 'mail=4,reports=1,default'") from None
        if name in queues:
            raise ValueError(f"queue {name!r} is named twice")
        queues[name] = None
        if has_limit:
            if not re.fullmatch(r"[0-9]{1,6}", limit.strip()) or int(limit) < 1:
                raise ValueError(
                    f"the thread limit of queue {name!r} must be a whole number >= 1, "
                    f"got {limit.strip()!r}"
                )
            queues[name] = int(limit)
    return queues


def describe_queues(queues: Mapping[str, int | None]) -> str:
    """The inverse of :func:`parse_queues`."""
    return ",".join(name if limit is None else f"{name}={limit}" for name, limit in queues.items())


def queues_setting(key: str, value: Any) -> dict[str, int | None] | None:
    if value is None:
        return None
    if isinstance(value, str):
        text = value
    elif isinstance(value, Mapping):
        if not all(isinstance(name, str) for name in value) or any(
            not (limit is None or type(limit) is int) for limit in value.values()
        ):
            raise ConfigError(
                f"{key} must map queue names to thread limits (whole numbers, or None for no "
                f"limit), got {value!r}"
            )
        text = describe_queues(value)
    elif isinstance(value, list | tuple):
        text = ",".join(str(name) for name in value)
        if not all(isinstance(name, str) for name in value):
            raise ConfigError(f"{key} must list queue names, got {value!r}")
    else:
        raise ConfigError(f"{key} must be like 'mail=4,reports=1,default', got {value!r}")
    try:
        return parse_queues(text)
    except ValueError as exc:
        raise ConfigError(f"{key}: {exc}") from None
