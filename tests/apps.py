"""The app and tasks the tests use. Importable by worker subprocesses as ``tests.apps``."""

from __future__ import annotations

import gc
import json
import logging
import os
import time
from collections.abc import Callable
from typing import Any, ClassVar

import jinja2
import sqlalchemy as sa
import sqlalchemy.orm
import werkzeug.routing
from flask import Flask, appcontext_pushed, current_app
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from flask_ratchet import Backoff, DoNotRetry, JobContext, Priority, Ratchet


class Base(DeclarativeBase):
    # MariaDB needs a length for every VARCHAR.
    registry = sa.orm.registry(type_annotation_map={str: sa.String(255)})


db = SQLAlchemy(model_class=Base)
ratchet = Ratchet()


class Order(db.Model):  # type: ignore[name-defined,misc]
    """A host-app table, to show jobs commit and roll back with the app's own rows."""

    id: Mapped[int] = mapped_column(primary_key=True)
    item: Mapped[str]


@ratchet.task
def add(a: int, b: int) -> int:
    return a + b


@ratchet.task(name="billing.charge", priority=Priority.HIGH, max_retries=5, tags=["billing"])
def charge(payment_id: int) -> dict[str, Any]:
    return {"charged": payment_id}


def unregistered(x: int) -> int:
    """Not a task, and tests.apps is not allow-listed by default."""
    return x


#: The apps :func:`create_app` made in this process and not yet disposed of (the suite disposes of
#: their engines after each test: a pooled connection left to the garbage collector would warn
#: in whichever later test it happens to be collected).
made: list[Flask] = []


class CompiledTemplates(jinja2.BytecodeCache):
    """The console's templates compiled once per process, not once per app.

    Each test makes an app of its own, and each app a Jinja environment of its own, which would
    compile every template a test renders again: a fifth of a console test's time. Jinja checks
    each template's source against the checksum stored with its code, so an edited template is
    compiled anew.
    """

    def __init__(self) -> None:
        self.codes: dict[str, bytes] = {}

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        code = self.codes.get(bucket.key)
        if code is not None:
            bucket.bytecode_from_string(code)

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        self.codes[bucket.key] = bucket.bytecode_to_string()


compiled_templates = CompiledTemplates()


class CompiledRule(werkzeug.routing.Rule):
    """A URL rule whose URL builders are compiled once per process, not once per app.

    Werkzeug compiles two builder functions for every rule of every app (Python source made
    from the rule, then ``compile()``): for the console's 33 routes, 15 of the 17 ms an app
    takes to make, in every test. A builder depends only on the rule's parts, its defaults and
    converters, and reads everything else from the rule it is bound to when called, so rules
    that are alike share one. Werkzeug releases without the hook compile as before.
    """

    _builders: ClassVar[dict[tuple[Any, ...], Callable[..., tuple[str, str]]]] = {}

    def _compile_builder(self, append_unknown: bool = True) -> Callable[..., tuple[str, str]]:
        key = (
            self.rule,
            tuple(self._trace),
            repr(sorted((self.defaults or {}).items())),
            tuple(sorted((name, type(each)) for name, each in self._converters.items())),
            append_unknown,
        )
        builder = self._builders.get(key)
        if builder is None:
            builder = self._builders[key] = super()._compile_builder(append_unknown)
        return builder


def dispose_made() -> None:
    """Close the connections of every app :func:`create_app` made so far."""
    while made:
        app = made.pop()
        with app.app_context():
            db.session.remove()
            # The wake-up notices' connection otherwise stays open for 10 s after the last
            # one: a test process would hold one per app made in that time, a few dozen in all.
            runtime = app.extensions.get("ratchet")  # none if its configuration was refused
            if runtime is not None:
                runtime.close_wakeups()
            for engine in db.engines.values():
                engine.dispose()


