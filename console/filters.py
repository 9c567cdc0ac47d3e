"""Every value the console reads from a query string or a form, parsed in one place.

A bad value is a 400 naming the parameter and saying what is allowed, raised before the value
reaches the database; nothing from a request reaches SQL except through bound parameters of the
console's read modules (:mod:`.reads`).

The parsers read ASCII only: ``str.isdigit()``, ``int()``, ``float()`` and ``uuid.UUID()`` also
take other scripts' digits (``'²'`` passes ``isdigit()`` and then fails ``int()``; ``'٣'`` is 3),
and ``int()`` refuses more than 4,300 digits with an error of its own. Each number is matched
against a pattern of bounded length first, then checked against the range its column holds.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import NoReturn

from flask import abort
from werkzeug.datastructures import MultiDict

from flask_ratchet.errors import InvalidOption
from flask_ratchet.options import Priority, validate_queue
from flask_ratchet.states import JobStatus
from flask_ratchet.substates import STATUS_OF, SubState

from .error_pages import BadParameter
from .present import mentions_secret
from .reads.job_search import FAILED_SORT, id_prefix
from .reads.jobs import SORTS, JobQuery
from .security import can_act

PAGE_SIZES = (25, 50, 100, 200)
DEFAULT_PAGE_SIZE = 50
MAX_TEXT = 255
MAX_SEARCH = 200
#: The largest value of an INTEGER column (PostgreSQL's ``integer``; SQLite would store more).
INT_MAX = 2**31 - 1
#: A whole number as a person types it: ASCII digits, no sign, no more than a BIGINT has.
WHOLE_NUMBER = re.compile(r"[0-9]{1,19}")
#: A number a form field may hold, in ASCII: ``int()`` and ``float()`` take more than this.
SIGNED_WHOLE_NUMBER = re.compile(r"[+-]?[0-9]{1,19}")
DECIMAL_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]{1,4})?")
NOT_A_NUMBER = frozenset({"nan", "+nan", "-nan", "inf", "+inf", "-inf", "infinity", "-infinity"})
#: The longest number a form field may hold, as text.
MAX_NUMBER_TEXT = 40
#: A job id: 32 ASCII hex digits, hyphens where ``str(uuid)`` puts them or none at all.
JOB_ID = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
    r"|[0-9a-fA-F]{32}"
)
#: A keyset cursor as the store makes them: ``<kind>.<id>``, or ``p.<priority>.<id>``.
CURSOR = re.compile(r"[a-z](?:\.[0-9]{1,20})?\.[0-9a-fA-F-]{32,36}")
#: The longest date text: ``0001-01-01T00:00:00.000000+00:00:00.000000`` and a little more.
MAX_DATE_TEXT = 48
#: The longest parameter name a message repeats.
MAX_NAME_SHOWN = 40
#: Query-string names of the filters, in the order the form shows them.
FILTER_NAMES = (
    "status",
    "sub",
    "task",
    "queue",
    "tag",
    "business_key",
    "principal",
    "priority",
    "node",
    "created_after",
    "created_before",
    "q",
    "error",
    "recurring",
    "fingerprint",
    "sort",
)


@dataclass(frozen=True, slots=True)
class ListRequest:
    """A validated job-list request: the query, the page size and the cursor."""

    query: JobQuery
    size: int
    cursor: str | None
    #: The filters as they came in (validated), to rebuild links and forms.
    args: dict[str, str]


def parse(values: Mapping[str, str]) -> ListRequest:
    """Validate the job list's parameters; ``abort(400)`` naming the first bad one.

    ``status`` may come more than once, or as names separated by commas
    (``status=FAILED&status=CANCELED``, ``status=FAILED,CANCELED``): a job in any of them.
    """
    args: dict[str, str] = {}
    for name in FILTER_NAMES:
        value = (values.get(name) or "").strip()
        if value:
            args[name] = value
    statuses = job_statuses(_all_values(values, "status"))
    args.pop("status", None)
    if statuses:
        # As the form's list names them ("failed" is FAILED), in the statuses' order, once.
        args["status"] = ",".join(statuses)
    status = statuses[0] if len(statuses) == 1 else None
    sub = _substate(args.get("sub"), statuses)
    sort = one_of("sort", args.get("sort"), SORTS) or "newest"
    if sort == FAILED_SORT and statuses != [JobStatus.FAILED.value]:
        refuse("sort", "sort failed lists FAILED jobs by when they failed: filter on FAILED alone")
    for name in ("task", "tag", "business_key", "principal", "node", "recurring", "fingerprint"):
        if len(args.get(name, "")) > MAX_TEXT:
            refuse(name, f"{name} is longer than {MAX_TEXT} characters")
    for name in ("q", "error"):
        if len(args.get(name, "")) > MAX_SEARCH:
            refuse(name, f"{name} is longer than {MAX_SEARCH} characters")
    _check_search(args.get("q"))
    _check_error_search(args.get("error"))
    wanted: JobStatus | frozenset[JobStatus] | None = None
    if status is not None:
        wanted = JobStatus(status)
    elif statuses:
        wanted = frozenset(JobStatus(s) for s in statuses)
    query = JobQuery(
        status=wanted,
        sub=sub,
        task=args.get("task"),
        queue=queue_name(args.get("queue")),
        tag=args.get("tag"),
        business_key=args.get("business_key"),
        principal=args.get("principal"),
        priority=_priority(args.get("priority")),
        node=args.get("node"),
        created_after=when("created_after", args.get("created_after")),
        created_before=when("created_before", args.get("created_before")),
        search=args.get("q"),
        error=args.get("error"),
        recurring_id=args.get("recurring"),
        fingerprint=args.get("fingerprint"),
        sort=sort,
    )
    size = page_size(values.get("size"))
    if size != DEFAULT_PAGE_SIZE:
        args["size"] = str(size)
    return ListRequest(query, size, checked_cursor(values.get("cursor")), args)


def _substate(value: str | None, statuses: list[str]) -> SubState | None:
    """The ``sub`` parameter: a sub-state (``due`` …), of the one status if one is given; 400
    for anything else. Without a status it implies its own (``sub=retrying`` lists PENDING
    jobs)."""
    sub = one_of("sub", value, tuple(SubState))
    if sub is None:
        return None
    wanted = SubState(sub)
    if len(statuses) > 1:
        refuse("sub", f"sub {sub} is a sub-state of {STATUS_OF[wanted]}: filter on it alone")
    if statuses and STATUS_OF[wanted] != statuses[0]:
        abort(400, f"sub {sub} is a sub-state of {STATUS_OF[wanted]}, not of {statuses[0]}")
    return wanted


def _all_values(values: Mapping[str, str], name: str) -> list[str]:
    """Every value of ``name`` (a form or query string may repeat it), each split at commas."""
    found = values.getlist(name) if isinstance(values, MultiDict) else [values.get(name) or ""]
    return [part for value in found for part in value.split(",")]


def filter_args(args: Mapping[str, str]) -> dict[str, str]:
    """Only the filters (no page size, no sort): what a bulk action acts on."""
    return {k: v for k, v in args.items() if k in FILTER_NAMES and k != "sort"}


def can_search_arguments() -> bool:
    """Whether the current role may search argument text (else the box is labelled "Job id").

    The search runs over the stored arguments, where masked values are in clear text, so only
    an admin (who may change and delete these jobs anyway) may use it: the role that may act.
    """
    return can_act()


def _check_search(q: str | None) -> None:
    """A job id or its prefix is open to every role; argument text only to admins, and never a
    term that names a secret-looking key or spans a key and its value (it could probe a masked
    value)."""
    if q is None or job_id(q) is not None or id_prefix(q) is not None:
        return
    if not can_search_arguments():
        abort(403, "argument text search needs the admin role; search by job id instead")
    if mentions_secret(q):
        refuse("q", "q names a secret-looking key: argument search cannot look into masked values")


def _check_error_search(text: str | None) -> None:
    """Error text as argument text: the list masks secret-looking values in errors too, so a
    search could probe one. Admins only, and never a term naming a secret-looking key."""
    if text is None:
        return
    if not can_search_arguments():
        abort(403, "error text search needs the admin role")
    if mentions_secret(text):
        refuse("error", "error names a secret-looking key: a search cannot look into masked values")


def queue_name(value: str | None) -> str | None:
    """A queue name, or 400 saying what a queue name may hold."""
    if value is None:
        return None
    try:
        return validate_queue(value)
    except InvalidOption as exc:
        refuse("queue", str(exc))


def _priority(value: str | None) -> int | None:
    if value is None:
        return None
    # ASCII only: "lowe\u017ft".upper() is "LOWEST".
    if value.isascii() and value.upper() in Priority.__members__:
        return int(Priority[value.upper()])
    if WHOLE_NUMBER.fullmatch(value) and int(value) in {int(p) for p in Priority}:
        return int(value)
    refuse("priority", "priority must be 0-4 or LOWEST, LOW, NORMAL, HIGH, CRITICAL")


def refuse_nul_characters(values: MultiDict[str, str]) -> None:
    """400 for a NUL character in any parameter's name or value.

    PostgreSQL refuses NUL in a text parameter (SQLite stores it), so a filter holding one would
    fail in the database; checked once for every parameter, it reaches no query at all.
    """
    for name, value in values.items(multi=True):
        if "\x00" in name or "\x00" in value:
            shown = name[:MAX_NAME_SHOWN].replace("\x00", "\\x00")
            refuse(shown, f"{shown} must not contain a NUL character")


def refuse(name: str, message: str) -> NoReturn:
    """400 with ``message``, naming the parameter ``name`` for the error page's form."""
    raise BadParameter(name, message)


