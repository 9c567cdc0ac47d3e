from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import pytest
from flask import Flask
from flask_sqlalchemy import SQLAlchemy

from flask_ratchet import Ratchet
from flask_ratchet.config import RatchetConfig, RatchetConfigWarning
from flask_ratchet.database import replica_for
from flask_ratchet.errors import ConfigError
from flask_ratchet.options import STANDARD_OPTIONS, Backoff, JobOptions, Priority
from flask_ratchet.registry import TaskRegistry


def test_defaults() -> None:
    config = RatchetConfig.from_mapping({})
    assert config.console_auth is None  # the console is closed until the host says who may use it
    assert config.console_url_prefix == "/ratchet"
    assert config.max_payload_bytes == 100 * 1024
    assert config.priority_boost_minutes == 15
    assert (config.poll_interval, config.poll_max_interval) == (2.0, 30.0)
    assert (config.deep_idle_interval, config.deep_idle_after) == (60.0, 300.0)


def test_durations_accept_seconds_and_timedeltas() -> None:
    config = RatchetConfig.from_mapping(
        {"RATCHET_POLL_INTERVAL": timedelta(milliseconds=500), "RATCHET_ORPHAN_GRACE": 30}
    )
    assert config.poll_interval == 0.5
    assert config.orphan_grace == 30.0


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("RATCHET_POLL_INTERVAL", "2"),
        ("RATCHET_POLL_INTERVAL", -1),
        ("RATCHET_MAX_PAYLOAD_BYTES", 0),
        ("RATCHET_MAX_PAYLOAD_BYTES", True),
        ("RATCHET_PRIORITY_BOOST_MINUTES", -5),
        ("RATCHET_ALLOWED_MODULES", "myapp.tasks"),
        ("RATCHET_ALLOWED_MODULES", ["my app"]),
        ("RATCHET_CONSOLE_AUTH", "admin"),
        ("RATCHET_CONSOLE_URL_PREFIX", "ratchet"),
        ("RATCHET_AUTO_CREATE", "yes"),
    ],
)
def test_a_bad_value_is_an_error_naming_the_key(key: str, value: object) -> None:
    with pytest.raises(ConfigError, match=key):
        RatchetConfig.from_mapping({key: value})


def test_max_interval_shorter_than_min_is_refused() -> None:
    with pytest.raises(ConfigError, match="RATCHET_POLL_MAX_INTERVAL"):
        RatchetConfig.from_mapping({"RATCHET_POLL_INTERVAL": 10, "RATCHET_POLL_MAX_INTERVAL": 5})


def test_unknown_key_warns_with_the_closest_one() -> None:
    with pytest.warns(RatchetConfigWarning, match="did you mean RATCHET_POLL_INTERVAL"):
        RatchetConfig.from_mapping({"RATCHET_POL_INTERVAL": 3})


@pytest.mark.parametrize(
    ("key", "field", "default"),
    [
        ("RATCHET_ALARM_DUE_AFTER", "alarm_due_after", 300.0),
        ("RATCHET_ALARM_DEAD_LETTER_WINDOW", "alarm_dead_letter_window", 900.0),
    ],
)
def test_the_console_alarm_settings_are_positive_durations(
    key: str, field: str, default: float
) -> None:
    read = RatchetConfig.from_mapping
    assert getattr(read({}), field) == default
    assert getattr(read({key: timedelta(minutes=2)}), field) == 120.0
    assert getattr(read({key: 30}), field) == 30.0
    for bad in (0, -5, "300", None, True, float("inf"), float("nan"), timedelta(days=40_000)):
        with pytest.raises(ConfigError, match=key):
            read({key: bad})


def test_boost_zero_disables() -> None:
    config = RatchetConfig.from_mapping({"RATCHET_PRIORITY_BOOST_MINUTES": 0})
    assert config.priority_boost_minutes == 0


def test_the_metrics_port_takes_a_port_or_an_address() -> None:
    read = RatchetConfig.from_mapping
    assert read({}).metrics_port is None
    assert read({"RATCHET_METRICS_PORT": 9100}).metrics_port == ("0.0.0.0", 9100)
    assert read({"RATCHET_METRICS_PORT": "127.0.0.1:9100"}).metrics_port == ("127.0.0.1", 9100)
    for bad in (0, 70000, "abc", "host:", True, "\uff19\uff11\uff10\uff10"):  # full-width
        with pytest.raises(ConfigError, match=r"RATCHET_METRICS_PORT: .* is not a metrics port"):
            read({"RATCHET_METRICS_PORT": bad})


def test_worker_metrics_without_prometheus_client_say_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from flask_ratchet.worker.metrics import WorkerMetrics

    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # as if not installed
    with pytest.raises(ConfigError, match=r'pip install "flask-ratchet\[prometheus\]"'):
        WorkerMetrics(lambda: 0, lambda: 0, lambda: 0)


# -- RATCHET_DEFAULT_*: the options of every job whose task and builder set none -----------------


def test_job_defaults_are_todays_job_options_until_configured() -> None:
    config = RatchetConfig.from_mapping({})
    assert config.job_defaults is STANDARD_OPTIONS  # the very object: tasks' options as they are
    assert (config.default_max_retries, config.default_backoff) == (3, Backoff.EXPONENTIAL)
    assert (config.default_backoff_base, config.default_timeout) == (10.0, None)
    assert (config.default_queue, config.default_priority) == ("default", Priority.NORMAL)
    with pytest.warns(RatchetConfigWarning, match="unknown config key RATCHET_JOB_DEFAULTS"):
        RatchetConfig.from_mapping({"RATCHET_JOB_DEFAULTS": {}})


