from __future__ import annotations

import pytest

from flask_ratchet import states
from flask_ratchet.states import Action, C, F, JobStatus, P, R, S, W, Z


def test_the_seed_transitions_and_nothing_else() -> None:
    edges = {(a, src, dst) for a, table in states.TRANSITIONS.items() for src, dst in table.items()}
    assert edges == {
        (Action.CLAIM, P, R),
        (Action.SUCCEED, R, S),
        (Action.FAIL, R, F),
        (Action.RESCHEDULE, R, P),
        (Action.RELEASE, R, P),
        (Action.PAUSE, P, Z),
        (Action.PAUSE, F, Z),
        (Action.RESUME, Z, Z),
        (Action.RETRY, F, P),
        (Action.CANCEL, P, C),
        (Action.CANCEL, Z, C),
        (Action.CANCEL, R, C),
        (Action.BATCH_SUCCEED, P, S),
        (Action.BATCH_SUCCEED, Z, S),
        (Action.BATCH_FAIL, P, F),
        (Action.BATCH_FAIL, Z, F),
        (Action.CANCEL, W, C),
        (Action.AWAIT, P, W),
        (Action.SIGNAL, W, P),
        (Action.REJECT, W, F),
        (Action.WAIT_AGAIN, W, W),
    }


def test_a_waiting_job_is_never_claimed_and_leaves_only_by_its_signal_or_a_cancel() -> None:
    assert not states.allowed(Action.CLAIM, W)
    leaving = {a for a in Action if states.allowed(a, W)}
    assert leaving == {Action.SIGNAL, Action.REJECT, Action.WAIT_AGAIN, Action.CANCEL}
    assert W in states.LIVE and W in states.ACTIVE  # a hot row, and its business key held


@pytest.mark.parametrize("status", [S, C])
def test_succeeded_and_canceled_are_final(status: JobStatus) -> None:
    assert not any(states.allowed(a, status) for a in Action)


def test_failed_only_leaves_by_manual_retry_or_pause() -> None:
    assert {a for a in Action if states.allowed(a, F)} == {Action.RETRY, Action.PAUSE}


def test_running_cannot_be_paused() -> None:
    assert not states.allowed(Action.PAUSE, R)
    with pytest.raises(ValueError, match="cannot pause a job that is RUNNING"):
        states.target(Action.PAUSE, R)


def test_resume_returns_to_the_remembered_status() -> None:
    assert states.resume_target("PENDING") == P
    assert states.resume_target(F) == F
    for bad in (None, "RUNNING", "SUCCEEDED"):
        with pytest.raises(ValueError):
            states.resume_target(bad)


def test_live_and_terminal_partition_the_statuses() -> None:
    assert states.LIVE | states.TERMINAL == set(JobStatus)
    assert not states.LIVE & states.TERMINAL
