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

Both push the app's context for the test, and go with a test client that keeps its requests'
contexts pushed (pytest-flask's ``client``) in any fixture order (:func:`pushed_for_test`).
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from flask import Flask, appcontext_popped
from flask.ctx import AppContext
from flask.globals import app_ctx

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
        with pushed_for_test(app):
            yield JobsKit(app)

    def ratchet_eager(**given: object) -> Iterator[JobsKit]:
        """Eager mode for the test (see :func:`flask_ratchet.testing.eager`)."""
        app = checked(name, given[name])
        with eager(app), pushed_for_test(app):
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


@contextmanager
def pushed_for_test(app: Flask) -> Iterator[None]:
    """``app``'s context, pushed for the test.

    At the end it is popped at once if it is the current context. If it is not, contexts
    pushed after it are still there: a test client used as a context manager (pytest-flask's
    ``client`` fixture) keeps its last request's contexts pushed until its own fixture ends,
    which pytest may do after this one, and popping ours first would fail ("Popped wrong app
    context"). It is then popped as soon as the contexts above it are.
    """
    ctx = app.app_context()
    ctx.push()
    try:
        yield
    finally:
        pop_when_current(ctx)


def pop_when_current(ctx: AppContext) -> None:
    """Pop ``ctx`` now if it is the current app context, or else right after the app context
    above it is popped (Flask sends ``appcontext_popped`` then)."""
    if _current() is ctx:
        ctx.pop()
        return

    def popped(sender: object, **extra: object) -> None:
        if _current() is ctx:
            appcontext_popped.disconnect(popped)
            ctx.pop()

    appcontext_popped.connect(popped, weak=False)


def _current() -> AppContext | None:
    try:
        current: AppContext = app_ctx._get_current_object()  # type: ignore[attr-defined]
    except RuntimeError:  # no app context at all
        return None
    return current
