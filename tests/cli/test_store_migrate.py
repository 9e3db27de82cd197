"""`shep store migrate`: a home's SQLite log, with real runs, moved into an empty shared store.

Every row keeps its position, id, version, topic, state and chain hash; both
head hashes are printed and equal the SQLite chain's; the server's chain
verifies on its own and goes on from the migrated head. A target that already
holds events, a broken source, a URL that is not PostgreSQL or cannot be
reached: one line on stderr, nothing written. A password given on stdin
reaches no output and no file of the home. Once pointed at the store, the home
shows the same runs and logs as before.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from uuid import UUID, uuid4

import apsw
import psycopg
import pytest

from events.audit import open_log, verify_chain
from events.base import utc_now
from events.postgres_url import where
from events.postgres_verify import verify_pg_chain
from events.runs import RunCreated
from events.settings import SETTINGS_STREAM_ID, SettingChanged
from events.store import EventStore
from projections.mirror import copy_file
from tests.support.cli import shep
from tests.support.postgres_server import PostgresServer

ROWS = (
    "SELECT notification_id, originator_id, originator_version, topic, state, chain_hash "
    "FROM stored_events ORDER BY notification_id"
)

Row = tuple[int, str, int, str, bytes, bytes]


def server_rows(url: str) -> list[Row]:
    """The shared store's log, as plain values ([] when it has no table yet)."""
    with psycopg.connect(url) as conn:
        exists = conn.execute("SELECT to_regclass('stored_events') IS NOT NULL").fetchone()
        if not exists or not exists[0]:
            return []
        return [
            (int(p), str(o), int(v), str(t), bytes(s), bytes(h))
            for p, o, v, t, s, h in conn.execute(ROWS)
        ]


def sqlite_rows(path: Path) -> list[Row]:
    conn = open_log(path)
    try:
        return [
            (int(p), str(o), int(v), str(t), bytes(s), bytes(h))
            for p, o, v, t, s, h in conn.execute(ROWS)
        ]
    finally:
        conn.close()


def sqlite_head(path: Path) -> tuple[int, bytes]:
    conn = open_log(path)
    try:
        report = verify_chain(conn)
    finally:
        conn.close()
    assert report.ok
    return report.events, report.head_hash


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The failed command's only stderr line (no traceback), without ``shep: ``."""
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("shep: ")
    return lines[0].removeprefix("shep: ")


def closed_port() -> int:
    """A loopback port nothing listens on (bound a moment ago, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def with_password(url: str, password: str) -> str:
    assert url.startswith("postgresql://shep@")
    return url.replace("postgresql://shep@", f"postgresql://shep:{password}@", 1)


def shep_stdin(
    text: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``shep ARGS`` with ``text`` on standard input."""
    return subprocess.run(
        [sys.executable, "-m", "shep", *args],
        input=text,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=60,
        check=False,
    )


def created(run_id: UUID | None = None, version: int = 1) -> RunCreated:
    return RunCreated(
        originator_id=run_id or uuid4(),
        originator_version=version,
        timestamp=utc_now(),
        workflow="w",
        agent_type="demo",
        repo="/r",
        created_by="me",
    )


def changed(version: int, value: str) -> SettingChanged:
    return SettingChanged(
        originator_id=SETTINGS_STREAM_ID,
        originator_version=version,
        timestamp=utc_now(),
        key="heartbeat_interval",
        value=value,
        changed_by="me",
    )


def files_holding(root: Path, secret: str) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes())


@pytest.fixture
def home_with_runs(shep_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Two completed runs of analyze-repository with the demo agent, in the home's shep.db."""
    monkeypatch.setenv("SHEP_DEMO_DELAY", "0")
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "app.py").write_text("print('hello')\n")
    shep("settings", "agent", "--agent", "demo", check=True)
    for _ in range(2):
        ran = shep("run", "analyze-repository", "--repo", str(repo), check=True)
        assert "completed" in ran.stdout + ran.stderr
    runs = json.loads(shep("status", "--json", check=True).stdout)
    assert [r["status"] for r in runs] == ["completed", "completed"]
    return [str(r["run_id"]) for r in runs]


