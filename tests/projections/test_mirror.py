"""A home's copy of the shared log (``shared-cache-<store>.db``), as ``projections.mirror``
keeps it.

Two homes on one database copy what is appended, position for position, in batches. Each
store has a copy of its own: a home pointed at another store reads that store's copy,
and an older shep's ``shared-cache.db`` is taken over when it is a copy of the store.
Nothing is taken on trust: a copy whose head was edited, or that was made from another
store (one recreated at the same address), is not continued; server rows whose hashes do
not follow are not copied (not even those before the bad one); a row edited below the
copy's head is caught by ``shep audit verify``. With the server unreachable, status and
logs read the copy and say, in one line, how old it is.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import apsw
import psycopg
import pytest

from events.errors import ChainBrokenError, StoreError
from events.postgres_url import where
from events.postgres_verify import verify_pg_chain
from events.store import EventStore
from projections import mirror
from projections.database import open_database
from tests.cli.test_store_migrate import (
    ROWS,
    Row,
    changed,
    closed_port,
    created,
    one_error_line,
    server_rows,
)
from tests.support.cli import shep
from tests.support.postgres_server import PostgresServer


@pytest.fixture(autouse=True)
def fresh_mirror(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """The module's per-process state (connections, offline servers, copies), the test's own."""
    connections: dict[str, Any] = {}
    monkeypatch.setattr(mirror, "_connections", connections)
    monkeypatch.setattr(mirror, "_offline", set())
    monkeypatch.setattr(mirror, "_copies", {})
    yield connections
    for conn in connections.values():
        conn.close()


@pytest.fixture
def copies(tmp_path: Path) -> Iterator[dict[str, apsw.Connection]]:
    """The copies of two homes, ``laptop`` and ``buildbox``, opened as shep opens them."""
    opened: dict[str, apsw.Connection] = {}
    for name in ("laptop", "buildbox"):
        home = tmp_path / name
        home.mkdir(mode=0o700)
        opened[name] = open_database(home / "shared-cache-test.db")
    yield opened
    for conn in opened.values():
        conn.close()


def copy_rows(conn: apsw.Connection) -> list[Row]:
    return [
        (int(p), str(o), int(v), str(t), bytes(s), bytes(h))
        for p, o, v, t, s, h in conn.execute(ROWS)
    ]


def append(url: str, count: int) -> None:
    """``count`` events, one batch each, through the shared store as shep appends them."""
    with EventStore(url) as store:
        for _ in range(count):
            store.append([created()])


def edit_copy(conn: apsw.Connection, statement: str) -> None:
    """Change a row of a copy around its append-only trigger (as a damaged disk or a hand might)."""
    conn.execute("DROP TRIGGER IF EXISTS stored_events_no_update")
    conn.execute(statement)


def edit_server(url: str, statement: str) -> None:
    """Change a row on the server around its append-only trigger (as its owner could)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ALTER TABLE stored_events DISABLE TRIGGER USER")
        conn.execute(statement)


def home_env(home: Path, url: str) -> dict[str, str]:
    return {"SHEP_HOME": str(home), "SHEP_DATABASE_URL": url}


def test_two_homes_copy_what_is_appended_position_for_position(
    copies: dict[str, apsw.Connection], pg_url: str
) -> None:
    append(pg_url, 3)
    for conn in copies.values():
        assert mirror.pull(conn, pg_url) == 3
        assert copy_rows(conn) == server_rows(pg_url)

    append(pg_url, 5)
    laptop, buildbox = copies["laptop"], copies["buildbox"]
    assert mirror.pull(laptop, pg_url) == 5
    assert mirror.pull(buildbox, pg_url, batch_size=2) == 5  # three batches, each verified
    assert mirror.pull(laptop, pg_url) == 0
    for conn in copies.values():
        assert copy_rows(conn) == server_rows(pg_url)
        age, count = mirror.staleness(conn)
        assert count == 8
        assert age is not None
        assert 0 <= age < 30
        assert re.fullmatch(r"copied \d+s ago, 8 events", mirror.describe_staleness(conn))


