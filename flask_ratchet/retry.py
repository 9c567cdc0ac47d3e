"""Retry decisions: backoff delays, do-not-retry detection, a task's retry rules, a retry a
task asks for, and what an error may say.

Pure functions, no IO: the worker asks them what to do with a failure.
"""

from __future__ import annotations

import random
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from .errors import DoNotRetry, InvalidOption
from .options import Backoff, seconds, shown
from .redact import open_url_password_masked, text_masked

#: No backoff delay is longer than a day.
MAX_DELAY = 24 * 3600.0
#: Stored error messages and tracebacks are cut to these lengths (characters).
MAX_ERROR = 2000
MAX_TRACEBACK = 16000
#: The first line of a traceback that lost its outer frames.
TRACEBACK_CUT = "… (traceback cut)\n"

_DO_NOT_RETRY_ATTR = "__ratchet_do_not_retry__"


def do_not_retry(cls: type[BaseException]) -> type[BaseException]:
    """Class decorator: failures with this exception (or a subclass) skip retries.

    ::

        @do_not_retry
        class InvalidInvoice(ValueError): ...
    """
    setattr(cls, _DO_NOT_RETRY_ATTR, True)
    return cls


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and its ``__cause__``/``__context__`` chain (each once)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def is_permanent(exc: BaseException) -> bool:
    """True if ``exc`` or anything in its ``__cause__``/``__context__`` chain says do not retry."""
    return any(
        isinstance(e, DoNotRetry) or getattr(e, _DO_NOT_RETRY_ATTR, False) for e in _chain(exc)
    )


class Retry(Exception):
    """Raise from a task to run it again later, as Celery's ``self.retry(countdown=…)`` does::

        raise Retry(in_=timedelta(minutes=5))        # or JobContext.current().retry(in_=300)
        raise Retry("rate limited", in_=retry_after)

    ``in_`` (a ``timedelta`` or seconds, up to 100 years) is when; ``None``: after the task's
    backoff, as for any failure. It always retries while retries remain, whatever the task's
    ``retry_on`` and ``dont_retry_on`` say, and ``in_`` is neither capped by ``max_backoff``
    nor jittered. The attempt counts against ``max_retries``, as Celery's does: a job that asks
    again and again still ends, FAILED, once its retries are spent. It is recorded as a failed
    attempt, with the error ``Retry: <message>``.

    :raises InvalidOption: for an ``in_`` that is negative, NaN or longer than 100 years.
    """

    def __init__(self, message: str = "", *, in_: timedelta | float | None = None) -> None:
        #: Seconds until the next attempt, or ``None`` for the task's backoff.
        self.delay: float | None = None if in_ is None else seconds("Retry(in_=…)", in_)
        if not message:
            message = (
                "asked to run again after its backoff"
                if self.delay is None
                else f"asked to run again in {self.delay:g}s"
            )
        super().__init__(message)


ExceptionTypes = tuple[type[BaseException], ...]


@dataclass(frozen=True, slots=True)
class RetryRules:
    """A task's own retry rules (``@ratchet.task(retry_on=…, dont_retry_on=…, max_backoff=…,
    jitter=…)``). They live in the task registry of each process (a worker imports the app that
    registers the task), not in the job's row: they are code (exception classes), and apply to
    every job of the task as the deployed code says.

    - ``retry_on``: only a failure raising one of these (an instance of, ``isinstance``)
      retries; any other fails for good. ``None``: every failure retries, as before. Checked
      against the exception raised only, as Celery's ``autoretry_for`` is; a timeout is no
      exception of the task's and retries as ever.
    - ``dont_retry_on``: a failure with one of these anywhere in its ``__cause__`` /
      ``__context__`` chain fails for good, like ``DoNotRetry``; it wins over ``retry_on``.
    - ``max_backoff``: seconds, the longest wait between attempts (under the 24 hour cap).
    - ``jitter``: the wait loses a random part of up to half, so jobs that failed together do
      not retry together (``Backoff.JITTER`` does this to an exponential backoff).
    """

    retry_on: ExceptionTypes | None = None
    dont_retry_on: ExceptionTypes = ()
    max_backoff: float | None = None
    jitter: bool = False

    def permits(self, exc: BaseException) -> bool:
        """Whether these rules let a failure with ``exc`` be retried (``DoNotRetry`` aside)."""
        if self.dont_retry_on and any(isinstance(e, self.dont_retry_on) for e in _chain(exc)):
            return False
        return self.retry_on is None or isinstance(exc, self.retry_on)

    def delay(
        self, policy: Backoff, base: float, attempt: int, rng: random.Random | None = None
    ) -> float:
        """The wait after failed ``attempt``: the backoff, capped at ``max_backoff``, then
        jittered (``jitter``, or ``Backoff.JITTER``)."""
        jittered = self.jitter or policy == Backoff.JITTER
        plain = Backoff.EXPONENTIAL if policy == Backoff.JITTER else policy
        delay = backoff_delay(plain, base, attempt)
        if self.max_backoff is not None:
            delay = min(delay, self.max_backoff)
        if jittered:
            delay = delay / 2 + (rng or random).uniform(0, delay / 2)
        return delay


#: The rules of a task that sets none: every failure retries, after the plain backoff.
NO_RULES = RetryRules()
#: The ``@ratchet.task`` keywords that make a task's :class:`RetryRules`.
RULE_NAMES = ("retry_on", "dont_retry_on", "max_backoff", "jitter")


