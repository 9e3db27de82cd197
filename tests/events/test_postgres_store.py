"""shep's event store on a real PostgreSQL server: OCC, gap-free positions, the chain, outages.

The same guarantees ``tests/events/test_store.py`` checks on SQLite: a
conflicting batch stores nothing, positions are 1..N without gaps whatever the
races, the hash chain is the same bytes as SQLite's, stored events cannot be
changed, and an unreachable server is one clear error that never shows a
password. A worker's store rides out a server that goes away and comes back,
without storing an append twice.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID, uuid4

import psycopg
import pytest

from events.audit import open_log, verify_chain
from events.base import utc_now
from events.errors import ConcurrencyError, StoreUnavailableError
from events.postgres_url import where
from events.postgres_verify import verify_pg_chain
from events.runs import RunCreated
from events.store import EventStore
from tests.support.postgres_server import PostgresServer


def created(run_id: UUID | None = None, version: int = 1, workflow: str = "w") -> RunCreated:
    return RunCreated(
        originator_id=run_id or uuid4(),
        originator_version=version,
        timestamp=utc_now(),
        workflow=workflow,
        agent_type="demo",
        repo="/r",
        created_by="me",
    )


@pytest.fixture
def pg_store(pg_url: str) -> Iterator[EventStore]:
    with EventStore(pg_url) as s:
        yield s


def positions(url: str) -> list[int]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT notification_id FROM stored_events ORDER BY 1").fetchall()
    return [r[0] for r in rows]


def test_conflict_stores_nothing_and_leaves_no_gap(pg_store: EventStore, pg_url: str) -> None:
    """A batch with one taken version is refused whole, and the next append takes position 2."""
    first = created()
    assert pg_store.append([first]) == [1]
    other = created()
    with pytest.raises(ConcurrencyError, match="version 1 is taken"):
        pg_store.append([other, first])
    assert pg_store.load(other.originator_id) == []
    with pytest.raises(ConcurrencyError, match="version 1 is taken"):
        pg_store.append([first])  # one event goes by another statement: the same refusal
    assert pg_store.append([created()]) == [2]
    assert positions(pg_url) == [1, 2]


def test_events_round_trip_and_filter_by_type(pg_store: EventStore) -> None:
    """Typed events come back equal; versions, positions and topic filters read as on SQLite."""
    run_id = uuid4()
    events = [created(run_id, 1), created(run_id, 2, workflow="again")]
    assert pg_store.append(events) == [1, 2]
    assert pg_store.load(run_id) == events
    assert pg_store.load(run_id, after_version=1) == events[1:]
    assert pg_store.load(run_id, types=[RunCreated]) == events
    assert pg_store.stream_version(run_id) == 2
    assert pg_store.stream_version(uuid4()) == 0
    assert pg_store.max_position() == 2
    assert pg_store.positions_of([RunCreated], after=1) == [(2, events[1])]


def test_chain_is_the_same_bytes_as_sqlite(pg_store: EventStore, db_path: Path) -> None:
    """The same events stored in SQLite and on the server end in the same head hash."""
    run_id = uuid4()
    batches = [[created(run_id, 1)], [created(run_id, 2), created()], [created()]]
    with EventStore(db_path) as local:
        for batch in batches:
            assert pg_store.append(batch) == local.append(batch)
    conn = open_log(db_path)
    try:
        on_sqlite = verify_chain(conn)
    finally:
        conn.close()
    on_server = verify_pg_chain(pg_store.url or "")
    assert on_sqlite.ok
    assert on_server.ok
    assert on_server.events == on_sqlite.events == 4
    assert on_server.head_hash == on_sqlite.head_hash


def test_tracking_a_position_twice_is_a_conflict(pg_store: EventStore) -> None:
    """A follower's tracking record commits once; the same position again is refused."""
    pg_store.append([created()])
    pg_store.append([created()], tracking=("supervisor", 1))
    assert pg_store.tracked_position("supervisor") == 1
    with pytest.raises(ConcurrencyError, match="already handled by supervisor"):
        pg_store.append([], tracking=("supervisor", 1))
    assert pg_store.max_position() == 2


def test_stored_events_cannot_be_changed(pg_store: EventStore, pg_url: str) -> None:
    """The server refuses UPDATE and DELETE on the log, whoever connects."""
    pg_store.append([created()])
    for statement in ("UPDATE stored_events SET topic = 'x'", "DELETE FROM stored_events"):
        with psycopg.connect(pg_url) as conn, pytest.raises(psycopg.Error, match="append-only"):
            conn.execute(statement)
    assert verify_pg_chain(pg_url).events == 1


