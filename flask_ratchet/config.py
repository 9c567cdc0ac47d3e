"""Every ``RATCHET_*`` configuration key, its default, and its validation.

``RatchetConfig.from_mapping(app.config)`` is called once by ``init_app``. A bad value raises
:class:`~flask_ratchet.errors.ConfigError` naming the key; an unknown ``RATCHET_`` key warns
with the closest known one.
"""

from __future__ import annotations

import difflib
import importlib.util
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from .breaker import BreakerSettings, breakers_setting
from .errors import ConfigError, InvalidOption
from .options import (
    CONFIGURABLE_DEFAULTS,
    MAX_DURATION,
    STANDARD_OPTIONS,
    Backoff,
    JobOptions,
    Priority,
    validate_options,
)
from .resources import ResourceLimit, resource_limits_setting
from .routes import Routes, routes_setting
from .sealing import check_keys, keys_setting
from .worker_options import metrics_address_setting, queues_setting

PREFIX = "RATCHET_"


class RatchetConfigWarning(UserWarning):
    """An unknown ``RATCHET_*`` key was found in the app config."""


@dataclass(frozen=True, slots=True)
class RatchetConfig:
    """The validated configuration of one app. Durations are in seconds."""

    #: ratchet's own database, for an app without Flask-SQLAlchemy (see
    #: :mod:`flask_ratchet.database`); ``None``: the app's Flask-SQLAlchemy database.
    database_url: str | None = None
    #: Module prefixes whose module-level functions may be enqueued without ``@ratchet.task``.
    allowed_modules: tuple[str, ...] = ()
    #: ``(request) -> "admin" | "read" | None``. Without it every console URL answers 403.
    console_auth: Callable[[Any], str | None] | None = None
    #: Where the console is mounted; ``None`` disables it.
    console_url_prefix: str | None = "/ratchet"
    #: Origins (``https://ops.example.com``) the console accepts changes from; empty: the
    #: request's own scheme and host.
    console_origins: tuple[str, ...] = ()
    #: The console raises an alarm once the oldest due job has waited this long.
    alarm_due_after: float = 300.0
    #: The console raises an alarm while jobs failed for good within this many seconds.
    alarm_dead_letter_window: float = 900.0
    #: Largest encoded arguments, params or result, in bytes.
    max_payload_bytes: int = 100 * 1024
    #: Minutes of waiting that raise a job's effective priority by one level; 0 disables.
    priority_boost_minutes: int = 15
    #: Create the tables at first use. ``None`` means: yes on SQLite, no elsewhere.
    auto_create: bool | None = None
    #: Shortest normal-mode polling delay.
    poll_interval: float = 2.0
    #: Longest normal-mode polling delay.
    poll_max_interval: float = 30.0
    #: Polling delay right after a wake-up.
    burst_interval: float = 0.5
    #: Polling delay once the worker has been idle for ``deep_idle_after``.
    deep_idle_interval: float = 60.0
    #: Idle time after which a worker polls at ``deep_idle_interval``.
    deep_idle_after: float = 300.0
    #: The longest a worker's claim may take: the server ends a claim statement running longer
    #: (PostgreSQL's ``statement_timeout``, MariaDB's ``max_statement_time``), and a claim
    #: whose answer has not come 5 seconds later
    #: (a network or a proxy that stopped forwarding) has its connection closed by the worker.
    claim_timeout: float = 30.0
    #: Executor threads per worker process.
    concurrency: int = 10
    #: The queues a worker takes, each with the most of its threads that queue's jobs may use
    #: (``None``: no limit but ``concurrency``); ``None``: every queue. Set as
    #: ``"mail=4,reports=1,default"`` (:func:`~.worker_options.parse_queues`) or as this mapping.
    queues: dict[str, int | None] | None = None
    #: Where jobs go whose queue nothing chose (see :mod:`flask_ratchet.routes`): task-name
    #: globs to queues, a callable ``(task_name) -> queue | None``, or a list of them.
    routes: Routes | None = None
    #: Jobs a worker may hold waiting for a thread beyond its free threads; ``None``: as many as
    #: its threads finish in about 50 ms at the recent mean run time (none for long jobs).
    prefetch: int | None = None
    #: A job whose task no worker that claimed it knows goes to the dead-letter queue this long
    #: after the first worker handed it back.
    unknown_task_grace: float = 600.0
    #: How often a worker writes its heartbeat.
    heartbeat_interval: float = 10.0
    #: A RUNNING job whose node's heartbeat (and claim) is older than this is recovered.
    orphan_grace: float = 120.0
    #: Terminal jobs older than this many days move to the archive table.
    retention_days: float = 7.0
    #: DLQ alerts not seen for this many days are deleted.
    dlq_retention_days: float = 30.0
    #: Job log lines older than this many days are deleted.
    log_retention_days: float = 14.0
    #: How often retention runs (somewhere in the cluster).
    retention_interval: float = 600.0
    #: How often orphan recovery runs at most (it also runs twice per orphan grace).
    maintenance_interval: float = 30.0
    #: How long a stopping worker lets running jobs finish before releasing them.
    drain_timeout: float = 30.0
    #: The worker's node id; default ``host:pid``.
    node_id: str | None = None
    #: SQLite only: ``PRAGMA synchronous`` for ratchet's own write transactions (WAL mode).
    #: ``NORMAL`` skips the fsync per commit; ``FULL`` keeps it; ``None`` leaves it as it is.
    sqlite_synchronous: str | None = "NORMAL"
    #: Whether workers fire recurring jobs (and register the declared ones) at all.
    recurring_enabled: bool = True
    #: Ids of recurring jobs workers must not fire (they stay registered).
    recurring_disabled: tuple[str, ...] = ()
    #: An occurrence later than this has misfired: its master's misfire policy decides.
    recurring_misfire_threshold: float = 60.0
    #: Resource limits every worker writes to the database when it starts, by resource name.
    resources: dict[str, ResourceLimit] = field(default_factory=dict)
    #: Payload encryption keys: key ids to 32 random bytes in base64 (``{"2026-11": "…"}``),
    #: never shown; needs ``flask-ratchet[encryption]`` (AES-256-GCM).
    encryption_keys: dict[str, bytes] = field(default_factory=dict, repr=False)
    #: The key id new encrypted jobs are sealed with; required with keys.
    encryption_current_key: str | None = None
    #: Encrypt every job's arguments, params and result, not only those of ``encrypt=True``
    #: tasks and ``with_encrypted_payload()`` jobs.
    encrypt_all: bool = False
    #: ``() -> str | None``: who is asking, written into each job submitted (``Job.principal``).
    principal: Callable[[], Any] | None = None
    #: ``(principal, operation, job) -> bool``: whether they may (see :mod:`.api.policy`).
    authorize: Callable[[str | None, str, Any], bool] | None = None
    #: Circuit breakers by service name (a task's name or its ``service=``); they take
    #: precedence over a task's ``circuit_breaker=``.
    circuit_breakers: dict[str, BreakerSettings] = field(default_factory=dict)
    #: Where each worker serves Prometheus metrics (``--metrics-port``): ``(host, port)``, from
    #: ``9100`` or ``"127.0.0.1:9100"``; ``None``: no metrics. Needs the ``prometheus`` extra.
    metrics_port: tuple[str, int] | None = None
    #: Where wake-ups travel for any database (``redis://…``, the ``redis`` extra): workers hear
    #: of due jobs, and waiters of ended ones, at once. ``None``: PostgreSQL's own
    #: ``LISTEN``/``NOTIFY``; SQLite's file; on MariaDB, polling alone.
    wakeup_url: str | None = None
    #: PostgreSQL behind a pooler in transaction mode (PgBouncer's ``pool_mode = transaction``):
    #: no session settings, no prepared statements, no ``LISTEN`` but on ``listen_url``.
    transaction_pooling: bool = False
    #: A direct PostgreSQL URL (not through the pooler) for ``LISTEN``/``NOTIFY`` wake-ups.
    listen_url: str | None = None
    #: A PostgreSQL read replica of the database: the console's pages and its cluster metrics
    #: read there (never a claim, a write, an action or its guard); ``None``: every read on the
    #: database itself. Behind ``transaction_pooling`` its engine follows the pooler's rules.
    read_url: str | None = None
    #: What the Redis channels' names begin with (``<prefix>:ratchet_wakeup``): the job
    #: databases sharing one Redis need each their own. ``None``: ``ratchet:<database name>``.
    wakeup_prefix: str | None = None
    #: Tests only (``flask_ratchet.testing``): run jobs in the enqueuing process as soon as the
    #: transaction that made them due commits. Allows an in-memory SQLite database.
    eager: bool = False
    #: In eager mode, raise a job's final error to whoever committed it (else only record it).
    eager_raise: bool = True
    # The options of every job whose task and builder do not set them (``RATCHET_DEFAULT_*``).
    # A task's own ``@ratchet.task(max_retries=…)`` and a builder's ``with_max_retries`` win.
    #: Retries of a job whose task and builder set none (``0``: Celery's habit, no retry
    #: unless told).
    default_max_retries: int = STANDARD_OPTIONS.max_retries
    #: Backoff of such a job: ``NONE``, ``FIXED``, ``EXPONENTIAL``, ``JITTER`` (or a ``Backoff``).
    default_backoff: Backoff = STANDARD_OPTIONS.backoff
    #: Backoff base of such a job (seconds or a ``timedelta``).
    default_backoff_base: float = STANDARD_OPTIONS.backoff_base
    #: Timeout of such a job (seconds or a ``timedelta``); ``None``: none.
    default_timeout: float | None = STANDARD_OPTIONS.timeout
    #: Queue of such a job that ``RATCHET_ROUTES`` does not place either.
    default_queue: str = STANDARD_OPTIONS.queue
    #: Priority of such a job, a ``Priority`` or 0-4.
    default_priority: Priority = STANDARD_OPTIONS.priority
    #: The ``default_*`` values as one :class:`~flask_ratchet.options.JobOptions` (no key of its
    #: own): what a job starts from before its task's options and its builder's.
    job_defaults: JobOptions = field(init=False, default=STANDARD_OPTIONS)

    def __post_init__(self) -> None:
        chosen = {name: getattr(self, f"default_{name}") for name in CONFIGURABLE_DEFAULTS}
        defaults = JobOptions(**chosen)
        # The very object when nothing changed: a task's options are then used as they are.
        object.__setattr__(
            self, "job_defaults", STANDARD_OPTIONS if defaults == STANDARD_OPTIONS else defaults
        )

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> RatchetConfig:
        """Read and validate every ``RATCHET_*`` key of ``config``."""
        known = {f"{PREFIX}{f.name.upper()}": f.name for f in fields(cls) if f.init}
        for key in config:
            if key.startswith(PREFIX) and key not in known:
                close = difflib.get_close_matches(key, list(known), n=1)
                hint = f"; did you mean {close[0]}?" if close else ""
                warnings.warn(f"unknown config key {key}{hint}", RatchetConfigWarning, stacklevel=3)
        values: dict[str, Any] = {}
        for key, name in known.items():
            if key in config:
                values[name] = _VALIDATORS[name](key, config[key])
        result = cls(**values)
        check_keys(result.encryption_keys, result.encryption_current_key, result.encrypt_all)
        if result.poll_max_interval < result.poll_interval:
            raise ConfigError(
                f"RATCHET_POLL_MAX_INTERVAL ({result.poll_max_interval}s) must not be shorter "
                f"than RATCHET_POLL_INTERVAL ({result.poll_interval}s)"
            )
        return result


