"""A job's Sentry events as they leave the process: masked by ratchet's rules in every part that
holds what a job had or said, sentry-sdk's own data left as it is, other events untouched."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import sentry_sdk
from sentry_sdk.scope import Scope

from flask_ratchet.redact import MASK
from flask_ratchet.worker.sentry_masks import MaskingHook, guard, masked_event, masked_logentry

#: Made here, not written out, so that no source line of this file holds them.
KEY = "sk_live_" + "77Qz"
PASSWORD = "hunter" + "7"
DSN = f"postgresql://shop:{PASSWORD}@db/prod"


def job_event(**parts: Any) -> dict[str, Any]:
    """An event as sentry-sdk has serialized it, sent from a job's scope."""
    return {"level": "error", "tags": {"ratchet.job_id": "j-1", "ratchet.task": "m:f"}, **parts}


def test_the_request_of_an_eager_job_its_spans_and_contexts_are_masked() -> None:
    sampling = {"public_key": "pk-1", "trace_id": "a" * 32}
    trace = {
        "trace_id": "a" * 32,
        "span_id": "b" * 16,
        "dynamic_sampling_context": sampling,
        "description": f"connect token={KEY}",
        "data": {"db.url": DSN},
    }
    event = job_event(
        request={
            "url": f"https://shop.example/pay?token={KEY}",
            "headers": {"Authorization": f"Bearer {KEY}", "Accept": "*/*"},
            "cookies": {"session": KEY},
            "data": {"card": {"client_secret": KEY}, "dsn": DSN},
        },
        contexts={"trace": trace, "ratchet": {"job_id": "j-1"}, "stripe": {"api_key": KEY}},
        spans=[{"description": f"GET https://api/x?api_key={KEY}", "data": {"db.url": DSN}}],
    )
    kept = copy.deepcopy(sampling)
    masked = masked_event(event)
    assert KEY not in str(masked) and PASSWORD not in str(masked)
    assert masked["request"]["headers"] == {"Authorization": MASK, "Accept": "*/*"}
    assert masked["request"]["data"]["dsn"] == "postgresql://shop:***@db/prod"
    # sentry-sdk's sampling data goes as it was: its public key is no secret, and Sentry needs it.
    assert masked["contexts"]["trace"]["dynamic_sampling_context"] == kept
    assert masked["contexts"]["trace"]["description"] == "connect token=***"
    assert masked["contexts"]["trace"]["span_id"] == "b" * 16
    assert masked["contexts"]["stripe"] == {"api_key": MASK}
    assert masked["spans"][0]["description"] == "GET https://api/x?api_key=***"


@pytest.mark.parametrize(
    ("entry", "sent"),
    [
        # The secret sits in a parameter that says nothing of itself: the line goes masked.
        (
            {"message": "refused token=%s", "params": [KEY], "formatted": f"refused token={KEY}"},
            {"message": "refused token=%s", "params": [], "formatted": "refused token=***"},
        ),
        # A parameter that shows its secret (a URL's password), with no "formatted" (as
        # sentry-sdk 2.11 sends it): the line made from it, masked.
        (
            {"message": "connecting to %s", "params": [DSN]},
            {
                "message": "connecting to %s",
                "params": [],
                "formatted": "connecting to postgresql://shop:***@db/prod",
            },
        ),
        # A parameter whose own keys say it: masked there, and the line made from it.
        (
            {"message": "user %s", "params": {"session": KEY, "n": 1}},
            {
                "message": "user %s",
                "params": [],
                "formatted": f"user {{'session': '{MASK}', 'n': 1}}",
            },
        ),
        # An f-string's line: its template is its text, secret and all.
        (
            {"message": f"refused token={KEY}", "params": [], "formatted": f"refused token={KEY}"},
            {"message": "refused token=***", "params": [], "formatted": "refused token=***"},
        ),
        (
            {"message": f"charge token={KEY} for %s", "params": ["ann"]},
            {
                "message": "charge token=*** for %s",
                "params": [],
                "formatted": "charge token=*** for ann",
            },
        ),
        # Parameters that do not fit the template: Sentry could not show them; none are sent.
        ({"message": "%d of %d", "params": [KEY]}, {"message": "%d of %d", "params": []}),
        # Nothing secret: the entry as it was.
        (
            {"message": "order %d", "params": [3], "formatted": "order 3"},
            {"message": "order %d", "params": [3], "formatted": "order 3"},
        ),
    ],
    ids=[
        "bare-parameter",
        "url-parameter",
        "keyed-parameter",
        "f-string",
        "f-string-and-placeholder",
        "misfit",
        "plain",
    ],
)
def test_a_log_lines_entry_keeps_its_template_and_loses_its_secret(
    entry: dict[str, Any], sent: dict[str, Any]
) -> None:
    assert masked_logentry(entry) == sent


