"""Schema migrations: alembic, with ratchet's own script folder and version table.

The scripts ship inside the package (``flask_ratchet.migrations``), found with
:mod:`importlib.resources`, so an installed wheel migrates exactly like a checkout. alembic is
imported on first use: processes that never migrate (web workers, job workers on PostgreSQL)
do not pay for importing it.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from importlib.resources import as_file, files
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from flask import Flask, appcontext_pushed
from sqlalchemy.engine import Connection, Engine

from . import schema
from .schema import VERSION_TABLE
from .store import store_for

if TYPE_CHECKING:
    from alembic.config import Config


def include_object(
    obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
) -> bool:
    """Alembic's filter: look only at ratchet's tables and what belongs to them."""
    table = name if type_ == "table" else getattr(getattr(obj, "table", None), "name", "")
    return bool(table) and str(table).startswith("ratchet_") and table != VERSION_TABLE


def _config(conn: Connection | None = None) -> Config:
    from alembic.config import Config

    cfg = Config()
    with as_file(files("flask_ratchet.migrations")) as folder:
        cfg.set_main_option("script_location", str(folder))
    cfg.attributes["connection"] = conn
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring ratchet's tables on ``engine`` up to ``revision``, in one transaction.

    Several at once (every pod of a deploy upgrading as it starts) run one after the other,
    behind the database's lock (``schema_transaction``): each later one finds the work done.
    """
    from alembic import command

    with store_for(engine).dialect.schema_transaction(engine) as conn:
        command.upgrade(_config(conn), revision)


def downgrade(engine: Engine, revision: str) -> None:
    """Take ratchet's tables on ``engine`` down to ``revision`` (``base`` drops them)."""
    from alembic import command

    with store_for(engine).dialect.schema_transaction(engine) as conn:
        command.downgrade(_config(conn), revision)


def current(engine: Engine) -> str | None:
    """The revision ratchet's tables are at, or ``None`` if they do not exist.

    A plain read of the version table (the chain of revisions is linear), so that a process
    checking its tables at start-up needs no alembic.
    """
    with engine.connect() as conn:
        if not sa.inspect(conn).has_table(VERSION_TABLE):
            return None
        version = conn.execute(
            sa.select(sa.column("version_num")).select_from(sa.table(VERSION_TABLE))
        ).scalar()
        return None if version is None else str(version)


#: The newest revision this version of flask-ratchet ships (:func:`head` reads it from the
#: scripts; a test keeps the two equal), for start-up checks that should not import alembic.
HEAD = "0017"


def schema_problem(engine: Engine) -> str | None:
    """What is wrong with ratchet's tables on ``engine`` for this version, and what to run; or
    ``None`` if they are at :data:`HEAD` (or newer: a deploy whose new version upgraded them
    first, while this one still runs, keeps working)."""
    found = current(engine)
    if found is not None and not (found.isdigit() and found < HEAD):
        return None
    where = engine.url.render_as_string(hide_password=True)
    what = "are missing" if found is None else f"are at revision {found}"
    return (
        f"flask-ratchet's tables in {where} {what}; this version needs revision {HEAD}. "
        "Run 'flask ratchet db upgrade' once"
    )


def head() -> str | None:
    """The newest revision this version of flask-ratchet ships, read from its scripts."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_config()).get_current_head()


# -- the host app's own migrations ----------------------------------------------------------------
#
# ratchet's tables live in the app's database but on a MetaData of their own, so the host's
# autogenerate (Flask-Migrate's ``flask db migrate``, or alembic's ``revision --autogenerate``)
# finds them in the database and not in the app's models, and would write a migration dropping
# them. These hooks hide them from the host's migrations.


def is_ratchet_table(name: str | None) -> bool:
    """Whether ``name`` is one of ratchet's tables (its alembic version table included)."""
    return name is not None and (name in schema.metadata.tables or name == VERSION_TABLE)


def host_include_name(name: str | None, type_: str, parent_names: Mapping[str, Any]) -> bool:
    """alembic's ``include_name`` hook for the host app's ``env.py``: everything but ratchet's
    tables and what belongs to them (their columns, indexes and constraints)."""
    if type_ == "table":
        return not is_ratchet_table(name)
    return not is_ratchet_table(parent_names.get("table_name"))


def host_include_object(
    obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
) -> bool:
    """alembic's ``include_object`` hook for the host app's ``env.py``: everything but ratchet's
    tables and what belongs to them."""
    table = name if type_ == "table" else getattr(getattr(obj, "table", None), "name", None)
    return not is_ratchet_table(table)


def guard_host_migrations(app: Flask) -> None:
    """Hide ratchet's tables from Flask-Migrate on ``app``, whether it is registered before or
    after ratchet: each time an app context is pushed (every ``flask db`` command pushes one),
    Flask-Migrate's arguments for alembic get :func:`host_include_name`, combined with the app's
    own ``include_name`` if it passed one. A dictionary lookup per context once that is done."""

    def guard(sender: Flask, **_: Any) -> None:  # this app's own: see unguard_host_migrations
        _guard_flask_migrate(sender)

    _GUARD_OF[app] = guard
    appcontext_pushed.connect(guard, app, weak=False)


def unguard_host_migrations(app: Flask) -> None:
    """Undo :func:`guard_host_migrations` in a process that runs no ``flask db`` command and
    pushes an app context per job (a worker): the receiver is a call more per job. The app's
    receiver is disconnected from every sender, so that the signal has none left to look up
    (blinker keeps a receiver disconnected from one sender only)."""
    guard = _GUARD_OF.pop(app, None)
    if guard is not None:
        appcontext_pushed.disconnect(guard)


def _guard_flask_migrate(app: Flask, **_: Any) -> None:
    migrate = app.extensions.get("migrate")
    args = getattr(migrate, "configure_args", None)
    if not isinstance(args, dict) or args.get("include_name") in _GUARDS:
        return
    own = args.get("include_name")

    def include_name(name: str | None, type_: str, parent_names: Mapping[str, Any]) -> bool:
        if not host_include_name(name, type_, parent_names):
            return False
        return own is None or bool(own(name, type_, parent_names))

    _GUARDS.add(include_name)
    args["include_name"] = include_name


#: Each app's receiver of ``appcontext_pushed`` (see :func:`guard_host_migrations`).
_GUARD_OF: weakref.WeakKeyDictionary[Flask, Callable[..., None]] = weakref.WeakKeyDictionary()

#: The hooks :func:`_guard_flask_migrate` installed, so that it installs one per app only.
_GUARDS: weakref.WeakSet[Callable[..., bool]] = weakref.WeakSet()