def test_a_home_sees_what_another_home_appended(tmp_path: Path, pg_url: str) -> None:
    """Through the CLI: one home changes a setting on the shared store, the other shows it."""
    laptop = home_env(tmp_path / "laptop", pg_url)
    buildbox = home_env(tmp_path / "buildbox", pg_url)
    shep("settings", "set", "heartbeat_interval", "5", env=laptop, check=True)
    shep("settings", "set", "heartbeat_interval", "9", env=laptop, check=True)

    values = json.loads(shep("settings", "show", "--json", env=buildbox, check=True).stdout)
    assert values["heartbeat_interval"] == 9.0
    shep("status", env=buildbox, check=True)  # a read: the copy takes what is new
    copy = mirror.copy_file(str(tmp_path / "buildbox"), pg_url)
    conn = apsw.Connection(copy)
    try:
        assert copy_rows(conn) == server_rows(pg_url)
    finally:
        conn.close()
    verified = shep("audit", "verify", env=buildbox, check=True).stdout
    assert verified.startswith(f"OK: 2 events verify on the shared store at {where(pg_url)}. ")
    assert "This machine's copy (2 events) matches." in verified


def test_a_copy_whose_head_was_edited_is_not_continued(
    copies: dict[str, apsw.Connection], pg_url: str
) -> None:
    conn = copies["laptop"]
    append(pg_url, 3)
    mirror.pull(conn, pg_url)
    edit_copy(conn, "UPDATE stored_events SET chain_hash = zeroblob(32) WHERE notification_id = 3")
    append(pg_url, 2)

    with pytest.raises(StoreError) as caught:
        mirror.pull(conn, pg_url)
    assert type(caught.value) is StoreError
    assert str(caught.value) == (
        f"This home's copy of the log (shared-cache-test.db, 3 events) was made from another "
        f"store than {where(pg_url)}. Move it aside; the next command copies the log anew."
    )
    assert [row[0] for row in copy_rows(conn)] == [1, 2, 3]


def test_a_row_edited_below_the_copy_s_head_is_caught_by_audit_verify(
    tmp_path: Path, pg_url: str
) -> None:
    home = tmp_path / "laptop"
    env = home_env(home, pg_url)
    for value in ("5", "6", "7"):
        shep("settings", "set", "heartbeat_interval", value, env=env, check=True)
    shep("status", env=env, check=True)  # a read: the copy takes what is new
    conn = apsw.Connection(mirror.copy_file(str(home), pg_url))
    try:
        edit_copy(
            conn,
            "UPDATE stored_events SET state = CAST(state || x'20' AS BLOB) "
            "WHERE notification_id = 2",
        )
    finally:
        conn.close()

    result = shep("audit", "verify", env=env)
    assert result.returncode == 4
    assert one_error_line(result) == (
        "Hash chain broken at position 2: stored hash does not match the event and its "
        "predecessor (the event or an earlier hash was edited). 1 event before it verifies."
    )
    assert verify_pg_chain(pg_url).ok  # the server's log is whole


def test_server_rows_that_do_not_follow_are_not_copied(
    copies: dict[str, apsw.Connection], pg_url: str
) -> None:
    conn = copies["laptop"]
    append(pg_url, 2)
    mirror.pull(conn, pg_url)
    append(pg_url, 3)
    edit_server(pg_url, "UPDATE stored_events SET topic = topic || ' ' WHERE notification_id = 4")

    with pytest.raises(ChainBrokenError) as caught:
        mirror.pull(conn, pg_url)
    assert str(caught.value) == (
        f"The shared store at {where(pg_url)} breaks its hash chain at position 4: "
        "not copied. Run `shep audit verify`."
    )
    assert [row[0] for row in copy_rows(conn)] == [1, 2]  # position 3 neither
    assert not mirror.is_offline(pg_url)