def create_app(url: str | None = None, **config: Any) -> Flask:
    """An app on ``url`` (default ``$RATCHET_TEST_URL``) with ratchet's console open to admins."""
    app = Flask(__name__)
    app.jinja_options = {**app.jinja_options, "bytecode_cache": compiled_templates}
    app.url_rule_class = CompiledRule
    app.config["SQLALCHEMY_DATABASE_URI"] = url or os.environ["RATCHET_TEST_URL"]
    app.config["RATCHET_CONSOLE_AUTH"] = lambda request: request.headers.get("X-Role")
    app.config.update(json.loads(os.environ.get("RATCHET_TEST_CONFIG", "{}")))  # from a test
    app.config.update(config)
    db.init_app(app)
    made.append(app)
    ratchet.init_app(app)
    with app.app_context():
        db.create_all()  # the host's tables only: ratchet's live on their own MetaData
    return app


# -- tasks the worker tests run ------------------------------------------------------------------


class Run(db.Model):  # type: ignore[name-defined,misc]
    """One row per execution of ``record_run``: how the tests count runs."""

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[str]
    pid: Mapped[int]


@ratchet.task
def record_run(n: int) -> int:
    """Record that this job ran, in the job's own app context and transaction."""
    db.session.add(Run(job_id=str(JobContext.current().job_id), pid=os.getpid()))
    db.session.commit()
    return n


@ratchet.task
def frozen_objects() -> int:
    """How many objects the worker running this job moved out of the collector's sight."""
    return gc.get_freeze_count()


@ratchet.task
def context_receivers() -> int:
    """How many receivers hear each app context this job's worker pushes (one per job)."""
    return len(list(appcontext_pushed.receivers_for(current_app._get_current_object())))


@ratchet.task
def mark_run(path: str) -> None:
    """Append this job's id to the file at ``path``: a record of its runs that no database
    outage touches (one short ``O_APPEND`` write per run)."""
    with open(path, "a") as f:
        f.write(f"{JobContext.current().job_id}\n")


@ratchet.task
def charge_card(card_token: str, amount: int) -> int:
    """A task whose first argument is a secret by its parameter's name alone."""
    return amount


@ratchet.task
def logs_a_failure(dsn: str) -> None:
    """Logs a caught error whose message holds a database URL, with its traceback."""
    try:
        raise ConnectionError(f"cannot reach {dsn}")
    except ConnectionError:
        JobContext.current().logger.exception("giving up")


@ratchet.task
def logs_secrets(dsn: str, token: str) -> None:
    """Logs a database URL and a token, through its own logger and a module's."""
    JobContext.current().logger.info("connecting to %s with token=%s", dsn, token)
    logging.getLogger(__name__).warning("retrying %s, password=%s", dsn, token)


@ratchet.task
def wait_for_file(path: str, ctx: JobContext) -> int:
    """Run until ``path`` exists (or the job is canceled); return the worker's pid."""
    ctx.logger.info("waiting for %s", path)
    while not os.path.exists(path):
        if ctx.is_canceled():
            return -1
        time.sleep(0.05)
    return os.getpid()


@ratchet.task
def sleep_for(seconds: float) -> int:
    """A job that takes a while and ignores cancellation."""
    JobContext.current().logger.info("sleeping for %ss", seconds)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.02)
    return os.getpid()


@ratchet.task(max_retries=2, backoff=Backoff.FIXED, backoff_base=1)
def fail_until(attempt_that_works: int) -> str:
    """Fails until its ``attempt_that_works``-th run."""
    ctx = JobContext.current()
    ctx.logger.warning("attempt %d", ctx.attempt)
    if ctx.attempt < attempt_that_works:
        raise ConnectionError(f"attempt {ctx.attempt} failed, password=hunter2")
    return f"worked on attempt {ctx.attempt}"


@ratchet.task(max_retries=0)
def approve(name: str) -> dict[str, Any]:
    """A job that awaits a signal: returns what its signal delivered."""
    record_run(0)
    return {"name": name, "signal": JobContext.current().signal_payload}


@ratchet.task(encrypt=True)
def greet_privately(name: str) -> str:
    """An encrypted task: its argument and its result are sealed in the database."""
    return f"hello {name}"


@ratchet.task(max_retries=5)
def refuse(reason: str) -> None:
    """Fails for good: DoNotRetry, raised as the cause of another error."""
    try:
        raise DoNotRetry(reason)
    except DoNotRetry as exc:
        raise RuntimeError("could not process") from exc


