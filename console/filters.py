"""The job list's query string: every input checked against an allow-list or a bound.

A bad value is a 400 naming the parameter; nothing from the query string reaches SQL except
through bound parameters of :mod:`flask_ratchet.store.console_queries`.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from flask import abort

from flask_ratchet.options import Priority
from flask_ratchet.states import JobStatus
from flask_ratchet.store.console_queries import SORTS, JobQuery

from .present import mentions_secret
from .security import can_act

PAGE_SIZES = (25, 50, 100, 200)
DEFAULT_PAGE_SIZE = 50
MAX_TEXT = 255
MAX_SEARCH = 200
#: Query-string names of the filters, in the order the form shows them.
FILTER_NAMES = (
    "status",
    "task",
    "tag",
    "business_key",
    "priority",
    "node",
    "created_after",
    "created_before",
    "q",
    "recurring",
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
    """Validate the job list's parameters; ``abort(400)`` naming the first bad one."""
    args: dict[str, str] = {}
    for name in FILTER_NAMES:
        value = (values.get(name) or "").strip()
        if value:
            args[name] = value
    status = args.get("status")
    if status is not None and status not in JobStatus.__members__:
        abort(400, f"unknown status {status!r}")
    sort = args.get("sort", "newest")
    if sort not in SORTS:
        abort(400, f"sort must be one of {', '.join(SORTS)}")
    for name in ("task", "tag", "business_key", "node", "recurring"):
        if len(args.get(name, "")) > MAX_TEXT:
            abort(400, f"{name} is longer than {MAX_TEXT} characters")
    if len(args.get("q", "")) > MAX_SEARCH:
        abort(400, f"q is longer than {MAX_SEARCH} characters")
    _check_search(args.get("q"))
    query = JobQuery(
        status=JobStatus(status) if status else None,
        task=args.get("task"),
        tag=args.get("tag"),
        business_key=args.get("business_key"),
        priority=_priority(args.get("priority")),
        node=args.get("node"),
        created_after=_when("created_after", args.get("created_after")),
        created_before=_when("created_before", args.get("created_before")),
        search=args.get("q"),
        recurring_id=args.get("recurring"),
        sort=sort,
    )
    size = page_size(values.get("size"))
    if size != DEFAULT_PAGE_SIZE:
        args["size"] = str(size)
    return ListRequest(query, size, checked_cursor(values.get("cursor")), args)


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
    """A job id is open to every role; argument text only to admins, and never a term that
    names a secret-looking key or spans a key and its value (it could probe a masked value)."""
    if q is None:
        return
    try:
        uuid.UUID(q)
        return
    except ValueError:
        pass
    if not can_search_arguments():
        abort(403, "argument text search needs the admin role; search by job id instead")
    if mentions_secret(q):
        abort(400, "q names a secret-looking key: argument search cannot look into masked values")


def _priority(value: str | None) -> int | None:
    if value is None:
        return None
    if value.upper() in Priority.__members__:
        return int(Priority[value.upper()])
    if value.isdigit() and int(value) in {int(p) for p in Priority}:
        return int(value)
    abort(400, "priority must be 0-4 or LOWEST, LOW, NORMAL, HIGH, CRITICAL")


def _when(name: str, value: str | None) -> datetime | None:
    """``YYYY-MM-DDTHH:MM[:SS]`` (a browser's datetime-local input, read as UTC) or ISO 8601."""
    if value is None:
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        abort(400, f"{name} must be a date and time like 2026-01-31T14:00")
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def page_size(value: str | None) -> int:
    """The ``size`` parameter: one of :data:`PAGE_SIZES`, the default if absent; 400 else."""
    if not value:
        return DEFAULT_PAGE_SIZE
    if not value.isdigit() or int(value) not in PAGE_SIZES:
        abort(400, f"size must be one of {', '.join(map(str, PAGE_SIZES))}")
    return int(value)


def checked_cursor(value: str | None) -> str | None:
    """The ``cursor`` parameter as sent (the store checks it belongs to its list), None if
    absent, or 400 if far too long."""
    cursor = value or None
    if cursor is not None and len(cursor) > 100:
        abort(400, "bad cursor")
    return cursor
