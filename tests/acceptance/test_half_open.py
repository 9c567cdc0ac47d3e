"""A ``flask ratchet worker`` whose connections to PostgreSQL go half-open: they pass through a
proxy (``tests/proxy.py``) that stops forwarding on them and keeps their sockets open."""

from __future__ import annotations

from pathlib import Path

from flask_ratchet import JobStatus
from tests.acceptance.conftest import Workers, wait_until
from tests.apps import create_app, db, ratchet, record_run
from tests.conftest import truncate_all
from tests.proxy import proxy_to

#: What tells the worker's connections apart in what their clients sent: the listener's
#: statement, and the claim engine's session settings (its startup packet).
LISTENER = b"LISTEN ratchet_wakeup"
CLAIMS = b"synchronous_commit=off"


def test_a_worker_whose_connections_stop_delivering_goes_on(pg_url: str, tmp_path: Path) -> None:
    truncate_all(pg_url)
    app = create_app(pg_url)  # the test's own connections are direct
    with proxy_to(pg_url) as proxy, app.app_context():
        pool = Workers(proxy.url(pg_url), tmp_path)
        try:
            proc = pool.start(RATCHET_CLAIM_TIMEOUT=2)
            wait_until(lambda: proxy.opened(LISTENER) == 1, what="the worker to listen")

            # The listener goes deaf: jobs are still picked up (the worker polls), and the
            # listener is replaced once its check goes unanswered (10 s quiet, 5 s to answer).
            assert proxy.blackhole(LISTENER) == 1
            job_id = ratchet.enqueue_now(record_run, 1).id
            wait_until(lambda: status(job_id) == JobStatus.SUCCEEDED, what="a polled pickup")
            wait_until(lambda: proxy.opened(LISTENER) >= 2, what="a new listening connection")
            # Its check, or its LISTEN if it went deaf before that was answered.
            assert "wake-up connection lost (the server did not answer " in pool.output(proc)

            # The claim connection goes deaf mid-claim: the worker cuts it 5 s past the claim
            # timeout and claims on a new one.
            assert proxy.blackhole(CLAIMS) == 1
            job_id = ratchet.enqueue_now(record_run, 2).id
            wait_until(lambda: status(job_id) == JobStatus.SUCCEEDED, what="a claim on a new one")
            assert proxy.opened(CLAIMS) == 2
            assert "a claim had no answer 5s after RATCHET_CLAIM_TIMEOUT (2s)" in pool.output(proc)
            assert proc.poll() is None
        finally:
            pool.stop_all()
            db.engine.dispose()
            print(pool.output(pool.procs[0])[-20_000:] if pool.procs else "")


def status(job_id: object) -> JobStatus | str:
    found = ratchet.get_job(job_id)  # type: ignore[arg-type]
    assert found is not None
    return found.status