def job_statuses(values: list[str]) -> list[str]:
    """The ``status`` filter's values (see :func:`job_status`), blanks dropped, each once, in
    the statuses' order; 400 naming ``status`` for one that is no status."""
    wanted = {job_status(value) for value in values} - {None}
    return [s for s in JobStatus.__members__ if s in wanted]


def job_status(value: str | None) -> str | None:
    """The ``status`` filter as a status's name, in any case (``status=failed``: the dead
    letters' FAILED), or None when absent; 400 naming the statuses otherwise."""
    text = (value or "").strip()
    if text.isascii():  # ASCII only: "\u017f".upper() is "S"
        text = text.upper()
    return one_of("status", text, tuple(JobStatus.__members__))


def text(name: str, value: str | None, longest: int) -> str | None:
    """``value`` (of the parameter ``name``) stripped, or None when absent or blank; 400 when it
    is longer than ``longest`` characters (what the column holds)."""
    value = (value or "").strip()
    if len(value) > longest:
        refuse(name, f"{name} must be at most {longest} characters")
    return value or None


def one_of(name: str, value: str | None, choices: tuple[str, ...]) -> str | None:
    """``value`` (of the parameter ``name``), one of ``choices``, or None when it is absent or
    blank; 400 otherwise."""
    value = (value or "").strip()
    if not value:
        return None
    if value not in choices:
        refuse(name, f"{name} must be one of {', '.join(choices)}")
    return value


