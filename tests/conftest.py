"""Shared fixtures: every test gets its own SHEP_HOME under tmp_path."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from events.store import EventStore
from tests.support.postgres_server import REQUIRE_ENV, PostgresServer, find_binaries


@pytest.fixture(autouse=True)
def shep_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """SHEP_HOME points at a fresh directory; nothing touches the real ~/.shep."""
    home = tmp_path / "shep-home"
    monkeypatch.setenv("SHEP_HOME", str(home))
    monkeypatch.delenv("SHEP_DEBUG", raising=False)
    # A read on a shared home starts a keeper that outlives the command by half an hour;
    # tests start theirs themselves (tests/postgres/test_keeper.py), and stop it.
    monkeypatch.setenv("SHEP_SHARED_KEEPER", "0")
    return home


@pytest.fixture
def db_path(shep_home: Path) -> Path:
    shep_home.mkdir(mode=0o700, exist_ok=True)
    return shep_home / "shep.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[EventStore]:
    with EventStore(db_path) as s:
        yield s


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    """A real PostgreSQL server for the session (Debian's binaries, a temp cluster)."""
    binaries = find_binaries()
    if binaries is None:
        if os.environ.get(REQUIRE_ENV):
            pytest.fail("PostgreSQL is required here but initdb/postgres were not found")
        pytest.skip("PostgreSQL binaries not found (apt-get install postgresql)")
    server = PostgresServer(binaries).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(pg_server: PostgresServer) -> str:
    """The URL of a new, empty database on the session's PostgreSQL server."""
    return pg_server.database()


@pytest.fixture
def own_pg_server(pg_server: PostgresServer) -> Iterator[PostgresServer]:
    """A PostgreSQL server of the test's own, to kill and revive without disturbing others
    (requests ``pg_server`` so that it skips or fails the same way without the binaries)."""
    binaries = find_binaries()
    assert binaries is not None
    server = PostgresServer(binaries).start()
    try:
        yield server
    finally:
        server.stop()
