"""Tasks written the way an app moved from Celery writes them: wrapped in the app's own
decorators, retrying on chosen errors, asking for a retry, expiring.

Imported by ``tests.apps`` so that worker subprocesses register them too.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import timedelta
from typing import ParamSpec

from flask_ratchet import Backoff, JobContext, Retry
from tests.apps import ratchet

P = ParamSpec("P")


def tenfold(func: Callable[P, int]) -> Callable[P, int]:
    """An app's own decorator: a closure over ``func`` (``functools.wraps``), which changes
    the result, so a test sees that the worker ran the wrapper and not ``func`` alone."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> int:
        return func(*args, **kwargs) * 10

    return wrapper


def unwrapped(func: Callable[P, int]) -> Callable[P, int]:
    """A decorator without ``functools.wraps``: its wrapper is ``unwrapped.<locals>.wrapper``."""

    def wrapper(*args: P.args, **kwargs: P.kwargs) -> int:
        return func(*args, **kwargs) + 1

    return wrapper


@ratchet.task(name="tests.tenfold_add", max_retries=0)
@tenfold
def tenfold_add(a: int, b: int, ctx: JobContext) -> int:
    """Decorated under an explicit name; takes the job's context through the wrapper."""
    return a + b + ctx.attempt - 1


@ratchet.task
@tenfold
def tenfold_default_name(a: int) -> int:
    """Decorated with ``functools.wraps``: its own name is the function's, a top-level one."""
    return a


@ratchet.task(name="tests.plus_one")
@unwrapped
def plus_one(a: int) -> int:
    """Decorated without ``functools.wraps``: registered only because it is given a name."""
    return a


@ratchet.task
def always_fails(reason: str) -> None:
    """Sets no option of its own: it runs with the app's ``RATCHET_DEFAULT_*``."""
    raise ConnectionError(reason)


@ratchet.task(max_retries=3, backoff=Backoff.NONE, retry_on=(ConnectionError,))
def fails_with(kind: str) -> None:
    """Raises a ConnectionError or a ValueError: only the first retries."""
    raise ConnectionError(kind) if kind == "connection" else ValueError(kind)


@ratchet.task(max_retries=3, backoff=Backoff.NONE, dont_retry_on=(PermissionError,))
def refused_by(path: str) -> None:
    """Fails with a RuntimeError raised from a PermissionError: never retried."""
    try:
        raise PermissionError(path)
    except PermissionError as exc:
        raise RuntimeError("cannot write the report") from exc


@ratchet.task(
    max_retries=1,
    backoff=Backoff.EXPONENTIAL,
    backoff_base=timedelta(hours=1),
    max_backoff=timedelta(minutes=1),
    jitter=True,
)
def capped_backoff() -> None:
    """Its first retry would wait an hour; it waits at most a minute, and at least half."""
    raise ConnectionError("down")


@ratchet.task(max_retries=2, retry_on=(ConnectionError,), dont_retry_on=(Retry,))
def asks_again(times: int, ctx: JobContext) -> str:
    """Asks to run again in an hour on its first ``times`` attempts (the filters ignore it)."""
    if ctx.attempt <= times:
        if ctx.attempt % 2:
            raise Retry("rate limited", in_=timedelta(hours=1))
        ctx.retry(in_=3600)
    return f"done on attempt {ctx.attempt}"


@ratchet.task(expires=timedelta(minutes=10))
def expiring(n: int) -> int:
    """Must start within ten minutes of when it is due."""
    return n
