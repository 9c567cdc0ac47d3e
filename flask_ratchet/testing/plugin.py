"""pytest fixtures for apps that use flask-ratchet.

Registered by the package (the ``pytest11`` entry point ``flask_ratchet``) and inert until a test
asks for one of its fixtures; ``-p no:flask_ratchet`` leaves it out. The fixtures use an ``app``
fixture of the project's own (the app under test, as pytest-flask names it), or the fixture the
ini option ``ratchet_app_fixture`` names:

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

#: The ini option that names the project's fixture giving the app under test.
APP_FIXTURE_OPTION = "ratchet_app_fixture"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        APP_FIXTURE_OPTION,
        "the fixture that gives the Flask app under test, for flask-ratchet's fixtures",
        default="app",
    )


def app_under_test(request: pytest.FixtureRequest) -> Flask:
    """The project's app fixture: ``app``, or the one ``ratchet_app_fixture`` names."""
    name = str(request.config.getini(APP_FIXTURE_OPTION) or "app")
    app = request.getfixturevalue(name)
    if not isinstance(app, Flask):
        raise TypeError(
            f"flask-ratchet's fixtures need the fixture {name!r} to give a Flask app, "
            f"got {type(app).__name__}; set {APP_FIXTURE_OPTION} in the pytest ini file to "
            "the fixture that does"
        )
    return app


@pytest.fixture
def ratchet_jobs(request: pytest.FixtureRequest) -> Iterator[JobsKit]:
    """What was enqueued, and running it, for the project's app fixture."""
    app = app_under_test(request)
    with app.app_context():
        yield JobsKit(app)


@pytest.fixture
def ratchet_eager(request: pytest.FixtureRequest) -> Iterator[JobsKit]:
    """Eager mode for the test (see :func:`flask_ratchet.testing.eager`)."""
    app = app_under_test(request)
    with eager(app), app.app_context():
        yield JobsKit(app)
