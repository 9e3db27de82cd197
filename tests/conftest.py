"""Shared fixtures: every test gets its own SHEP_HOME under tmp_path."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from events.store import EventStore


@pytest.fixture(autouse=True)
def shep_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """SHEP_HOME points at a fresh directory; nothing touches the real ~/.shep."""
    home = tmp_path / "shep-home"
    monkeypatch.setenv("SHEP_HOME", str(home))
    monkeypatch.delenv("SHEP_DEBUG", raising=False)
    return home


@pytest.fixture
def db_path(shep_home: Path) -> Path:
    shep_home.mkdir(mode=0o700, exist_ok=True)
    return shep_home / "shep.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[EventStore]:
    with EventStore(db_path) as s:
        yield s
