"""Sphinx configuration: ``make docs`` builds the site into docs/_build/html.

The build is offline and deterministic: intersphinx reads the inventories vendored in
``_inventories/`` (``python docs/_inventories/refresh.py`` refreshes them), and every warning,
a broken cross-reference included (``nitpicky``), fails it (``-W``).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent))

import flask_ratchet  # noqa: E402

project = "flask-ratchet"
author = "The flask-ratchet team"
copyright = "the flask-ratchet team"
release = flask_ratchet.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.intersphinx",
    "sphinx.ext.graphviz",
    "sphinx_click",
    "ratchet_reference",
]

# Markdown pages (MyST), so the pages read like the README they came from.
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
exclude_patterns = ["_build", "monitoring", "architecture.md", "_inventories"]
root_doc = "index"

nitpicky = True
# Type variables (``P``, ``R``, ``T`` of a generic's signature) are no objects to link to.
nitpick_ignore_regex = [(r"py:(class|obj)", r"(typing\.~|.*\.)?[PRT]")]
nitpick_ignore = [
    ("py:class", "TracerProvider"),  # OpenTelemetry's API publishes no Sphinx inventory
    ("py:class", "re.Pattern"),  # Python 3.11's inventory lists its methods, not the class
]

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_preserve_defaults = False

intersphinx_mapping = {
    name: (url, str(HERE / "_inventories" / f"{name}.inv"))
    for name, url in {
        "python": "https://docs.python.org/3/",
        "flask": "https://flask.palletsprojects.com/en/stable/",
        "flask_sqlalchemy": "https://flask-sqlalchemy.readthedocs.io/en/stable/",
        "sqlalchemy": "https://docs.sqlalchemy.org/en/20/",
        "alembic": "https://alembic.sqlalchemy.org/en/latest/",
        "click": "https://click.palletsprojects.com/en/stable/",
        "blinker": "https://blinker.readthedocs.io/en/stable/",
    }.items()
}

graphviz_output_format = "svg"

# Furo: a clean, maintained theme with a light and a dark mode, a sidebar that scales to many
# pages, and MyST support; the Pallets theme is tied to the Pallets projects' own branding.
html_theme = "furo"
html_title = f"flask-ratchet {release}"
html_last_updated_fmt = None
