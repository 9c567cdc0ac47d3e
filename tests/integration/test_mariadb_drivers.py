"""MariaDB through each URL an app may use: ``mariadb+pymysql://`` (what the rest of the suite
runs on), ``mysql+pymysql://`` and ``mysql+mysqldb://`` (mysqlclient). Each submits with keys and
tags, runs jobs through the executor and completer, waits, cancels and shows the console."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from flask_ratchet import JobStatus
from flask_ratchet.store.mysql import MySQLDialect
from flask_ratchet.testing import run_jobs
from tests.apps import add, create_app, fail_until, ratchet

DRIVERS = ["mariadb+pymysql", "mysql+pymysql", "mysql+mysqldb"]


@pytest.mark.parametrize("database_url", ["mariadb"], indirect=True)
@pytest.mark.parametrize("driver", DRIVERS)
def test_each_driver_runs_the_whole_life_of_a_job(database_url: str, driver: str) -> None:
    url = sa.make_url(database_url).set(drivername=driver)
    if driver == "mysql+mysqldb":  # PyMySQL's option (see tests/conftest.py): mysqlclient has none
        url = url.difference_update_query(["ssl_disabled"])
    app = create_app(url.render_as_string(hide_password=False))
    with app.app_context():
        assert isinstance(ratchet.runtime.store.dialect, MySQLDialect)
        ratchet.runtime.ensure_schema()
        ok = ratchet.enqueue(add, 2, 3).with_idempotency_key("k").with_tags("t").submit()
        assert ratchet.enqueue(add, 2, 3).with_idempotency_key("k").submit().id == ok.id
        failing = fail_until.enqueue(9)
        doomed = add.schedule(3600, 1, 1)
        assert ratchet.cancel_job(doomed.id)
        run_jobs(app)
        assert ok.wait(timeout=10).result == 5
        found = ratchet.get_job(failing.id)
        assert found is not None and found.status == JobStatus.FAILED
        assert ratchet.get_job(doomed.id).status == JobStatus.CANCELED  # type: ignore[union-attr]
        assert [j.id for j in ratchet.find_jobs(tag="t").items] == [ok.id]
        page = app.test_client().get(f"/ratchet/jobs/{ok.id}", headers={"X-Role": "read"})
        assert page.status_code == 200 and "tests.apps:add" in page.text
