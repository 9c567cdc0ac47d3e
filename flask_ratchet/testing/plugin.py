"""pytest fixtures for apps that use flask-ratchet.

Registered by the package (the ``pytest11`` entry point ``flask_ratchet``) and inert until a test
asks for one of its fixtures; ``-p no:flask_ratchet`` leaves it out. The fixtures use an ``app``
fixture of the project's own (the app under test, as pytest-flask names it):

- ``ratchet_jobs``: a :class:`~flask_ratchet.testing.JobsKit` for ``app``, inside its app
  context: ``ratchet_jobs.assert_enqueued(task, args=[...])``, ``.refute_enqueued(...)``,
  ``.enqueued(...)``, ``.run()``;
- ``ratchet_eager``: eager mode for the test: jobs run in the test's process as soon as the
  transaction that enqueued them commits, and a job that fails for good raises.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from flask import Flask

from . import JobsKit, eager


@pytest.fixture
def ratchet_jobs(app: Flask) -> Iterator[JobsKit]:
    """What was enqueued, and running it, for the project's ``app`` fixture."""
    with app.app_context():
        yield JobsKit(app)


@pytest.fixture
def ratchet_eager(app: Flask) -> Iterator[JobsKit]:
    """Eager mode for the test (see :func:`flask_ratchet.testing.eager`)."""
    with eager(app), app.app_context():
        yield JobsKit(app)
