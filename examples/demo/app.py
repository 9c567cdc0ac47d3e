"""An example Flask app that uses flask-ratchet: sign-ups enqueue jobs inside the request.

Run it with ``make demo`` (see the README). The console at ``/ratchet`` is open to everyone here
because this is a local demo; a real app sets ``RATCHET_CONSOLE_AUTH`` to check its own users.
"""

from __future__ import annotations

import os
import random
import time
from datetime import timedelta
from pathlib import Path

from flask import Flask, redirect, request, url_for
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy.orm import Mapped, mapped_column
from werkzeug.wrappers import Response

from flask_ratchet import Backoff, DoNotRetry, Priority, Ratchet

db = SQLAlchemy()
ratchet = Ratchet()


class User(db.Model):  # type: ignore[name-defined,misc]
    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str]


@ratchet.task(tags=["mail"])
def send_welcome(user_id: int) -> str:
    """A job that always works."""
    time.sleep(random.uniform(0.05, 0.3))
    return f"welcome mail sent to user {user_id}"


@ratchet.task(max_retries=3, backoff=Backoff.FIXED, backoff_base=timedelta(seconds=2))
def sync_crm(user_id: int) -> dict[str, int]:
    """A flaky job: fails half the time, and usually succeeds on a retry."""
    if random.random() < 0.5:
        raise ConnectionError("CRM timed out")
    return {"user": user_id, "synced": 1}


@ratchet.task(max_retries=1, priority=Priority.LOW)
def verify_address(user_id: int) -> None:
    """A job that fails for good on some input: it ends in the dead-letter queue."""
    if user_id % 5 == 0:
        raise DoNotRetry(f"address of user {user_id} is not deliverable")


@ratchet.task
def newsletter_done(name: str) -> str:
    """A batch's follow-up: runs once every child of the batch has ended."""
    return f"{name}: every issue sent"


@ratchet.task
def newsletter_incomplete(name: str) -> str:
    """A batch's failure follow-up: runs when a child of the batch failed."""
    return f"{name}: some issues could not be sent"


@ratchet.task(resource="payment-api")
def charge_signup_fee(user_id: int) -> str:
    """Runs under a resource limit: never more than two at once across every worker."""
    time.sleep(random.uniform(0.2, 0.6))
    return f"user {user_id} charged"


@ratchet.task(circuit_breaker={"preset": "fast", "open_for": 5}, service="geocoder")
def geocode(user_id: int) -> str:
    """Calls a service that is down now and then: its circuit breaker opens and closes."""
    if (time.time() // 20) % 2:  # down for 20 s, up for 20 s
        raise ConnectionError("geocoder unavailable")
    return f"user {user_id} located"


@ratchet.recurring("*/10 * * * * ?", id="demo.tidy-up", name="Tidy up every 10 s")
def tidy_up() -> str:
    """A recurring job, fired by the workers."""
    return "tidied"


def create_app() -> Flask:
    """The demo app, on a SQLite file under ./instance."""
    app = Flask(__name__)
    instance = Path(os.environ.get("DEMO_INSTANCE", "instance")).resolve()
    instance.mkdir(exist_ok=True)
    app.config["SQLALCHEMY_DATABASE_URI"] = f"sqlite:///{instance / 'demo.db'}"
    # Two web processes and a worker write to one SQLite file: wait for its lock patiently.
    app.config["SQLALCHEMY_ENGINE_OPTIONS"] = {"connect_args": {"timeout": 30}}
    app.config["RATCHET_CONSOLE_AUTH"] = lambda request: "admin"  # local demo only
    app.config["RATCHET_POLL_INTERVAL"] = 1
    app.config["RATCHET_RESOURCES"] = {"payment-api": {"max_concurrent": 2, "retry_delay": 1}}
    db.init_app(app)
    ratchet.init_app(app)
    with app.app_context():
        db.create_all()

    @app.get("/")
    def home() -> str:
        count = db.session.query(User).count()
        return (
            "<h1>Demo shop</h1>"
            f"<p>{count} users signed up.</p>"
            '<form method="post" action="/signup"><input name="email" value="a@example.com">'
            '<button>Sign up</button></form><p><a href="/ratchet/">Jobs console</a></p>'
        )

    @app.post("/signup")
    def signup() -> Response:
        user = User(email=request.form.get("email", "someone@example.com"))
        db.session.add(user)
        db.session.flush()  # the user's id, in this request's transaction
        # A chain: the address is verified only once the welcome mail went out.
        ratchet.enqueue(send_welcome, user.id).then(verify_address, user.id).submit()
        ratchet.enqueue_now(sync_crm, user.id)
        ratchet.enqueue_now(charge_signup_fee, user.id)
        ratchet.enqueue_now(geocode, user.id)
        if user.id % 10 == 0:  # now and then, a batch with follow-ups
            name = f"newsletter-{user.id}"
            batch = ratchet.enqueue_batch(name)
            for reader in range(user.id - 9, user.id + 1):
                batch.add(send_welcome, reader)
            if user.id % 20 == 0:  # every other one has a child that fails for good
                batch.add(verify_address, user.id)
            batch.on_success(newsletter_done, name).on_failure(newsletter_incomplete, name).submit()
        db.session.commit()  # the user and the jobs appear together, or not at all
        return redirect(url_for("home"))

    return app