def _seconds(key: str, value: Any) -> float:
    if isinstance(value, timedelta):
        value = value.total_seconds()
    # At most MAX_DURATION (so never infinite): a time this far from now is one every database
    # and Python can hold, and a sleep of it one the OS takes.
    longest = MAX_DURATION.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= longest:
        raise ConfigError(
            f"{key} must be a positive number of seconds or a timedelta, at most "
            f"{MAX_DURATION.days} days, got {value!r}"
        )
    return float(value)


def _seconds_at_most(key: str, value: Any, longest: float) -> float:
    seconds = _seconds(key, value)
    if seconds > longest:
        raise ConfigError(f"{key} must be at most {longest:g} seconds, got {value!r}")
    return seconds


def _job_option(option: str) -> Callable[[str, Any], Any]:
    """The validator of ``RATCHET_DEFAULT_<OPTION>``: the value a builder's setter takes (a
    ``timedelta`` or seconds for durations, a name or member for enums), checked the same way."""

    def validate(key: str, value: Any) -> Any:
        try:
            return validate_options(**{option: value})[option]
        except InvalidOption as exc:
            raise ConfigError(f"{key}: {exc}") from None

    return validate


def _positive_int(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{key} must be a positive whole number, got {value!r}")
    return value


def _non_negative_int(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{key} must be a whole number >= 0 (0 disables it), got {value!r}")
    return value


def _optional_non_negative_int(key: str, value: Any) -> int | None:
    return None if value is None else _non_negative_int(key, value)


def _positive_number(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigError(f"{key} must be a positive number, got {value!r}")
    return float(value)


def _module_list(key: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list | tuple | set | frozenset):
        raise ConfigError(
            f"{key} must be a list of module prefixes like ['myapp.tasks'], got {value!r}"
        )
    for item in value:
        if (
            not isinstance(item, str)
            or not item
            or not all(p.isidentifier() for p in item.split("."))
        ):
            raise ConfigError(f"{key} entries must be dotted module names, got {item!r}")
    return tuple(sorted(value))


def _callable_or_none(key: str, value: Any) -> Any:
    if value is not None and not callable(value):
        raise ConfigError(f"{key} must be a callable {_CALLS[key]}, got {value!r}")
    return value


_CALLS = {
    "RATCHET_CONSOLE_AUTH": "(request) -> 'admin' | 'read' | None",
    "RATCHET_PRINCIPAL": "() -> str | None",
    "RATCHET_AUTHORIZE": "(principal, operation, job) -> bool",
}


def _prefix_or_none(key: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.startswith("/") or value.endswith("/"):
        raise ConfigError(
            f"{key} must be a URL path like '/ratchet' (or None to disable), got {value!r}"
        )
    return value


_ORIGIN = re.compile(r"https?://[a-z0-9.-]+(:[0-9]{1,5})?|https?://\[[0-9a-f:.]+\](:[0-9]{1,5})?")


def _origin_list(key: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (list, tuple, set, frozenset)):
        raise ConfigError(
            f"{key} must be a list of origins like 'https://ops.example.com', got {value!r}"
        )
    out = []
    for item in value:
        if not isinstance(item, str) or not _ORIGIN.fullmatch(item.lower()):
            raise ConfigError(
                f"{key} entries must be scheme://host[:port] with no path, got {item!r}"
            )
        out.append(item.lower())
    return tuple(out)


def _optional_bool(key: str, value: Any) -> bool | None:
    if value is not None and not isinstance(value, bool):
        raise ConfigError(f"{key} must be True, False or None, got {value!r}")
    return value


def _optional_str(key: str, value: Any) -> str | None:
    if value is not None and (not isinstance(value, str) or not value or len(value) > 64):
        raise ConfigError(
            f"{key} must be a non-empty string of at most 64 characters, got {value!r}"
        )
    return value


def _wakeup_url(key: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not re.fullmatch(r"rediss?://\S+|unix://\S+", value):
        raise ConfigError(
            f"{key} must be a Redis URL like 'redis://localhost:6379/0' (or None), got "
            f"{_url_shown(value)}"
        )
    if importlib.util.find_spec("redis") is None:
        raise ConfigError(f"{key} needs the redis package: pip install 'flask-ratchet[redis]'")
    return value


def _database_url(key: str, value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, sa.URL):
        return value.render_as_string(hide_password=False)
    try:
        if not isinstance(value, str):
            raise TypeError(value)
        sa.make_url(value)
    except (sa.exc.ArgumentError, TypeError, ValueError):
        raise ConfigError(
            f"{key} must be a database URL like 'postgresql+psycopg://user@host/app' (or None), "
            f"got {_url_shown(value)}"
        ) from None
    return str(value)


def _read_url(key: str, value: Any) -> str | None:
    url = _database_url(key, value)
    if url is not None and sa.make_url(url).get_backend_name() != "postgresql":
        # MariaDB and SQLite: a replica's lag is not read there (yet), and SQLite has none.
        raise ConfigError(
            f"{key}: read replicas are supported on PostgreSQL only; got {_url_shown(url)}"
        )
    return url


def _url_shown(value: Any) -> str:
    """``value`` as a refusal shows it: a password in a URL masked."""
    return repr(re.sub(r"(://[^/:@\s]*:)[^@/\s]*@", r"\1***@", str(value)))


def _bool(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{key} must be True or False, got {value!r}")
    return value


def _id_list(key: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list | tuple | set | frozenset):
        raise ConfigError(f"{key} must be a list of recurring job ids, got {value!r}")
    for item in value:
        if not isinstance(item, str) or not item or len(item) > 255:
            raise ConfigError(f"{key} entries must be recurring job ids (strings), got {item!r}")
    return tuple(sorted(value))


def _sqlite_synchronous(key: str, value: Any) -> str | None:
    if value is not None and value not in ("OFF", "NORMAL", "FULL", "EXTRA"):
        raise ConfigError(f"{key} must be 'OFF', 'NORMAL', 'FULL', 'EXTRA' or None, got {value!r}")
    return value  # type: ignore[no-any-return]


#: The longest claim timeout: a day (PostgreSQL's ``statement_timeout`` holds under 25).
CLAIM_TIMEOUT_MAX = 86_400.0

_VALIDATORS: dict[str, Callable[[str, Any], Any]] = {
    "database_url": _database_url,
    "allowed_modules": _module_list,
    "console_auth": _callable_or_none,
    "console_url_prefix": _prefix_or_none,
    "console_origins": _origin_list,
    "alarm_due_after": _seconds,
    "alarm_dead_letter_window": _seconds,
    "max_payload_bytes": _positive_int,
    "priority_boost_minutes": _non_negative_int,
    "auto_create": _optional_bool,
    "poll_interval": _seconds,
    "claim_timeout": lambda key, value: _seconds_at_most(key, value, CLAIM_TIMEOUT_MAX),
    "poll_max_interval": _seconds,
    "burst_interval": _seconds,
    "deep_idle_interval": _seconds,
    "deep_idle_after": _seconds,
    "concurrency": _positive_int,
    "queues": queues_setting,
    "routes": routes_setting,
    "prefetch": _optional_non_negative_int,
    "unknown_task_grace": _seconds,
    "heartbeat_interval": _seconds,
    "orphan_grace": _seconds,
    "retention_days": _positive_number,
    "dlq_retention_days": _positive_number,
    "log_retention_days": _positive_number,
    "retention_interval": _seconds,
    "maintenance_interval": _seconds,
    "drain_timeout": _seconds,
    "node_id": _optional_str,
    "sqlite_synchronous": _sqlite_synchronous,
    "recurring_enabled": _bool,
    "recurring_disabled": _id_list,
    "recurring_misfire_threshold": _seconds,
    "resources": resource_limits_setting,
    "encryption_keys": keys_setting,
    "encryption_current_key": _optional_str,
    "encrypt_all": _bool,
    "principal": _callable_or_none,
    "authorize": _callable_or_none,
    "circuit_breakers": breakers_setting,
    "metrics_port": metrics_address_setting,
    "wakeup_url": _wakeup_url,
    "wakeup_prefix": _optional_str,
    "transaction_pooling": _bool,
    "listen_url": _database_url,
    "read_url": _read_url,
    "eager": _bool,
    "eager_raise": _bool,
    **{f"default_{name}": _job_option(name) for name in CONFIGURABLE_DEFAULTS},
}