WRITER = """
import sys, uuid
from events.base import utc_now
from events.runs import RunCreated
from events.store import EventStore
with EventStore(sys.argv[1]) as store:
    for i in range(int(sys.argv[2])):
        store.append([RunCreated(originator_id=uuid.uuid4(), originator_version=1,
            timestamp=utc_now(), workflow="w", agent_type="demo", repo="/r", created_by="p")])
"""


def test_eight_processes_append_at_once_without_gaps(pg_url: str) -> None:
    """8 processes racing: every event stored once, positions 1..N, and the chain verifies."""
    EventStore(pg_url).close()
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, pg_url, "25"]) for _ in range(8)]
    assert [p.wait(timeout=120) for p in procs] == [0] * 8
    assert positions(pg_url) == list(range(1, 201))
    report = verify_pg_chain(pg_url)
    assert report.ok
    assert report.events == 200


@pytest.mark.slow
def test_unreachable_server_is_one_clear_error_without_the_password() -> None:
    """Nothing listens: StoreUnavailableError naming host, port and database, never the password."""
    with socket_nobody_listens_on() as port:
        url = f"postgresql://shep:hunter2secret@127.0.0.1:{port}/team"
        with pytest.raises(StoreUnavailableError) as caught:
            EventStore(url)
    message = str(caught.value)
    assert message.startswith(f"Cannot reach the shared store at 127.0.0.1:{port}/team")
    assert "hunter2secret" not in message


@pytest.mark.slow
def test_missing_database_is_one_clear_error(pg_server: PostgresServer) -> None:
    """The pool only times out; the message still says what libpq said: no such database."""
    url = pg_server.url("no_such_db")
    with pytest.raises(StoreUnavailableError) as caught:
        EventStore(url)
    message = str(caught.value)
    assert message.startswith(f"The shared store at {where(url)} has no such database (")
    assert 'database "no_such_db" does not exist' in message
    assert message.endswith("Create it (createdb) or fix the URL: shep settings store --url URL.")


@pytest.mark.slow
def test_unknown_user_is_a_refused_login(pg_server: PostgresServer) -> None:
    url = pg_server.url("postgres").replace(f"//{pg_server.user}@", "//nobody_here@")
    with pytest.raises(StoreUnavailableError) as caught:
        EventStore(url)
    message = str(caught.value)
    assert message.startswith(f"The shared store at {where(url)} refused the login (")
    assert 'role "nobody_here" does not exist' in message


class socket_nobody_listens_on:
    """A loopback port that was free a moment ago (bound, then closed)."""

    def __enter__(self) -> int:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])

    def __exit__(self, *_: object) -> None:
        return None


@pytest.mark.slow
def test_a_worker_rides_out_a_server_restart(
    own_pg_server: PostgresServer,
) -> None:
    """The server dies between appends and comes back: the append waits, then lands once."""
    url = own_pg_server.database()
    said: list[str] = []
    with EventStore(url) as store:
        store.retry_for = 60
        store.on_retry = said.append
        store.append([created()])
        own_pg_server.kill()
        threading.Timer(1.5, own_pg_server.revive).start()
        started = time.monotonic()
        assert store.append([created()]) == [2]
        assert time.monotonic() - started >= 1.0
        assert store.max_position() == 2
    assert positions(url) == [1, 2]
    # A crashed server's "terminating connection" is the server going away, as a refused
    # connection is: said as such, not as a failure of the store.
    assert said[0].startswith(
        f"lost the shared store (Cannot reach the shared store at 127.0.0.1:{own_pg_server.port}"
    )
    assert said[-1].startswith("the shared store is back after")


@pytest.mark.slow
def test_a_worker_gives_up_after_its_window_and_stays_given_up(
    own_pg_server: PostgresServer,
) -> None:
    """Past retry_for the call fails; later calls fail at once, even once the server is back."""
    url = own_pg_server.database()
    said: list[str] = []
    with EventStore(url) as store:
        store.retry_for = 1.0
        store.on_retry = said.append
        store.append([created()])
        own_pg_server.kill()
        with pytest.raises(StoreUnavailableError, match="Cannot reach the shared store"):
            store.append([created()])
        own_pg_server.revive()
        started = time.monotonic()
        with pytest.raises(StoreUnavailableError):
            store.max_position()
        assert time.monotonic() - started < 1.0  # no second wait
    assert said[-1].startswith("gave up after")
    assert positions(url) == [1]
