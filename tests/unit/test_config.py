from __future__ import annotations

import sys
from datetime import timedelta

import pytest

from flask_ratchet.config import RatchetConfig, RatchetConfigWarning
from flask_ratchet.errors import ConfigError


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
