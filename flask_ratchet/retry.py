"""Retry decisions: backoff delays, do-not-retry detection, and what an error may say.

Pure functions, no IO: the worker asks them what to do with a failure.
"""

from __future__ import annotations

import random
import traceback
from dataclasses import dataclass

from .errors import DoNotRetry
from .options import Backoff
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


def is_permanent(exc: BaseException) -> bool:
    """True if ``exc`` or anything in its ``__cause__``/``__context__`` chain says do not retry."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, DoNotRetry) or getattr(current, _DO_NOT_RETRY_ATTR, False):
            return True
        current = current.__cause__ or current.__context__
    return False


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
    exc: BaseException, attempt: int, max_retries: int, policy: Backoff, base: float
) -> Decision:
    """Retry while retries remain (``max_retries = n`` allows ``n + 1`` runs) unless told not."""
    if is_permanent(exc) or attempt > max_retries:
        return Decision(retry=False)
    return Decision(retry=True, delay=backoff_delay(policy, base, attempt))


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