@pytest.fixture
def small_log(store: EventStore, db_path: Path) -> list[Row]:
    """A home's shep.db with four setting changes (no runs: nothing to orphan-check)."""
    for version, value in enumerate(("5", "6", "7", "8"), start=1):
        store.append([changed(version, value)])
    store.close()
    return sqlite_rows(db_path)


HEAD = re.compile(r"^(.+): (\d+) events verify\. Head hash: ([0-9a-f]{64})$")


def test_migrate_copies_every_row_and_both_heads_are_equal(
    home_with_runs: list[str], shep_home: Path, pg_url: str
) -> None:
    db = shep_home / "shep.db"
    local = sqlite_rows(db)
    count, head = sqlite_head(db)
    assert count == len(local) > 100  # two runs and the agent settings

    result = shep("store", "migrate", "--to", pg_url)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0] == (f"Copied {count} events from {db} to the shared store at {where(pg_url)}.")
    heads = [m.groups() for line in lines[1:3] if (m := HEAD.match(line))]
    assert heads == [
        (str(db), str(count), head.hex()),
        (where(pg_url), str(count), head.hex()),
    ]
    assert lines[3:] == [
        f"Next: point this home (and your team's) at it: shep settings store --url {pg_url}"
    ]

    # Position for position: id, originator, version, topic, state and hash.
    assert server_rows(pg_url) == local
    on_server = verify_pg_chain(pg_url)
    assert on_server.ok
    assert (on_server.events, on_server.head_hash) == (count, head)
    # The source was only read.
    assert sqlite_rows(db) == local

    # The server's chain goes on from the migrated head.
    with EventStore(pg_url) as shared:
        assert shared.append([created()]) == [count + 1]
    after = verify_pg_chain(pg_url)
    assert after.ok
    assert after.events == count + 1
    assert server_rows(pg_url)[:count] == local


@pytest.mark.slow
def test_the_home_reads_the_migrated_runs_from_the_shared_store(
    home_with_runs: list[str], shep_home: Path, pg_url: str
) -> None:
    status_before = json.loads(shep("status", "--json", check=True).stdout)
    logs_before = {run: shep("logs", run, check=True).stdout for run in home_with_runs}
    assert all("run.created: analyze-repository" in text for text in logs_before.values())
    count, _ = sqlite_head(shep_home / "shep.db")

    shep("store", "migrate", "--to", pg_url, check=True)
    pointed = shep("settings", "store", "--url", pg_url)
    assert pointed.returncode == 0, pointed.stderr
    assert pointed.stdout.splitlines() == [
        f"store: shared PostgreSQL {pg_url} (from shep settings store)",
        f"copy: {copy_file(str(shep_home), pg_url)} ({count} events)",
    ]

    status_after = shep("status", "--json")
    assert status_after.returncode == 0, status_after.stderr
    assert status_after.stderr == ""
    assert json.loads(status_after.stdout) == status_before
    for run, text in logs_before.items():
        assert shep("logs", run, check=True).stdout == text
    # Read from the copy of the shared log, not from shep.db: move shep.db away.
    (shep_home / "shep.db").rename(shep_home / "shep.db.moved")
    assert json.loads(shep("status", "--json", check=True).stdout) == status_before


def test_migrate_without_to_uses_the_store_the_home_points_at(
    home_with_runs: list[str], shep_home: Path, pg_url: str
) -> None:
    """Pointed first (the store's tables are created, empty), then migrated: no "Next:"."""
    status_before = json.loads(shep("status", "--json", check=True).stdout)
    shep("settings", "store", "--url", pg_url, check=True)
    assert json.loads(shep("status", "--json", check=True).stdout) == []  # the store is empty

    result = shep("store", "migrate")
    assert result.returncode == 0, result.stderr
    assert "Next:" not in result.stdout
    assert server_rows(pg_url) == sqlite_rows(shep_home / "shep.db")
    assert json.loads(shep("status", "--json", check=True).stdout) == status_before


