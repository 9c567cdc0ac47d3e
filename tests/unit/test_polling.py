from __future__ import annotations

from flask_ratchet.worker.polling import Mode, PollingStrategy


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def strategy(clock: Clock) -> PollingStrategy:
    return PollingStrategy(minimum=2, maximum=30, burst=0.5, deep=60, deep_after=300, clock=clock)


def test_empty_polls_back_off_exponentially_up_to_the_maximum() -> None:
    s = strategy(Clock())
    delays = []
    for _ in range(8):
        s.record(0, 10)
        delays.append(s.delay(utilization=0.5))
    assert delays == [2, 4, 8, 16, 30, 30, 30, 30]


def test_work_found_keeps_polling_at_the_minimum_scaled_by_load() -> None:
    s = strategy(Clock())
    s.record(3, 10)
    assert s.delay(utilization=0.0) == 1.0
    assert s.delay(utilization=0.5) == 2.0
    assert s.delay(utilization=1.0) == 3.0


def test_three_full_batches_in_a_row_poll_four_times_faster() -> None:
    s = strategy(Clock())
    for _ in range(2):
        s.record(10, 10)
    assert s.delay(0.5) == 2.0
    s.record(10, 10)
    assert s.delay(0.5) == 0.5
    s.record(4, 10)
    assert s.delay(0.5) == 2.0


def test_wake_up_bursts_until_three_empty_polls() -> None:
    s = strategy(Clock())
    for _ in range(5):
        s.record(0, 10)
    s.wake()
    assert (s.mode, s.delay()) == (Mode.BURST, 0.5)
    s.record(0, 10)
    s.record(0, 10)
    assert s.mode == Mode.BURST
    s.record(0, 10)
    assert s.mode == Mode.NORMAL


def test_deep_idle_after_five_quiet_minutes_and_out_on_wake() -> None:
    clock = Clock()
    s = strategy(clock)
    s.record(0, 10)
    clock.now += 299
    assert s.mode == Mode.NORMAL
    clock.now += 1
    assert (s.mode, s.delay()) == (Mode.DEEP_IDLE, 60)
    s.wake()
    assert s.mode == Mode.BURST
    s.record(1, 10)
    for _ in range(3):
        s.record(0, 10)
    assert s.mode == Mode.NORMAL
