"""The versions `make test-lowest` installs (.ci/lowest.txt) are the lower bounds pyproject.toml
declares, so that what the README promises is what CI tests."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]


def lower_bounds() -> dict[str, Version]:
    """Each runtime dependency's (and the postgresql, mysql, sentry, otel, redis and
    encryption extras', which the unit and integration tiers import) ``>=`` bound, by package
    name."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    specs = [
        *project["dependencies"],
        *(
            spec
            for extra in ("postgresql", "mysql", "sentry", "otel", "redis", "encryption")
            for spec in extras[extra]
        ),
    ]
    bounds = {}
    for spec in specs:
        found = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[[^]]*\])?>=([0-9][^,;\s]*)", spec)
        assert found, f"{spec!r}: give every dependency a lower bound, and only that"
        bounds[found.group(1).lower()] = Version(found.group(2))
    return bounds


def pins() -> dict[str, Version]:
    lines = (ROOT / ".ci" / "lowest.txt").read_text().splitlines()
    pairs = (line.split("==") for line in lines if line and not line.startswith("#"))
    return {name.lower(): Version(version) for name, version in pairs}


def test_lowest_txt_pins_every_lower_bound() -> None:
    bounds = lower_bounds()
    pinned = pins()
    assert pinned.pop("psycopg-binary") == bounds["psycopg"]  # the binary extra's own package
    assert pinned == bounds
