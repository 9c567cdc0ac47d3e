"""A process forked after ratchet used the database (a job using multiprocessing, a task that
forks, a pre-forking server) opens connections of its own."""

from __future__ import annotations

import os

import sqlalchemy as sa

from tests.apps import add, create_app, db, ratchet


def backend_pid() -> int:
    """The PostgreSQL backend serving a connection from the app's pool."""
    with db.engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one())


def test_a_forked_child_never_uses_its_parents_connection(pg_url: str) -> None:
    app = create_app(pg_url)
    with app.app_context():
        ratchet.enqueue_now(add, 1, 2)
        parent = backend_pid()  # the pool keeps this connection
        read, write = os.pipe()
        child = os.fork()
        if child == 0:  # the child reports through the pipe
            try:
                ratchet.enqueue_now(add, 3, 4)
                os.write(write, str(backend_pid()).encode())
            finally:
                os._exit(0)
        os.close(write)
        with os.fdopen(read) as pipe:
            answer = pipe.read()
        os.waitpid(child, 0)
        assert answer.isdigit() and int(answer) != parent, answer
        assert backend_pid() == parent  # the parent's connection is its own still
        assert ratchet.queue_health()["counts"]["PENDING"] == 2