def whole_number(name: str, value: str, low: int, high: int) -> int:
    """``value`` (of the parameter ``name``) as a whole number from ``low`` to ``high``, in
    ASCII digits; 400 otherwise."""
    text = value.strip()
    if WHOLE_NUMBER.fullmatch(text) is None or not low <= int(text) <= high:
        refuse(name, f"{name} must be a whole number from {low} to {high}")
    return int(text)


def spelled_number(name: str, value: str) -> int | float | str:
    """Form text as the number it spells (ASCII only), or the text itself when it spells none:
    the library's own check then names exactly what was typed (``got 'abc'``, ``got nan``).

    400 for text longer than any number needs, before ``int()`` or ``float()`` sees it.
    """
    text = value.strip()
    if len(text) > MAX_NUMBER_TEXT:
        refuse(name, f"{name} must be a number of at most {MAX_NUMBER_TEXT} characters")
    if SIGNED_WHOLE_NUMBER.fullmatch(text):
        return int(text)
    if DECIMAL_NUMBER.fullmatch(text) or text.lower() in NOT_A_NUMBER:
        return float(text)
    return text


def when(name: str, value: str | None) -> datetime | None:
    """``YYYY-MM-DDTHH:MM[:SS]`` (a browser's datetime-local input, read as UTC) or ISO 8601
    with an offset, in UTC; None when absent; 400 for anything else.

    A time whose offset takes it past the ends of the calendar in UTC (``9999-12-31T23:59-01:00``,
    ``0001-01-01T00:00+01:00``) is refused: there is no such instant to compare with.
    """
    if value is None:
        return None
    if len(value) > MAX_DATE_TEXT or not value.isascii():
        _bad_date(name)
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        _bad_date(name)
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=UTC)
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        refuse(name, f"{name} must fall between 0001-01-01 and 9999-12-31 in UTC")


def _bad_date(name: str) -> NoReturn:
    refuse(name, f"{name} must be a date and time like 2026-01-31T14:00")


def job_id(value: str) -> uuid.UUID | None:
    """``value`` as a job id, or None when it is not one (see :data:`JOB_ID`)."""
    return uuid.UUID(value) if JOB_ID.fullmatch(value) else None


def page_size(value: str | None) -> int:
    """The ``size`` parameter: one of :data:`PAGE_SIZES`, the default if absent; 400 else."""
    if not value:
        return DEFAULT_PAGE_SIZE
    if WHOLE_NUMBER.fullmatch(value) is None or int(value) not in PAGE_SIZES:
        refuse("size", f"size must be one of {', '.join(map(str, PAGE_SIZES))}")
    return int(value)


def checked_cursor(value: str | None) -> str | None:
    """The ``cursor`` parameter in the form the store makes them (the store then checks it
    belongs to its list), None if absent; 400 otherwise."""
    cursor = value or None
    if cursor is not None and CURSOR.fullmatch(cursor) is None:
        refuse("cursor", "bad cursor")
    return cursor
