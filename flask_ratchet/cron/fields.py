"""What both cron dialects share: splitting an expression into fields and reading a field's
values. Pure: no IO."""

from __future__ import annotations

import re

from ..errors import RatchetError

#: The names month and day-of-week fields take, in order (both dialects count from them).
MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")

#: The separators between fields: ASCII spaces and tabs only. Other Unicode spaces (a no-break
#: space pasted from a document) stay inside a field, which then names itself as the bad one.
_SEPARATORS = re.compile(r"[ \t]+")
_ENDS = " \t\r\n\f\v"


class CronError(RatchetError, ValueError):
    """A cron expression or time zone is invalid. The message names the field and the fix."""


def fail(field: str, text: str, problem: str) -> CronError:
    """The error for one field: its name, its text and what is wrong with it."""
    return CronError(f"{field} field {text!r}: {problem}")


def split(expr: str) -> list[str]:
    """The fields of ``expr``, as written (upper-case them after :func:`check_ascii`: some
    letters outside ASCII upper-case into ASCII ones, a dotless i upper-cases to ``I``)."""
    if not isinstance(expr, str):
        raise CronError(f"a cron expression is a string, got {expr!r}")
    return [part for part in _SEPARATORS.split(expr.strip(_ENDS)) if part]


def check_ascii(names: tuple[str, ...], parts: list[str]) -> list[str]:
    """The fields upper-cased, once none holds anything but printable ASCII.

    :raises CronError: naming the first field with a character outside ASCII (a full-width or
        Arabic-Indic digit, a no-break space, a dotless i): such text reads like a number, a
        gap or a name to a person, but is none of them to cron.
    """
    for name, text in zip(names, parts, strict=False):
        if not text.isascii() or not text.isprintable():
            raise fail(
                name,
                text,
                "use ASCII digits, letters and , - * / only, and separate fields with plain "
                "spaces (this one holds a non-ASCII character such as a full-width digit or a "
                "no-break space)",
            )
    return [part.upper() for part in parts]


def is_number(token: str) -> bool:
    """Whether ``token`` is a whole number written in ASCII digits (a full-width digit is not)."""
    return token.isascii() and token.isdigit()


def number(field: str, text: str, token: str, lo: int, hi: int, names: tuple[str, ...]) -> int:
    """One value of a field: a number from ``lo`` to ``hi``, or a name (``names[0]`` is ``lo``)."""
    if token in names:
        return names.index(token) + lo
    if not is_number(token):
        named = f" or {names[0]}-{names[-1]}" if names else ""
        raise fail(field, text, f"{token!r} is not a number from {lo} to {hi}{named}")
    value = int(token)
    if not lo <= value <= hi:
        raise fail(field, text, f"{value} is out of range: use {lo}-{hi}{_hint(field, lo)}")
    return value


def _hint(field: str, lo: int) -> str:
    if field != "day-of-week":
        return ""
    return " (0 or 7 = SUN, 6 = SAT)" if lo == 0 else " (1 = SUN, 7 = SAT)"


def values(
    field: str,
    text: str,
    lo: int,
    hi: int,
    names: tuple[str, ...] = (),
    *,
    max_step: int,
    wrap: bool,
) -> set[int]:
    """The values of a list of ``*``, ``a``, ``a-b``, ``a/n``, ``*/n`` and ``a-b/n`` items.

    ``max_step`` is the largest step allowed; ``wrap`` says whether a range like ``22-2`` wraps
    around (Quartz) or is refused (Unix cron).
    """
    size = hi - lo + 1
    out: set[int] = set()
    for item in text.split(","):
        if not item:
            raise fail(field, text, "empty list item; separate values with single commas")
        base, slash, step_text = item.partition("/")
        step = 1
        if slash:
            if not is_number(step_text) or not 1 <= int(step_text) <= max_step:
                raise fail(field, text, f"step {step_text!r} must be a number from 1 to {max_step}")
            step = int(step_text)
        if base == "*":
            start, end = lo, hi
        elif "-" in base:
            first, _, second = base.partition("-")
            start = number(field, text, first, lo, hi, names)
            end = number(field, text, second, lo, hi, names)
            if end < start and not wrap:
                raise fail(field, text, f"the range {base!r} runs backwards: {_reorder(base)}")
        else:
            start = number(field, text, base, lo, hi, names)
            end = hi if slash else start  # "5/15": from 5 to the end, every 15
        span = (end - start) % size  # a range like 22-2 wraps around
        out.update(lo + (start - lo + i) % size for i in range(0, span + 1, step))
    return out


def _reorder(base: str) -> str:
    first, _, second = base.partition("-")
    return f"write it from low to high ('{second}-{first}'), or as two ranges joined by a comma"
