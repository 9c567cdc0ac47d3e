from __future__ import annotations

from app import Order, db, score_fraud, send_receipt
from flask import Flask

from flask_ratchet.testing import JobsKit, assert_enqueued, eager, run_jobs


def test_an_order_enqueues_its_receipt_and_a_fraud_score(app: Flask) -> None:
    assert app.test_client().post("/orders", data={"email": "ada@example.org"}).status_code == 201
    with app.app_context():
        assert_enqueued(send_receipt, args=[1], queue="mail", max_retries=2)
        assert_enqueued(score_fraud, args=[1], priority=3)


def test_running_the_jobs_sends_the_receipt(app: Flask) -> None:
    app.test_client().post("/orders", data={"email": "ada@example.org"})
    ran = run_jobs(app)
    assert [job.result for job in ran] == [1, "receipt for order 1 sent to ada@example.org"]
    with app.app_context():
        assert db.session.get(Order, 1).receipt_sent


def test_the_plugins_fixtures(app: Flask, ratchet_jobs: JobsKit) -> None:
    app.test_client().post("/orders", data={"email": "ada@example.org"})
    ratchet_jobs.assert_enqueued(send_receipt, args=[1])
    assert len(ratchet_jobs.run()) == 2
    ratchet_jobs.refute_enqueued(send_receipt)


def test_eager_mode_from_the_fixture(app: Flask, ratchet_eager: JobsKit) -> None:
    app.test_client().post("/orders", data={"email": "grace@example.org"})
    assert db.session.get(Order, 1).receipt_sent  # ran when the request committed
    assert ratchet_eager.enqueued() == []


def test_eager_mode_with_an_in_memory_database(eager_app: Flask) -> None:
    eager_app.test_client().post("/orders", data={"email": "alan@example.org"})
    with eager_app.app_context():
        assert db.session.get(Order, 1).receipt_sent


def test_a_failing_job_raises_in_eager_mode(app: Flask) -> None:
    with eager(app), app.app_context():
        try:
            send_receipt.enqueue(99)
            # Inside a request (pytest-flask pushes one around each test) the job joins the
            # request's transaction, and runs when it commits; outside, when it is enqueued.
            db.session.commit()
        except LookupError as exc:
            assert str(exc) == "no order 99"
        else:
            raise AssertionError("the job's error was not raised")