def test_a_target_that_holds_events_is_refused_and_nothing_is_written(
    small_log: list[Row], pg_url: str
) -> None:
    with EventStore(pg_url) as shared:
        shared.append([created()])
    held = server_rows(pg_url)

    result = shep("store", "migrate", "--to", pg_url)
    assert one_error_line(result) == (
        f"The shared store at {where(pg_url)} already holds 1 event: "
        "migrate copies into an empty store only."
    )
    assert result.stdout == ""
    assert server_rows(pg_url) == held
    assert verify_pg_chain(pg_url).events == 1


def test_a_source_whose_chain_is_broken_is_not_migrated(
    small_log: list[Row], db_path: Path, pg_url: str
) -> None:
    conn = apsw.Connection(str(db_path))
    conn.execute("DROP TRIGGER stored_events_no_update")
    conn.execute(
        "UPDATE stored_events SET state = CAST(state || x'20' AS BLOB) WHERE notification_id = 3"
    )
    conn.close()

    result = shep("store", "migrate", "--to", pg_url)
    assert result.returncode == 4
    line = one_error_line(result)
    assert line == (
        f"{db_path} does not verify at position 3 (stored hash does not match the event and "
        "its predecessor (the event or an earlier hash was edited)): not migrated. "
        "Run `shep audit verify`."
    )
    assert server_rows(pg_url) == []


def test_a_password_given_on_stdin_reaches_no_output_and_no_file(
    small_log: list[Row], shep_home: Path, pg_server: PostgresServer
) -> None:
    secret = "Pw-0f-the-Team-9183"
    url = with_password(pg_server.database(), secret)
    args = ("store", "migrate", "--to-stdin")
    assert all(secret not in arg for arg in args)  # the process list never shows it

    result = shep_stdin(url + "\n", *args)
    assert result.returncode == 0, result.stderr
    assert secret not in result.stdout + result.stderr
    assert f"shep settings store --url postgresql://shep:***@{where(url)}" in result.stdout
    assert server_rows(url) == small_log
    assert files_holding(shep_home, secret) == []

    # As a URL parameter too.
    url = pg_server.database() + f"?password={secret}"
    result = shep_stdin(url + "\n", *args)
    assert result.returncode == 0, result.stderr
    assert secret not in result.stdout + result.stderr
    assert "?password=***" in result.stdout
    assert server_rows(url) == small_log
    assert files_holding(shep_home, secret) == []


def test_a_password_on_argv_is_refused_before_anything_is_written(
    small_log: list[Row], shep_home: Path, pg_server: PostgresServer
) -> None:
    secret = "Pw-0f-the-Team-9183"
    url = with_password(pg_server.database(), secret)
    for target in (url, pg_server.database() + f"?sslmode=disable&password={secret}"):
        result = shep("store", "migrate", "--to", target)
        line = one_error_line(result)
        assert line.startswith("--to must not hold a password")
        assert secret not in result.stdout + result.stderr
        assert server_rows(target) == []
    assert files_holding(shep_home, secret) == []

    both = shep_stdin(url + "\n", "store", "migrate", "--to", "postgresql://x@h/db", "--to-stdin")
    assert one_error_line(both) == "Give --to or --to-stdin, not both."


@pytest.mark.parametrize(
    ("target", "on_stdin", "expected"),
    [
        ("mysql://shep@db.internal/team", False, "mysql://shep@db.internal/team"),
        ("https://db.internal/team", False, "https://db.internal/team"),
        ("shep.db", False, "shep.db"),
        ("mysql://shep:Hidden-77@db/team", True, "mysql://shep:***@db/team"),
    ],
)
def test_a_target_that_is_not_postgresql_is_one_line(
    small_log: list[Row], shep_home: Path, target: str, on_stdin: bool, expected: str
) -> None:
    if on_stdin:
        result = shep_stdin(target + "\n", "store", "migrate", "--to-stdin")
    else:
        result = shep("store", "migrate", "--to", target)
    assert one_error_line(result) == f"Not a PostgreSQL URL: {expected} (postgresql://...)."
    assert "Hidden-77" not in result.stdout + result.stderr
    assert not (shep_home / "store").exists()
    assert not list(shep_home.glob("shared-cache*"))


