"""`shep store migrate`, `shep settings store` and a home's copy of a shared log, as run by a user.

A home with a real run (the fake claude) moves its log into an empty
database: every row keeps its position and hash, both heads are printed and
equal, and the home reads the same runs from the shared store. A password in
the URL never reaches the output, the home's files nor the log; bad input is
one line on stderr. The copy a home reads takes nothing on trust: a server
whose chain was tampered with, or another store than the one it was copied
from, is refused; a server away leaves status on the copy, saying how old.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
from pathlib import Path

import psycopg
import pytest

from events.audit import open_log, verify_chain
from events.postgres_verify import verify_pg_chain
from projections.mirror import copy_file
from tests.shep.runs.conftest import agent_log, fake_claude, repo
from tests.support.cli import shep
from tests.support.postgres_server import PostgresServer

__all__ = ["agent_log", "fake_claude", "repo"]

ROWS = (
    "SELECT notification_id, originator_id, originator_version, topic, state, chain_hash "
    "FROM stored_events ORDER BY notification_id"
)


def server_rows(url: str) -> list[tuple[object, ...]]:
    with psycopg.connect(url) as conn:
        return [(p, o, v, t, bytes(s), bytes(h)) for p, o, v, t, s, h in conn.execute(ROWS)]


def sqlite_rows(path: Path) -> list[tuple[object, ...]]:
    conn = open_log(path)
    try:
        return [(p, o, v, t, bytes(s), bytes(h)) for p, o, v, t, s, h in conn.execute(ROWS)]
    finally:
        conn.close()


def one_error_line(result: object) -> str:
    stderr = str(getattr(result, "stderr", ""))
    assert getattr(result, "returncode", 0) != 0
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("shep: ")
    return lines[0]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def home_with_a_run(repo: Path, fake_claude: Path, shep_home: Path) -> str:
    result = shep("run", "analyze-repository", "--repo", str(repo), check=True)
    assert "completed" in result.stderr
    runs = json.loads(shep("status", "--json", check=True).stdout)
    return str(runs[0]["run_id"])


def test_migrate_copies_the_log_position_for_position_and_the_home_reads_it(
    home_with_a_run: str, shep_home: Path, pg_url: str
) -> None:
    run_id = home_with_a_run
    status_before = json.loads(shep("status", "--json", check=True).stdout)
    logs_before = shep("logs", run_id[:8], check=True).stdout

    result = shep("store", "migrate", "--to", pg_url)
    assert result.returncode == 0, result.stderr
    heads = re.findall(r"(\d+) events verify\. Head hash: ([0-9a-f]{64})", result.stdout)
    assert len(heads) == 2
    assert heads[0] == heads[1]
    assert f"Next: point this home (and your team's) at it: shep settings store --url {pg_url}" in (
        result.stdout
    )

    local = sqlite_rows(shep_home / "shep.db")
    assert server_rows(pg_url) == local
    on_server = verify_pg_chain(pg_url)
    conn = open_log(shep_home / "shep.db")
    try:
        on_sqlite = verify_chain(conn)
    finally:
        conn.close()
    assert on_server.ok
    assert on_server.events == len(local) == int(heads[0][0])
    assert on_server.head_hash == on_sqlite.head_hash
    assert on_server.head_hash.hex() == heads[0][1]

    pointed = shep("settings", "store", "--url", pg_url, "--json")
    assert pointed.returncode == 0, pointed.stderr
    shown = json.loads(pointed.stdout)
    assert shown["store"] == "postgresql"
    assert shown["copied_events"] == len(local)
    assert (shep_home / "store").stat().st_mode & 0o777 == 0o600
    status_after = json.loads(shep("status", "--json", check=True).stdout)
    assert [(r["run_id"], r["status"]) for r in status_after] == [
        (r["run_id"], r["status"]) for r in status_before
    ]
    assert shep("logs", run_id[:8], check=True).stdout == logs_before
    verified = shep("audit", "verify", check=True).stdout
    assert f"This machine's copy ({len(local)} events) matches" in verified

    # A second migrate into the now non-empty store is refused and writes nothing.
    again = shep("store", "migrate", "--to", pg_url)
    assert "already holds" in one_error_line(again)
    assert len(server_rows(pg_url)) == len(local)


def test_a_password_in_the_url_never_leaves_the_store_file(
    home_with_a_run: str, shep_home: Path, pg_server: PostgresServer
) -> None:
    secret = "s3cret-Pw-4711"
    url = pg_server.database().replace("postgresql://shep@", f"postgresql://shep:{secret}@")

    refused = shep("store", "migrate", "--to", url)
    assert "must not hold a password" in one_error_line(refused)
    assert secret not in refused.stderr
    refused = shep("settings", "store", "--url", url)
    assert "must not hold a password" in one_error_line(refused)

    outputs = []
    for args in (("store", "migrate", "--to-stdin"), ("settings", "store", "--url-stdin")):
        result = shep_with_stdin(url + "\n", *args)
        assert result.returncode == 0, result.stderr
        outputs += [result.stdout, result.stderr]
    for args in (("status", "--json"), ("settings", "store", "--json"), ("settings", "show")):
        result = shep(*args, check=True)
        outputs += [result.stdout, result.stderr]
    outputs.append(shep("audit", "verify", check=True).stdout)
    assert all(secret not in text for text in outputs)

    # Only $SHEP_HOME/store (0600) holds it; the copy, the logs and the log itself do not.
    holding = [p for p in shep_home.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert holding == [shep_home / "store"]
    assert (shep_home / "store").stat().st_mode & 0o777 == 0o600
    assert all(secret.encode() not in row[4] for row in server_rows(url))


def shep_with_stdin(text: str, *args: str) -> object:
    import os
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "shep", *args],
        input=text,
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=60,
        check=False,
    )


@pytest.mark.slow
def test_bad_targets_are_one_line_and_save_nothing(
    shep_home: Path, pg_server: PostgresServer
) -> None:
    unreachable = f"postgresql://shep@127.0.0.1:{closed_port()}/team"
    cases = [
        (("store", "migrate", "--to", "mysql://x@h/db"), "Not a PostgreSQL URL"),
        (("settings", "store", "--url", "mysql://x@h/db"), "Not a PostgreSQL URL"),
        (("settings", "store", "--url", unreachable), "Cannot reach the shared store"),
        (("settings", "store", "--url", pg_server.url("no_such_db")), "no_such_db"),
        (("settings", "store", "--url", unreachable, "--local"), "Give one of"),
        (("store", "migrate", "--to", pg_server.database()), "nothing to migrate"),
    ]
    for args, expected in cases:
        assert expected in one_error_line(shep(*args)), args
    assert not (shep_home / "store").exists()
    assert json.loads(shep("settings", "store", "--json", check=True).stdout)["store"] == "sqlite"


def test_the_environment_wins_over_the_saved_store_and_local_goes_back(
    shep_home: Path, pg_server: PostgresServer
) -> None:
    saved, from_env = pg_server.database(), pg_server.database()
    shep("settings", "store", "--url", saved, check=True)
    shown = json.loads(shep("settings", "store", "--json", check=True).stdout)
    assert (shown["url"], shown["from"]) == (saved, "shep settings store")
    env = {"SHEP_DATABASE_URL": from_env}
    shown = json.loads(shep("settings", "store", "--json", env=env, check=True).stdout)
    assert (shown["url"], shown["from"]) == (from_env, "SHEP_DATABASE_URL")

    shep("settings", "agent", "--agent", "demo", env=env, check=True)
    with psycopg.connect(from_env) as conn:
        assert conn.execute("SELECT count(*) FROM stored_events").fetchone() == (1,)
    with psycopg.connect(saved) as conn:
        assert conn.execute("SELECT count(*) FROM stored_events").fetchone() == (0,)

    back = shep("settings", "store", "--local", "--json", check=True)
    assert json.loads(back.stdout)["store"] == "sqlite"
    assert not (shep_home / "store").exists()


def test_a_tampered_server_and_another_store_are_refused(
    shep_home: Path, pg_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, other = pg_server.database(), pg_server.database()
    for n, url in enumerate((first, other)):
        env = {"SHEP_DATABASE_URL": url, "SHEP_HOME": str(shep_home.parent / f"writer-{n}")}
        shep("settings", "agent", "--agent", "demo", env=env, check=True)
        shep("settings", "set", "heartbeat_interval", "5", env=env, check=True)
    monkeypatch.setenv("SHEP_DATABASE_URL", first)
    assert shep("status", "--json", check=True).stdout.strip() == "[]"  # the copy is made

    # The first store's copy put where the other's would be: not continued from the other.
    shutil.copyfile(copy_file(str(shep_home), first), copy_file(str(shep_home), other))
    refused = shep("status", env={"SHEP_DATABASE_URL": other})
    assert "was made from another store" in one_error_line(refused)

    # An event edited on the server (its trigger disabled by the owner): not copied.
    with psycopg.connect(first, autocommit=True) as conn:
        conn.execute("ALTER TABLE stored_events DISABLE TRIGGER USER")
        conn.execute(
            "UPDATE stored_events SET state = state || '\\x20'::bytea WHERE notification_id = 2"
        )
    fresh = {"SHEP_HOME": str(shep_home.parent / "fresh-home")}
    broken = shep("status", env=fresh)
    assert "breaks its hash chain at position 2" in one_error_line(broken)
    assert not verify_pg_chain(first).ok


@pytest.mark.slow
def test_with_the_server_away_status_reads_the_copy_and_says_how_old(
    home_with_a_run: str, shep_home: Path, own_pg_server: PostgresServer
) -> None:
    url = own_pg_server.database()
    shep("store", "migrate", "--to", url, check=True)
    shep("settings", "store", "--url", url, check=True)
    before = json.loads(shep("status", "--json", check=True).stdout)
    own_pg_server.kill()

    offline = shep("status", "--json")
    assert offline.returncode == 0, offline.stderr
    assert json.loads(offline.stdout) == before
    line = offline.stderr.strip()
    assert len(line.splitlines()) == 1
    assert line.startswith(
        f"shep: Cannot reach the shared store at 127.0.0.1:{own_pg_server.port}/"
    )
    assert re.search(
        r"Showing this machine's copy of the log \(copied \d+s ago, \d+ events\)\.$", line
    )
    text = shep("status")
    assert text.returncode == 0
    assert home_with_a_run[:8] in text.stdout
