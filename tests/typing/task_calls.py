"""Calls a type checker must judge: each line marked ``# wrong`` must be an error, and no other.

Checked by tests/unit/test_typed_tasks.py with ``mypy --strict``; never imported or run.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import ParamSpec, TypeVar

from flask_ratchet import JobBuilder, JobHandle, Ratchet

ratchet = Ratchet()
P = ParamSpec("P")
R = TypeVar("R")


def logged(func: Callable[P, R]) -> Callable[P, R]:
    """An app's own decorator, typed as most are."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        return func(*args, **kwargs)

    return wrapper


@ratchet.task
def send_welcome(user_id: int, *, locale: str = "en") -> str:
    return f"{user_id}:{locale}"


@ratchet.task(queue="mail", max_retries=3)
async def fetch(url: str, retries: int = 1) -> bytes:
    return url.encode() * retries


@ratchet.task(name="typing.logged_add")
@logged
def logged_add(a: int, b: int) -> int:
    return a + b


@ratchet.recurring("@daily")
def nightly() -> None:
    pass


# -- right ---------------------------------------------------------------------------------------
handle: JobHandle = send_welcome.enqueue(3)
handle = send_welcome.enqueue(3, locale="de")
handle = send_welcome.delay(3, locale="de")
handle = send_welcome.schedule(timedelta(hours=1), 3)
handle = send_welcome.schedule(60, user_id=3)
handle = send_welcome.schedule_at(datetime(2030, 1, 1, tzinfo=UTC), 3)
builder: JobBuilder = send_welcome.builder(3).with_priority(5)
handle = fetch.enqueue("https://example.org", retries=2)
handle = nightly.enqueue()
handle = logged_add.enqueue(1, 2)
text: str = send_welcome(3)  # still the function
ratchet.enqueue(send_welcome, "anything goes here: ratchet.enqueue stays untyped")

# -- wrong ---------------------------------------------------------------------------------------
send_welcome.enqueue("three")  # wrong: a str for user_id
send_welcome.enqueue()  # wrong: user_id missing
send_welcome.enqueue(3, "de")  # wrong: locale is keyword-only
send_welcome.enqueue(3, lang="de")  # wrong: no such parameter
send_welcome.delay("three")  # wrong: delay() is typed as enqueue() is
send_welcome.schedule(3)  # wrong: the delay and user_id, or user_id missing
send_welcome.schedule("soon", 3)  # wrong: a delay is a timedelta or seconds
send_welcome.builder(user="x")  # wrong: no such parameter
fetch.enqueue(b"https://example.org")  # wrong: bytes for url
nightly.enqueue(1)  # wrong: takes no arguments
logged_add.delay("1", 2)  # wrong: a decorated task is typed by what its decorator returns
number: int = send_welcome(3)  # wrong: it returns a str
