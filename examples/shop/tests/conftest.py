from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from app import create_app
from flask import Flask


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Flask]:
    yield create_app(SQLALCHEMY_DATABASE_URI=f"sqlite:///{tmp_path / 'test.db'}")


@pytest.fixture
def eager_app() -> Iterator[Flask]:
    # Jobs run in the test's process as their enqueue commits: an in-memory database will do.
    yield create_app(SQLALCHEMY_DATABASE_URI="sqlite://", RATCHET_EAGER=True)