@pytest.mark.slow
def test_an_unreachable_server_is_one_line_and_nothing_is_saved(
    small_log: list[Row], shep_home: Path
) -> None:
    port = closed_port()
    result = shep("store", "migrate", "--to", f"postgresql://shep@127.0.0.1:{port}/team")
    line = one_error_line(result)
    assert line.startswith(f"Cannot reach the shared store at 127.0.0.1:{port}/team (")
    assert line.endswith("Check that the server is up and reachable.")
    assert not (shep_home / "store").exists()
    assert not list(shep_home.glob("shared-cache*"))
    assert sqlite_rows(shep_home / "shep.db") == small_log


@pytest.mark.slow
def test_a_missing_database_or_home_is_one_line(shep_home: Path, pg_server: PostgresServer) -> None:
    nothing = shep("store", "migrate", "--to", pg_server.database())
    assert one_error_line(nothing) == (
        f"No event store at {shep_home / 'shep.db'}: nothing to migrate."
    )
    shep_home.mkdir(mode=0o700)
    EventStore(shep_home / "shep.db").close()
    missing = shep("store", "migrate", "--to", pg_server.url("no_such_db"))
    assert f"at 127.0.0.1:{pg_server.port}/no_such_db" in one_error_line(missing)


@pytest.mark.slow
def test_a_server_killed_during_the_copy_is_one_line_and_a_retry_copies_it_all(
    small_log: list[Row], shep_home: Path, own_pg_server: PostgresServer
) -> None:
    """The server dies (SIGKILL) while migrate's INSERT runs: one line, exit 1, saying
    that nothing was copied and to retry; the target holds nothing (the copy is one
    transaction), the source is untouched, and migrate run again copies everything.
    """
    url = own_pg_server.database()
    EventStore(url).close()  # the tables, empty: the copy inserts into them
    with psycopg.connect(url, autocommit=True) as conn:
        # Holds migrate's INSERT on the server, mid-copy, until the server is killed.
        conn.execute(
            "CREATE FUNCTION hold_copy() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN PERFORM pg_sleep(60); RETURN NULL; END $$"
        )
        conn.execute(
            "CREATE TRIGGER hold_copy BEFORE INSERT ON stored_events "
            "FOR EACH STATEMENT EXECUTE FUNCTION hold_copy()"
        )
    migrate = subprocess.Popen(
        [sys.executable, "-m", "shep", "store", "migrate", "--to", url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not _copy_in_flight(url):
            assert migrate.poll() is None, migrate.communicate()
            assert time.monotonic() < deadline, "migrate never started its copy"
            time.sleep(0.1)
        own_pg_server.kill()
        out, err = migrate.communicate(timeout=60)
    finally:
        if migrate.poll() is None:
            migrate.kill()
    result = subprocess.CompletedProcess(migrate.args, migrate.returncode, out, err)
    line = one_error_line(result)
    assert result.returncode == 1
    assert line.startswith(f"Lost the shared store at {where(url)} during the copy (")
    assert line.endswith("nothing was copied; retry `shep store migrate` once it is back.")
    assert out == ""

    own_pg_server.revive()
    assert server_rows(url) == []  # the transaction died with the server
    assert sqlite_rows(shep_home / "shep.db") == small_log
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TRIGGER hold_copy ON stored_events")
    again = shep("store", "migrate", "--to", url)
    assert again.returncode == 0, again.stderr
    assert server_rows(url) == small_log


def _copy_in_flight(url: str) -> bool:
    """Whether a backend is inside migrate's INSERT into stored_events."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
            "AND query LIKE 'INSERT INTO stored_events%%'"
        ).fetchone()
    return bool(row and row[0])