@ratchet.task(max_retries=0)
def never_returns() -> None:
    """Runs until it is interrupted."""
    while True:
        time.sleep(0.01)


@ratchet.task
def report(done: int) -> str:
    JobContext.current().set_progress(done, 10, "half way")
    return "reported"


@ratchet.recurring("0 0 0 1 1 ? 2099", id="tests.new-year-2099", name="New year 2099")
def new_year_2099(ctx: JobContext) -> None:
    """A declared recurring job that never fires while the tests run: registered at worker start."""
    ctx.logger.info("happy new year")


def record_context(ctx: JobContext) -> None:
    """Not declared here: a test declares it every second while it runs a worker in-process
    (declared at import, it would fire in every worker the tests start). Records its run."""
    db.session.add(Run(job_id=str(ctx.job_id), pid=os.getpid()))
    db.session.commit()


# -- tasks the gate tests run (tests/acceptance/test_gates.py) -----------------------------------


class Hold(db.Model):  # type: ignore[name-defined,misc]
    """One row per run of ``hold_probe_api``: when its code started and ended (``time.time()``,
    one clock for every worker process on the machine)."""

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[str]
    started: Mapped[float]
    ended: Mapped[float]


@ratchet.task(resource="probe-api")
def hold_probe_api(seconds: float) -> None:
    """Uses the "probe-api" resource for ``seconds`` and records when.

    Both times are taken inside the job's code, so the interval lies within the time the job
    held its permit (taken before the code starts, given back after it returns): intervals that
    overlap are permits that were out at once.
    """
    started = time.time()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.01)
    ended = time.time()
    db.session.add(Hold(job_id=str(JobContext.current().job_id), started=started, ended=ended))
    db.session.commit()


class ServiceCall(db.Model):  # type: ignore[name-defined,misc]
    """One row per call ``call_flaky_service`` made, and whether the service was up."""

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[str]
    up: Mapped[bool]


@ratchet.task(max_retries=5, backoff=Backoff.FIXED, backoff_base=0.2)
def call_flaky_service(flag: str) -> str:
    """Calls a service that is down unless the file ``flag`` says "up"; records every call."""
    with open(flag) as state:
        up = state.read() == "up"
    db.session.add(ServiceCall(job_id=str(JobContext.current().job_id), up=up))
    db.session.commit()
    if not up:
        raise ConnectionError("the service is down")
    return "ok"


# -- tasks the big-error tests run (tests/acceptance/test_big_errors.py) -------------------------


@ratchet.task(max_retries=0)
def raise_huge(size: int) -> None:
    """Fails with a message of about ``size`` characters: secrets at its start, then one long
    run of dashed words (the text a backtracking pattern spends quadratic time on)."""
    raise ValueError("postgresql://app:hunter2@db/prod password=hunter3 " + "a-" * (size // 2))


@ratchet.task
def log_lines(count: int, size: int) -> int:
    """Logs ``count`` lines of ``size`` characters, the first one with a URL password."""
    logger = JobContext.current().logger
    logger.info("connecting to postgresql://app:hunter4@db/prod")
    for i in range(count):
        logger.info("%d %s", i, "x" * size)
    return count


from tests import async_tasks, celery_tasks, flow_tasks  # noqa: E402,F401  (register their tasks)

# -- tasks the queue tests run (tests/acceptance/test_queues.py) ---------------------------------


class Span(db.Model):  # type: ignore[name-defined,misc]
    """One row per run of ``timed``: which process ran it, and when its code started and ended
    (``time.time()``, one clock for every worker process on the machine)."""

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[str]
    queue: Mapped[str]
    pid: Mapped[int]
    started: Mapped[float]
    ended: Mapped[float]


@ratchet.task
def timed(seconds: float) -> None:
    """Runs for ``seconds`` and records a :class:`Span`; the queue is the job's own."""
    ctx = JobContext.current()
    started = time.time()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.01)
    job = ratchet.get_job(ctx.job_id)
    queue = job.queue if job is not None else "?"
    span = Span(job_id=str(ctx.job_id), queue=queue, pid=os.getpid(), started=started)
    span.ended = time.time()
    db.session.add(span)
    db.session.commit()


@ratchet.task(queue="mail")
def send_mail(to: str) -> str:
    return to
