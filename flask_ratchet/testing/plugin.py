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

import inspect
import types
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


def pytest_configure(config: pytest.Config) -> None:
    name = str(config.getini(APP_FIXTURE_OPTION) or "app")
    config.pluginmanager.register(fixtures_on(name), FIXTURES_PLUGIN)


#: The name the fixtures are registered under (one module of them per session).
FIXTURES_PLUGIN = "flask_ratchet.fixtures"


def fixtures_on(name: str) -> types.ModuleType:
    """The plugin's fixtures, each naming the fixture ``name`` as a parameter: a static
    dependency, so that pytest can parametrize that fixture (``request.getfixturevalue`` could
    not), as a module of fixtures for pytest to register as a plugin."""
    if not name.isidentifier():
        raise pytest.UsageError(
            f"{APP_FIXTURE_OPTION} must name a fixture (a Python identifier), got {name!r}"
        )
    fixtures = types.ModuleType(FIXTURES_PLUGIN)
    needs = inspect.Signature([inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY)])

    def ratchet_jobs(**given: object) -> Iterator[JobsKit]:
        """What was enqueued, and running it, for the project's app fixture."""
        app = checked(name, given[name])
        with app.app_context():
            yield JobsKit(app)

    def ratchet_eager(**given: object) -> Iterator[JobsKit]:
        """Eager mode for the test (see :func:`flask_ratchet.testing.eager`)."""
        app = checked(name, given[name])
        with eager(app), app.app_context():
            yield JobsKit(app)

    for function in (ratchet_jobs, ratchet_eager):
        function.__signature__ = needs  # type: ignore[attr-defined]
        setattr(fixtures, function.__name__, pytest.fixture(function))
    return fixtures


def checked(name: str, app: object) -> Flask:
    """``app``, given by the fixture ``name``, if it is a Flask app."""
    if not isinstance(app, Flask):
        raise TypeError(
            f"flask-ratchet's fixtures need the fixture {name!r} to give a Flask app, "
            f"got {type(app).__name__}; set {APP_FIXTURE_OPTION} in the pytest ini file to "
            "the fixture that does"
        )
    return app