def test_job_defaults_take_what_a_builder_takes() -> None:
    config = RatchetConfig.from_mapping(
        {
            "RATCHET_DEFAULT_MAX_RETRIES": 0,
            "RATCHET_DEFAULT_BACKOFF": "FIXED",
            "RATCHET_DEFAULT_BACKOFF_BASE": timedelta(seconds=30),
            "RATCHET_DEFAULT_TIMEOUT": 120,
            "RATCHET_DEFAULT_QUEUE": "work",
            "RATCHET_DEFAULT_PRIORITY": 3,
        }
    )
    assert config.job_defaults == JobOptions(
        queue="work",
        priority=Priority.HIGH,
        max_retries=0,
        backoff=Backoff.FIXED,
        backoff_base=30.0,
        timeout=120.0,
    )
    same = RatchetConfig.from_mapping({"RATCHET_DEFAULT_MAX_RETRIES": 3})
    assert same.job_defaults is STANDARD_OPTIONS  # set to what it was: nothing changed


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        ("RATCHET_DEFAULT_MAX_RETRIES", -1, "max_retries must be a whole number from 0"),
        ("RATCHET_DEFAULT_MAX_RETRIES", True, "max_retries"),
        ("RATCHET_DEFAULT_MAX_RETRIES", "3", "max_retries"),
        ("RATCHET_DEFAULT_BACKOFF", "LINEAR", "backoff must be a Backoff"),
        ("RATCHET_DEFAULT_BACKOFF_BASE", -5, "backoff_base must be a timedelta"),
        ("RATCHET_DEFAULT_BACKOFF_BASE", float("nan"), "backoff_base"),
        ("RATCHET_DEFAULT_TIMEOUT", 0, "timeout must be positive"),
        ("RATCHET_DEFAULT_TIMEOUT", "1m", "timeout"),
        ("RATCHET_DEFAULT_QUEUE", "mail queue", "queue must be 1 to 64"),
        ("RATCHET_DEFAULT_QUEUE", None, "queue"),
        ("RATCHET_DEFAULT_PRIORITY", 9, "priority must be a Priority"),
        ("RATCHET_DEFAULT_PRIORITY", True, "priority"),
    ],
)
def test_a_bad_job_default_is_a_config_error_naming_the_key(
    key: str, value: object, said: str
) -> None:
    with pytest.raises(ConfigError, match=rf"^{key}: {said}"):
        RatchetConfig.from_mapping({key: value})


def plain() -> None: ...


def test_a_task_keeps_what_it_set_over_the_apps_defaults() -> None:
    registry = TaskRegistry()
    own = JobOptions(max_retries=5, queue="mail")
    task = registry.register(plain, None, own, explicit=frozenset({"max_retries", "queue"}))
    assert task.options_over(STANDARD_OPTIONS) is own
    defaults = JobOptions(max_retries=0, queue="work", timeout=60.0, priority=Priority.LOW)
    assert task.options_over(defaults) == JobOptions(
        max_retries=5, queue="mail", timeout=60.0, priority=Priority.LOW
    )


def test_a_read_url_is_a_postgresql_url() -> None:
    url = "postgresql+psycopg://app:hunter2@replica:5432/app"
    assert RatchetConfig.from_mapping({"RATCHET_READ_URL": url}).read_url == url
    assert RatchetConfig.from_mapping({}).read_url is None
    for other in ("sqlite:///app.db", "mariadb+pymysql://app:hunter2@replica/app"):
        with pytest.raises(ConfigError, match=r"RATCHET_READ_URL: .*PostgreSQL only") as raised:
            RatchetConfig.from_mapping({"RATCHET_READ_URL": other})
        assert "hunter2" not in str(raised.value)
    with pytest.raises(ConfigError, match="RATCHET_READ_URL must be a database URL"):
        RatchetConfig.from_mapping({"RATCHET_READ_URL": "not a url"})


def test_a_read_url_on_another_driver_than_psycopg_is_refused() -> None:
    for url in ("postgresql+psycopg2://app:hunter2@r/app", "postgresql+asyncpg://app:hunter2@r/a"):
        config = RatchetConfig.from_mapping({"RATCHET_READ_URL": url})
        with pytest.raises(ConfigError, match=r"RATCHET_READ_URL: .*psycopg 3") as raised:
            replica_for(config)
        assert "hunter2" not in str(raised.value)
    made = replica_for(
        RatchetConfig.from_mapping(
            {"RATCHET_READ_URL": "postgresql+psycopg://app:hunter2@replica/app"}
        )
    )
    assert made is not None and "hunter2" not in repr(made)
    assert replica_for(RatchetConfig.from_mapping({})) is None


@pytest.mark.parametrize("own", [False, True])
def test_a_read_url_is_refused_at_init_for_a_database_other_than_postgresql(
    tmp_path: Path, own: bool
) -> None:
    app = Flask(__name__)
    url = f"sqlite:///{tmp_path / 'app.db'}"
    app.config["RATCHET_READ_URL"] = "postgresql+psycopg://app@replica/app"
    if own:
        app.config["RATCHET_DATABASE_URL"] = url
    else:
        app.config["SQLALCHEMY_DATABASE_URI"] = url
        SQLAlchemy(app)
    with pytest.raises(ConfigError, match=r"RATCHET_READ_URL: .*PostgreSQL only.* sqlite"):
        Ratchet(app)
