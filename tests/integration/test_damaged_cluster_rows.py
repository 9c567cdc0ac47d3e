"""Rows of the cluster's shared tables (resource limits, nodes, their published breakers)
written straight into the database, holding what ratchet never writes: the console's pages
answer 200 showing the stored value escaped, on SQLite and PostgreSQL where the column can hold
it."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from flask import Flask
from markupsafe import escape

from tests.apps import create_app, db
from tests.integration.helpers import each_database_that_holds

READ = {"X-Role": "read"}
BOTH = ("sqlite", "postgresql")
#: What SQLite keeps in a number column as it is given (PostgreSQL refuses it).
TEXT = "<b>lots"


@pytest.fixture
def app(database_url: str) -> Iterator[Flask]:
    """The test app, with a heartbeat interval long enough that a node row written by a test
    stays live however slowly the test runs."""
    app = create_app(database_url, RATCHET_HEARTBEAT_INTERVAL=600)
    with app.app_context():
        app.extensions["ratchet"].ensure_schema()
        yield app
        db.session.remove()
        db.engine.dispose()


def insert(table: str, **values: object) -> None:
    """Insert a row as a hand would: no checks, and no conversion by the column's type."""
    names = ", ".join(values)
    marks = ", ".join(f":{name}" for name in values)
    with db.engine.begin() as conn:
        conn.execute(sa.text(f"INSERT INTO {table} ({names}) VALUES ({marks})"), values)


def page(app: Flask, url: str) -> str:
    with app.app_context():
        answer = app.test_client().get(url, headers=READ)
    assert answer.status_code == 200, (url, answer.text[-2000:])
    return answer.text


# -- resource limits -----------------------------------------------------------------------------

#: (column of ratchet_resource_limit, what it holds, the databases that can store it).
LIMIT_DAMAGE: list[tuple[str, object, tuple[str, ...]]] = [
    ("max_concurrent", TEXT, ("sqlite",)),
    ("max_concurrent", b"\x00\xff", ("sqlite",)),
    ("max_concurrent", 1e300, ("sqlite",)),
    ("max_concurrent", 0, BOTH),
    ("max_concurrent", -5, BOTH),
    ("retry_delay", TEXT, ("sqlite",)),
    ("retry_delay", b"\x00", ("sqlite",)),
    ("retry_delay", math.nan, ("postgresql",)),  # SQLite stores NaN as NULL: refused here
    ("retry_delay", math.inf, BOTH),
    ("retry_delay", -1.0, BOTH),
    ("retry_delay", 1e300, BOTH),
]


@pytest.mark.parametrize(
    ("database_url", "column", "value"),
    each_database_that_holds(LIMIT_DAMAGE),
    indirect=["database_url"],
)
def test_resource_pages_show_a_damaged_limit_as_stored(
    app: Flask, column: str, value: object
) -> None:
    limit: dict[str, object] = {"max_concurrent": 3, "retry_delay": 2.0} | {column: value}
    with db.engine.begin() as conn:
        now = conn.execute(sa.select(sa.func.current_timestamp())).scalar_one()
    insert("ratchet_resource_limit", resource_name="api", updated_at=now, **limit)
    insert(
        "ratchet_resource_limit",
        resource_name="db",
        max_concurrent=2,
        retry_delay=1.0,
        updated_at=now,
    )
    listed = page(app, "/ratchet/resources")
    one = page(app, "/ratchet/resources/limit?name=api")
    for text in (listed, one):
        assert str(escape(str(value))) in text
        assert TEXT not in text  # escaped, never markup
        assert f"column &#39;{column}&#39; is unreadable" in text
    assert "0 / 2" in listed  # the other resource as usual
    assert "deferred by 5 s" in one