def test_ratchets_own_frames_go_without_variables_and_log_calls_without_parameters() -> None:
    frames = [
        {"module": "flask_ratchet.worker.executor", "function": "_call", "vars": {"args": [KEY]}},
        {"module": "shop.tasks", "function": "charge", "vars": {"api_key": KEY, "n": "3"}},
        {"module": "logging", "function": "error", "vars": {"msg": "'a=%s'", "args": [KEY]}},
    ]
    event = job_event(threads={"values": [{"stacktrace": {"frames": frames}}]})
    sent = masked_event(event)["threads"]["values"][0]["stacktrace"]["frames"]
    assert "vars" not in sent[0]
    assert sent[1]["vars"] == {"api_key": MASK, "n": "3"}
    assert sent[2]["vars"] == {"msg": "'a=%s'", "args": MASK}


def test_events_not_from_a_job_are_untouched_and_the_users_hook_sees_the_masked_one() -> None:
    seen: list[dict[str, Any]] = []

    def users_hook(event: Any, hint: Any) -> Any:
        seen.append(copy.deepcopy(event))
        return event

    hook = MaskingHook(users_hook)
    plain = {"tags": {"area": "web"}, "extra": {"api_key": KEY}}
    assert hook(copy.deepcopy(plain), {}) == plain  # type: ignore[arg-type]
    assert hook(job_event(extra={"api_key": KEY}), {}) == job_event(extra={"api_key": MASK})  # type: ignore[arg-type]
    assert seen[-1]["extra"] == {"api_key": MASK}


def test_an_event_that_cannot_be_masked_is_not_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    from flask_ratchet.worker import sentry_masks

    def broken(event: Any) -> Any:
        raise RecursionError("too deep")

    monkeypatch.setattr(sentry_masks, "masked_event", broken)
    assert MaskingHook(None)(job_event(extra={"api_key": KEY}), {}) is None  # type: ignore[arg-type]


def test_guarding_a_client_wraps_its_hooks_once() -> None:
    def users_hook(event: Any, hint: Any) -> Any:
        return event

    sentry_sdk.init(
        dsn="http://public@127.0.0.1:9/1", before_send=users_hook, default_integrations=False
    )
    try:
        client = sentry_sdk.get_client()
        guard(client)
        guard(client)
        before_send = client.options["before_send"]
        assert isinstance(before_send, MaskingHook) and before_send.wrapped is users_hook
        transaction_hook = client.options["before_send_transaction"]
        assert isinstance(transaction_hook, MaskingHook) and transaction_hook.wrapped is None
    finally:
        sentry_sdk.get_client().close()
        Scope.get_global_scope().set_client(None)


def test_ratchets_own_tags_and_the_transaction_name_stay_as_they_are() -> None:
    # A task in a module whose name holds a secret word: no secret, and masked it would merge
    # every task of that module in Sentry's search.
    task = "shop.password_reset:send_email"
    event = job_event(transaction=task, tags={"ratchet.task": task, "dsn": DSN})
    event["tags"]["ratchet.job_id"] = "j-1"
    masked = masked_event(event)
    assert masked["transaction"] == task
    assert masked["tags"] == {
        "ratchet.job_id": "j-1",
        "ratchet.task": task,
        "dsn": "postgresql://shop:***@db/prod",
    }
