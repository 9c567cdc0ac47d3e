"""The one shape of background loops: passes until stopped, failures logged and survived, and
the signals tests wait on."""

from __future__ import annotations

import logging
import threading

import pytest
from sqlalchemy.exc import OperationalError

from flask_ratchet.services import QueueService, Service, Signal


class Flaky(Service):
    """Fails its first two passes (the database's error, then another), then works."""

    after_error = 0.01

    def __init__(self, stop: threading.Event, first: float = 0.0) -> None:
        super().__init__("test-flaky", stop, first=first)
        self.failures: list[Exception] = [
            OperationalError("SELECT 1", {}, Exception("server closed the connection")),
            ValueError("badly formed hexadecimal UUID string"),
        ]
        self.worked = 0

    def run_once(self) -> float:
        if self.failures:
            raise self.failures.pop(0)
        self.worked += 1
        return 0.01


def test_a_signal_is_waited_on_and_counts() -> None:
    signal = Signal()
    assert not signal.wait_for(1, timeout=0.05)
    threading.Timer(0.05, signal.fire, args=(3,)).start()
    assert signal.wait_for(3, timeout=10)
    assert signal.count == 3 and not signal.wait_for(4, timeout=0.05)


def test_a_service_lives_through_failed_passes_and_stops(caplog: pytest.LogCaptureFixture) -> None:
    stop = threading.Event()
    service = Flaky(stop)
    service.start()
    assert service.passed.wait_for(5, timeout=10)
    stop.set()
    service.join(5)
    assert not service.is_alive() and service.worked >= 3
    logged = [(r.levelno, r.exc_info is not None, r.getMessage()) for r in caplog.records]
    assert logged[:2] == [
        (logging.WARNING, True, "test-flaky: pass failed; next in 0.0s"),
        (logging.ERROR, True, "test-flaky: pass failed on what it read; next in 0.0s"),
    ]


def test_a_service_waits_its_first_pause_and_ends_if_stopped_meanwhile() -> None:
    stop = threading.Event()
    service = Flaky(stop, first=30.0)  # a heartbeat's: it beat once before the thread started
    service.start()
    stop.set()
    service.join(5)
    assert not service.is_alive() and service.passed.count == 0


class Collector(QueueService[int]):
    """Handles what it is given in passes, each taking what else came within 50 ms; fails on
    a 13."""

    after_error = 0.0

    def __init__(self) -> None:
        super().__init__("test-collector")
        self.passes: list[list[int]] = []

    def handle(self, first: int) -> None:
        batch = [first]
        while (item := self.take(0.05)) is not None:
            batch.append(item)
        if 13 in batch:
            raise ValueError("unlucky")
        self.passes.append(batch)


def test_a_queue_service_handles_what_it_is_given_in_passes_and_survives_a_failed_one() -> None:
    service = Collector()
    service.start()
    for item in (1, 2, 3):
        service.put(item)
    assert service.passed.wait_for(1, timeout=10)
    service.put(13)
    assert service.passed.wait_for(2, timeout=10)
    service.put(4)
    assert service.passed.wait_for(3, timeout=10)
    assert service.passes == [[1, 2, 3], [4]]


def test_stopping_a_queue_service_handles_everything_put_before() -> None:
    service = Collector()
    for item in range(5):
        service.put(item)  # before the thread starts: the first pass, or what ``stop`` leaves
    service.start()
    service.stop(10)
    assert not service.is_alive()
    assert [i for batch in service.passes for i in batch] == [0, 1, 2, 3, 4]