def test_a_copy_is_not_continued_from_another_store(
    tmp_path: Path, copies: dict[str, apsw.Connection], pg_server: PostgresServer
) -> None:
    first, longer, shorter = pg_server.database(), pg_server.database(), pg_server.database()
    append(first, 3)
    append(longer, 5)
    append(shorter, 1)
    conn = copies["laptop"]
    mirror.pull(conn, first)
    for other in (longer, shorter):
        with pytest.raises(StoreError, match="was made from another store") as caught:
            mirror.pull(conn, other)
        assert type(caught.value) is StoreError
        assert where(other) in str(caught.value)
        assert copy_rows(conn) == server_rows(first)

    # Through the CLI a home keeps one copy per store: pointed at another store, it reads
    # that store's copy; only a store recreated at the same address is another log.
    home = tmp_path / "cli-home"
    shep("status", env=home_env(home, first), check=True)
    on_longer = shep("status", "--json", env=home_env(home, longer), check=True).stdout
    assert on_longer == shep("status", "--json", env=home_env(tmp_path / "new", longer)).stdout
    assert on_longer != shep("status", "--json", env=home_env(home, first)).stdout
    name = first.rsplit("/", 1)[1]
    with psycopg.connect(pg_server.url("postgres"), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    assert pg_server.database(name) == first
    append(first, 4)
    refused = shep("status", "--json", env=home_env(home, first))
    copy = Path(mirror.copy_file(str(home), first))
    assert one_error_line(refused) == (
        f"This home's copy of the log ({copy.name}, 3 events) was made from another "
        f"store than {where(first)}. Move it aside; the next command copies the log anew."
    )
    assert refused.stdout == ""


def test_a_copy_is_not_shown_as_a_database_that_has_no_log_yet(
    copies: dict[str, apsw.Connection], pg_server: PostgresServer
) -> None:
    first, fresh = pg_server.database(), pg_server.database()
    append(first, 3)
    conn = copies["laptop"]
    mirror.pull(conn, first)
    with pytest.raises(StoreError, match="was made from another store"):
        mirror.pull(conn, fresh)


def test_with_the_server_unreachable_status_and_logs_read_the_copy(
    tmp_path: Path, shep_home: Path, own_pg_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    pg_url = own_pg_server.database()
    monkeypatch.setenv("SHEP_DEMO_DELAY", "0")
    monkeypatch.setenv("SHEP_DATABASE_URL", pg_url)
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "app.py").write_text("print('hello')\n")
    shep("settings", "agent", "--agent", "demo", check=True)
    shep("run", "analyze-repository", "--repo", str(repo), check=True)
    status = json.loads(shep("status", "--json", check=True).stdout)
    run_id = str(status[0]["run_id"])
    logs = shep("logs", run_id[:8], check=True).stdout
    events = verify_pg_chain(pg_url).events

    own_pg_server.kill()
    away: dict[str, str] = {}
    notice = re.compile(
        rf"shep: Cannot reach the shared store at {re.escape(where(pg_url))} \(.+\)\. "
        r"Check that the server is up and reachable\. "
        rf"Showing this machine's copy of the log \(copied \d+s ago, {events} events\)\."
    )
    text = shep("status", env=away)
    assert text.returncode == 0, text.stderr
    assert notice.fullmatch(text.stderr.strip())
    assert len(text.stderr.splitlines()) == 1
    assert run_id[:8] in text.stdout
    assert "completed" in text.stdout

    as_json = shep("status", "--json", env=away)
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == status
    assert notice.fullmatch(as_json.stderr.strip())

    read = shep("logs", run_id[:8], env=away)
    assert read.returncode == 0, read.stderr
    assert read.stdout == logs
    assert notice.fullmatch(read.stderr.strip())


def test_a_home_that_never_copied_says_so_when_the_server_is_away(tmp_path: Path) -> None:
    port = closed_port()
    env = home_env(tmp_path / "new-home", f"postgresql://shep@127.0.0.1:{port}/team")
    result = shep("status", "--json", env=env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []
    assert result.stderr.strip().endswith(
        "Showing this machine's copy of the log (never copied, 0 events)."
    )
    assert len(result.stderr.splitlines()) == 1


def test_a_copy_pulled_twice_from_the_same_server_changes_nothing(
    copies: dict[str, apsw.Connection], pg_url: str
) -> None:
    """Settings events of a fixed stream, appended in one batch: copied in one pull, once."""
    with EventStore(pg_url) as store:
        store.append([changed(1, "5"), changed(2, "6")])
        store.append([created(uuid4())])
    conn = copies["laptop"]
    assert mirror.pull(conn, pg_url) == 3
    assert mirror.pull(conn, pg_url) == 0
    assert copy_rows(conn) == server_rows(pg_url)
