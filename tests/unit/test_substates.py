"""The sub-state rule (flask_ratchet/substates.py) and how the console writes a time from now."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from flask_ratchet.console.present import relative
from flask_ratchet.flows import NOT_YET
from flask_ratchet.states import JobStatus
from flask_ratchet.substates import (
    OF_STATUS,
    STATUS_OF,
    SubState,
    attempt_started_at,
    next_attempt,
    pending_substate,
    running_substate,
    substate,
)

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


@pytest.mark.parametrize(
    ("due_at", "attempts", "paused", "expected"),
    [
        (NOW, 0, False, SubState.DUE),
        (NOW - HOUR, 3, False, SubState.DUE),  # a retry whose backoff is over is due
        (NOW + HOUR, 0, False, SubState.SCHEDULED),
        (NOW + HOUR, 1, False, SubState.RETRYING),
        (NOT_YET, 0, False, SubState.BLOCKED),  # a step waiting for its parent
        (NOW - HOUR, 0, True, SubState.BLOCKED),  # due, in a paused queue
        (NOW + HOUR, 2, True, SubState.BLOCKED),
    ],
)
def test_a_pending_jobs_sub_state(
    due_at: datetime, attempts: int, paused: bool, expected: SubState
) -> None:
    got = pending_substate(due_at=due_at, attempts=attempts, now=NOW, queue_paused=paused)
    assert got is expected


def test_a_running_job_has_started_once_a_start_of_this_claim_is_recorded() -> None:
    assert running_substate(picked_at=NOW, started_at=None) is SubState.CLAIMED
    assert running_substate(picked_at=NOW, started_at=NOW) is SubState.STARTED
    assert running_substate(picked_at=NOW, started_at=NOW + HOUR) is SubState.STARTED
    # A start older than the claim is an earlier attempt's: this one has not started.
    assert running_substate(picked_at=NOW, started_at=NOW - HOUR) is SubState.CLAIMED


def test_only_pending_and_running_jobs_have_sub_states() -> None:
    for status in JobStatus:
        got = substate(status, due_at=NOW, attempts=0, now=NOW, picked_at=NOW, started_at=NOW)
        assert (got is None) == (status not in OF_STATUS)
        if got is not None:
            assert STATUS_OF[got] is status
    assert set(STATUS_OF) == set(SubState)


def test_an_attempts_start_is_never_before_its_claim() -> None:
    assert attempt_started_at(NOW, 1.5) == NOW + timedelta(seconds=1.5)
    assert attempt_started_at(NOW, -3.0) == NOW  # a monotonic clock read out of order
    assert next_attempt(0) == 1 and next_attempt(1) == 2


@pytest.mark.parametrize(
    ("offset", "shown"),
    [
        (timedelta(0), "just now"),
        (timedelta(seconds=0.4), "just now"),
        (timedelta(seconds=12), "in 12 s"),
        (timedelta(minutes=-4, seconds=-30), "4 min ago"),
        (timedelta(hours=3, minutes=59), "in 3 h"),
        (timedelta(hours=30), "in 30 h"),
        (timedelta(days=-5), "5 d ago"),
    ],
)
def test_a_time_from_now_in_its_largest_unit(offset: timedelta, shown: str) -> None:
    assert relative(NOW + offset, NOW) == shown


def test_no_time_is_a_dash() -> None:
    assert relative(None, NOW) == "\N{EM DASH}"