def retry_rules(options: dict[str, Any]) -> RetryRules:
    """Take the :data:`RULE_NAMES` out of a decorator's ``options`` and return them as rules.

    :raises InvalidOption: naming the keyword and what it takes.
    """
    given = {name: options.pop(name) for name in RULE_NAMES if name in options}
    if not given:
        return NO_RULES
    retry_on = given.get("retry_on")
    max_backoff = given.get("max_backoff")
    jitter = given.get("jitter", False)
    if not isinstance(jitter, bool):
        raise InvalidOption(f"jitter must be True or False, got {shown(jitter)}")
    if max_backoff is not None:
        max_backoff = seconds("max_backoff", max_backoff)
        if max_backoff <= 0:
            raise InvalidOption(f"max_backoff must be positive, got {shown(given['max_backoff'])}")
    return RetryRules(
        retry_on=None if retry_on is None else _exception_types("retry_on", retry_on),
        dont_retry_on=_exception_types("dont_retry_on", given.get("dont_retry_on", ())),
        max_backoff=max_backoff,
        jitter=jitter,
    )


def _exception_types(name: str, value: Any) -> ExceptionTypes:
    """An exception class, or a tuple, list or set of them, as a tuple."""
    types = (value,) if isinstance(value, type) else value
    if not isinstance(types, tuple | list | set | frozenset) or not all(
        isinstance(t, type) and issubclass(t, BaseException) for t in types
    ):
        raise InvalidOption(
            f"{name} must be an exception class or a tuple of them "
            f"(e.g. (ConnectionError, TimeoutError)), got {shown(value)}"
        )
    return tuple(types)


def backoff_delay(
    policy: Backoff, base: float, attempt: int, rng: random.Random | None = None
) -> float:
    """Seconds to wait before the run after ``attempt`` (1-based) failed.

    NONE: 0. FIXED: ``base``. EXPONENTIAL: ``base * 2**(attempt - 1)``. JITTER: the exponential
    delay, of which a random half is taken off (spreads retries of jobs that failed together).
    Never more than 24 hours.
    """
    if policy == Backoff.NONE:
        return 0.0
    if policy == Backoff.FIXED:
        return min(base, MAX_DELAY)
    exponent = min(attempt - 1, 64)  # 2**64 * any base is past the cap already
    delay = min(base * 2.0**exponent, MAX_DELAY)
    if policy == Backoff.JITTER:
        delay = delay / 2 + (rng or random).uniform(0, delay / 2)
    return delay


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do after a failed attempt: retry after ``delay`` seconds, or stop (DLQ)."""

    retry: bool
    delay: float = 0.0


def decide(
    exc: BaseException,
    attempt: int,
    max_retries: int,
    policy: Backoff,
    base: float,
    rules: RetryRules = NO_RULES,
) -> Decision:
    """Retry while retries remain (``max_retries = n`` allows ``n + 1`` runs) unless told not:
    by ``DoNotRetry`` or the task's ``rules``. A :class:`Retry` the task raised retries while
    retries remain, after its own delay if it gives one."""
    if attempt > max_retries:
        return Decision(retry=False)
    if isinstance(exc, Retry):
        if exc.delay is not None:
            return Decision(retry=True, delay=exc.delay)
        return Decision(retry=True, delay=rules.delay(policy, base, attempt))
    if is_permanent(exc) or not rules.permits(exc):
        return Decision(retry=False)
    return Decision(retry=True, delay=rules.delay(policy, base, attempt))


#: How much of each part of a traceback (a frame, an exception's line) is kept, so that one huge
#: part cannot push every frame out of :data:`MAX_TRACEBACK`.
MAX_TRACEBACK_PART = 4000
#: Room left at the end of a cut text for its ``… [N more]``.
_MORE_ROOM = 20


def sanitize(text: str, limit: int = MAX_ERROR) -> str:
    """The start of ``text``, cut to ``limit`` characters, with credentials in URLs and
    ``password=``/``token=``-style values redacted (:func:`flask_ratchet.redact.text_masked`).

    The text is cut before it is searched, so a message of any size costs as much as ``limit``
    characters of it; a URL password the cut left without its ``@`` is hidden as well. NUL
    characters become U+FFFD: PostgreSQL text cannot hold them, and an outcome the database
    refuses would be retried for ever.
    """
    room = limit - _MORE_ROOM
    dropped = len(text) - room if len(text) > limit else 0
    kept = open_url_password_masked(text[:room]) if dropped else text
    masked = _masked(kept)
    if len(masked) > limit:  # a mask can be longer than what it hides
        dropped += len(masked) - room
        masked = masked[:room]
    return f"{masked}… [{dropped} more]" if dropped else masked


def _masked(text: str) -> str:
    return text_masked(text.replace("\x00", "\ufffd"))


def first_line(exc: BaseException, limit: int = 300) -> str:
    """An error's first line for a log message: a database driver's own message (without the
    SQL and parameters SQLAlchemy appends), or the exception's."""
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0][:limit] if text else type(exc).__name__


def describe(exc: BaseException) -> str:
    """``Type: message``, sanitised and cut: what the job's error column says."""
    message = str(exc)
    return sanitize(f"{type(exc).__name__}: {message}" if message else type(exc).__name__)


def format_traceback(exc: BaseException) -> str:
    """The sanitised traceback, cut from the top so the innermost frames survive.

    Cut in whole parts (a frame, an exception's line, each first cut to
    :data:`MAX_TRACEBACK_PART`), newest first, and only the parts kept are searched for secrets:
    a cut never starts inside a secret whose name it would drop.
    """
    parts = traceback.TracebackException.from_exception(exc).format()
    kept: list[str] = []
    room = MAX_TRACEBACK - len(TRACEBACK_CUT)
    for part in reversed(list(parts)):
        text = sanitize(part, MAX_TRACEBACK_PART)
        if not text.endswith("\n"):  # a part that was cut lost its line end
            text += "\n"
        if len(text) > room:
            kept.append(TRACEBACK_CUT)
            break
        kept.append(text)
        room -= len(text)
    return "".join(reversed(kept))
