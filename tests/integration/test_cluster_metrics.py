"""The cluster's Prometheus gauges: the console's ``/ratchet/metrics`` and ``ClusterCollector``
on a registry of the host app's, on SQLite and PostgreSQL, parsed with prometheus_client."""

from __future__ import annotations

import socket
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from flask import Flask
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from flask_ratchet.console.metrics import FAMILIES, REPLICA_LAG, ClusterCollector
from flask_ratchet.states import JobStatus
from tests.apps import add, create_app, db, ratchet
from tests.flow_tasks import batch_item
from tests.integration.helpers import add_node, job_in
from tests.integration.test_console import READ

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def scrape(app: Flask, headers: dict[str, str] = READ) -> Samples:
    with app.app_context():
        page = app.test_client().get("/ratchet/metrics", headers=headers)
    assert page.status_code == 200, page.text
    assert page.content_type.startswith("text/plain")
    return parse(page.text)


def test_the_endpoint_is_closed_like_the_rest_of_the_console(app: Flask) -> None:
    with app.app_context():
        client = app.test_client()
        assert client.get("/ratchet/metrics").status_code == 403
        assert client.get("/ratchet/metrics", headers={"X-Role": "nobody"}).status_code == 403
        assert client.post("/ratchet/metrics", headers=READ).status_code in (403, 405)


def test_a_scrape_reports_the_whole_cluster(app: Flask) -> None:
    job_in(JobStatus.FAILED)
    job_in(JobStatus.SUCCEEDED)
    for i in range(3):
        add.enqueue(i, 1)  # due now, default queue
    ratchet.schedule(timedelta(hours=1), add, 9, 9).submit()  # pending, not due
    ratchet.enqueue(add, 1, 1).with_queue("mail").submit()
    ratchet.pause_queue("mail")
    add_node("alive", timedelta(seconds=1))
    add_node("silent", timedelta(hours=1))
    builder = ratchet.enqueue_batch("import")
    builder.add(batch_item, 1, 0)
    builder.submit()

    get = scrape(app)
    assert get[("ratchet_cluster_up", frozenset())] == 1
    jobs = {labels: v for (name, labels), v in get.items() if name == "ratchet_jobs"}
    assert jobs[frozenset({("status", "FAILED")})] == 1
    assert jobs[frozenset({("status", "SUCCEEDED")})] == 1
    assert get[("ratchet_dead_letter_jobs", frozenset())] == 1
    default, mail = frozenset({("queue", "default")}), frozenset({("queue", "mail")})
    # default: three adds, the scheduled one, the batch's child, and the batch, which waits
    # for its children (PENDING, due in 9999); due: the adds and the child.
    assert get[("ratchet_queue_pending_jobs", default)] == 6
    assert get[("ratchet_queue_due_jobs", default)] == 4
    assert get[("ratchet_queue_oldest_due_age_seconds", default)] >= 0
    assert get[("ratchet_queue_paused", default)] == 0
    assert get[("ratchet_queue_pending_jobs", mail)] == 1
    assert get[("ratchet_queue_paused", mail)] == 1
    assert get[("ratchet_live_nodes", frozenset())] == 1
    assert get[("ratchet_batches_running", frozenset())] == 1
    # Every family the module documents is in the scrape (the replica's lag only with a read
    # replica); nothing else is.
    assert {name for name, _ in get} == set(FAMILIES) - {REPLICA_LAG}


def test_the_oldest_due_age_is_how_long_the_oldest_due_job_waited(app: Flask) -> None:
    ratchet.schedule_at(datetime.now(UTC) - timedelta(minutes=10), add, 1, 1).submit()
    age = scrape(app)[("ratchet_queue_oldest_due_age_seconds", frozenset({("queue", "default")}))]
    assert 590 <= age <= 700


def test_an_empty_cluster_reports_zeros_for_the_default_queue(app: Flask) -> None:
    get = scrape(app)
    default = frozenset({("queue", "default")})
    assert get[("ratchet_queue_pending_jobs", default)] == 0
    assert get[("ratchet_queue_oldest_due_age_seconds", default)] == 0
    assert get[("ratchet_live_nodes", frozenset())] == 0


def test_the_scraper_may_ask_for_openmetrics(app: Flask) -> None:
    accept = {"Accept": "application/openmetrics-text; version=1.0.0", **READ}
    with app.app_context():
        page = app.test_client().get("/ratchet/metrics", headers=accept)
    assert page.status_code == 200
    assert page.content_type.startswith("application/openmetrics-text")
    assert page.text.rstrip().endswith("# EOF")


def test_a_host_app_registers_the_collector_on_its_own_registry(app: Flask) -> None:
    add.enqueue(1, 2)
    registry = CollectorRegistry(auto_describe=True)
    registry.register(ClusterCollector(app))  # describes itself: reads nothing yet
    get = parse(generate_latest(registry).decode())
    assert get[("ratchet_queue_pending_jobs", frozenset({("queue", "default")}))] == 1


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def unanswered() -> Flask:
    """An app whose database does not answer (nothing listens on its port)."""
    app = Flask(__name__)
    url = f"postgresql+psycopg://root@127.0.0.1:{unused_port()}/none?connect_timeout=2"
    app.config["SQLALCHEMY_DATABASE_URI"] = url
    app.config["RATCHET_CONSOLE_AUTH"] = lambda request: request.headers.get("X-Role")
    db.init_app(app)
    ratchet.init_app(app)
    return app


def test_a_database_that_does_not_answer_reports_down_without_failing_the_scrape() -> None:
    app = unanswered()
    registry = CollectorRegistry(auto_describe=True)
    registry.register(ClusterCollector(app))  # describe() reads nothing: this works
    get = parse(generate_latest(registry).decode())
    assert get == {("ratchet_cluster_up", frozenset()): 0}


def test_the_console_says_the_database_is_down_and_its_scrape_says_so_too() -> None:
    app = unanswered()
    # The scrape answers (so an alert on ratchet_cluster_up fires) before any schema check.
    assert scrape(app) == {("ratchet_cluster_up", frozenset()): 0}
    with app.app_context():
        page = app.test_client().get("/ratchet/", headers=READ)
        assert page.status_code == 503
        assert "did not answer" in page.text
        notice = app.test_client().get("/ratchet/jobs", headers={**READ, "HX-Request": "true"})
        assert notice.status_code == 503 and "did not answer" in notice.text


def test_the_collector_names_only_what_it_documents() -> None:
    assert all(name.startswith("ratchet_") for name in FAMILIES)
    labels = {label for _, names in FAMILIES.values() for label in names}
    assert labels == {"status", "queue"}  # bounded: never a job id


def test_tables_not_ready_report_down_without_failing_the_scrape(empty_engine: sa.Engine) -> None:
    from flask_ratchet import migrate

    url = empty_engine.url.render_as_string(hide_password=False)
    # A deploy that runs before `flask ratchet db upgrade`: no tables, then an older revision.
    for revision in (None, "0008"):
        if revision is not None:
            migrate.upgrade(empty_engine, revision)
        app = create_app(url, RATCHET_AUTO_CREATE=False)
        assert scrape(app) == {("ratchet_cluster_up", frozenset()): 0}, revision
        with app.app_context():
            db.engine.dispose()
