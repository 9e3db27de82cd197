"""`shep settings store`: where a home's log lives, chosen, shown and taken back.

``--url`` reaches the server (and creates its tables) before saving the URL in
``$SHEP_HOME/store`` (0600); ``--local`` goes back to shep.db; a password on
argv, a URL that is not PostgreSQL or a server that cannot be reached is one
line on stderr and saves nothing; ``SHEP_DATABASE_URL`` wins over the saved
URL (an empty one does not count).
"""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path

import apsw
import psycopg
import pytest

from events.postgres_url import where
from events.store import EventStore
from projections.mirror import copy_file
from shep.home.secrets import load_store_url
from tests.cli.test_store_migrate import (
    changed,
    closed_port,
    files_holding,
    one_error_line,
    server_rows,
    shep_stdin,
    sqlite_rows,
    with_password,
)
from tests.support.cli import shep
from tests.support.postgres_server import PostgresServer


def saved(home: Path) -> dict[str, object]:
    """The store file's content, after checking it is the owner's alone."""
    path = home / "store"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    return dict(json.loads(path.read_text()))


def shown(env: dict[str, str] | None = None) -> dict[str, object]:
    return dict(json.loads(shep("settings", "store", "--json", env=env, check=True).stdout))


def has_log_table(url: str) -> bool:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT to_regclass('stored_events') IS NOT NULL").fetchone()
    return bool(row and row[0])


def test_a_url_is_checked_saved_0600_and_shown(shep_home: Path, pg_url: str) -> None:
    assert shown() == {"store": "sqlite", "path": str(shep_home / "shep.db")}
    assert not has_log_table(pg_url)

    result = shep("settings", "store", "--url", pg_url)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    copy = copy_file(str(shep_home), pg_url)
    assert result.stdout.splitlines() == [
        f"store: shared PostgreSQL {pg_url} (from shep settings store)",
        f"copy: {copy} (0 events)",
    ]
    assert saved(shep_home) == {"url": pg_url}
    assert load_store_url(shep_home) == pg_url
    assert has_log_table(pg_url)  # reached, and its tables made, before saving

    data = shown()
    age = data.pop("copied_seconds_ago")
    assert isinstance(age, float)
    assert 0 <= age < 30
    assert data == {
        "store": "postgresql",
        "url": pg_url,
        "from": "shep settings store",
        "copy": str(copy),
        "copied_events": 0,
    }
    # Without options it shows the same, in text.
    assert shep("settings", "store", check=True).stdout == result.stdout

    # What the home writes now goes to the server, not to shep.db.
    shep("settings", "set", "heartbeat_interval", "5", check=True)
    assert [row[3] for row in server_rows(pg_url)] == ["events.settings:SettingChanged"]
    assert not (shep_home / "shep.db").exists()
    assert shown()["copied_events"] == 1


def test_local_goes_back_to_the_home_s_own_file(shep_home: Path, pg_url: str) -> None:
    shep("settings", "set", "heartbeat_interval", "5", check=True)  # into shep.db
    shep("settings", "store", "--url", pg_url, check=True)
    shep("settings", "set", "heartbeat_interval", "6", check=True)  # onto the server

    back = shep("settings", "store", "--local")
    assert back.returncode == 0, back.stderr
    assert back.stdout == f"store: this home's own SQLite file {shep_home / 'shep.db'}\n"
    assert not (shep_home / "store").exists()
    assert shown() == {"store": "sqlite", "path": str(shep_home / "shep.db")}

    shep("settings", "set", "heartbeat_interval", "7", check=True)
    assert len(sqlite_rows(shep_home / "shep.db")) == 2
    assert len(server_rows(pg_url)) == 1
    values = json.loads(shep("settings", "show", "--json", check=True).stdout)
    assert values["heartbeat_interval"] == 7.0


def test_a_password_on_argv_is_refused_and_nothing_is_saved(
    shep_home: Path, pg_server: PostgresServer
) -> None:
    secret = "Pw-0f-the-Team-9183"
    base = pg_server.database()
    for url in (with_password(base, secret), f"{base}?password={secret}"):
        result = shep("settings", "store", "--url", url)
        assert one_error_line(result) == (
            "--url must not hold a password: it would show in the process list. "
            "Use PGPASSWORD, ~/.pgpass, or pipe the URL to --url-stdin."
        )
        assert secret not in result.stdout + result.stderr
    assert not (shep_home / "store").exists()
    assert not has_log_table(base)
    assert shown()["store"] == "sqlite"

    # On stdin it is taken, kept in the 0600 file only, and shown redacted.
    url = with_password(base, secret)
    taken = shep_stdin(url + "\n", "settings", "store", "--url-stdin")
    assert taken.returncode == 0, taken.stderr
    assert f"store: shared PostgreSQL postgresql://shep:***@{where(url)}" in taken.stdout
    assert secret not in taken.stdout + taken.stderr
    assert saved(shep_home) == {"url": url}
    data = shown()
    assert data["url"] == f"postgresql://shep:***@{where(url)}"
    assert files_holding(shep_home, secret) == [shep_home / "store"]


def test_two_sources_at_once_are_refused(shep_home: Path, pg_url: str) -> None:
    for args in (("--url", pg_url, "--local"), ("--url", pg_url, "--url-stdin")):
        result = shep_stdin(pg_url + "\n", "settings", "store", *args)
        assert one_error_line(result) == "Give one of --url, --url-stdin and --local."
    assert not (shep_home / "store").exists()


NOT_POSTGRESQL = ["mysql://shep@db/team", "sqlite:shep.db", "sqlite:///srv/shep.db", "db/team"]


@pytest.mark.parametrize("url", NOT_POSTGRESQL)
def test_a_url_that_is_not_postgresql_is_refused(shep_home: Path, url: str) -> None:
    result = shep("settings", "store", "--url", url)
    assert one_error_line(result) == f"Not a PostgreSQL URL: {url} (postgresql://...)."
    assert not (shep_home / "store").exists()


@pytest.mark.parametrize("url", NOT_POSTGRESQL)
@pytest.mark.parametrize("args", [("status",), ("settings", "store", "--local")])
def test_a_database_url_in_the_environment_that_is_not_postgresql_is_refused(
    shep_home: Path, url: str, args: tuple[str, ...]
) -> None:
    """Every command names the variable and how to go back to SQLite; nothing is written."""
    result = shep(*args, env={"SHEP_DATABASE_URL": url})
    assert result.returncode == 2
    assert one_error_line(result) == (
        f"SHEP_DATABASE_URL is not a PostgreSQL URL: {url} (postgresql://...). "
        "Unset it to keep the log in this home's SQLite file."
    )
    assert not shep_home.exists() or not any(shep_home.iterdir())


@pytest.mark.slow
def test_an_unreachable_server_is_refused_and_the_saved_url_is_kept(
    shep_home: Path, pg_url: str
) -> None:
    shep("settings", "store", "--url", pg_url, check=True)
    before = (shep_home / "store").read_bytes()
    port = closed_port()

    result = shep("settings", "store", "--url", f"postgresql://shep@127.0.0.1:{port}/team")
    line = one_error_line(result)
    assert line.startswith(f"Cannot reach the shared store at 127.0.0.1:{port}/team (")
    assert line.endswith("Check that the server is up and reachable.")
    assert result.stdout == ""
    assert (shep_home / "store").read_bytes() == before
    assert shown()["url"] == pg_url


@pytest.mark.slow
def test_a_mistyped_database_is_named_as_missing_and_nothing_is_saved(
    shep_home: Path, pg_server: PostgresServer
) -> None:
    """The pool only times out; the one line still says the database does not exist."""
    url = pg_server.url("tema")
    result = shep("settings", "store", "--url", url)
    line = one_error_line(result)
    assert line.startswith(f"The shared store at {where(url)} has no such database (")
    assert 'database "tema" does not exist' in line
    assert not (shep_home / "store").exists()


def test_the_environment_wins_over_the_saved_url(
    shep_home: Path, pg_server: PostgresServer
) -> None:
    kept, from_env = pg_server.database(), pg_server.database()
    shep("settings", "store", "--url", kept, check=True)
    env = {"SHEP_DATABASE_URL": from_env}

    data = shown(env)
    assert (data["url"], data["from"]) == (from_env, "SHEP_DATABASE_URL")
    text = shep("settings", "store", env=env, check=True).stdout
    assert text.startswith(f"store: shared PostgreSQL {from_env} (from SHEP_DATABASE_URL)\n")
    shep("settings", "set", "heartbeat_interval", "5", env=env, check=True)
    assert len(server_rows(from_env)) == 1
    assert server_rows(kept) == []

    # An empty variable does not count: the saved URL is used.
    data = shown({"SHEP_DATABASE_URL": ""})
    assert (data["url"], data["from"]) == (kept, "shep settings store")

    # --local forgets the saved URL; the variable still wins while it is set.
    local = shep("settings", "store", "--local", "--json", env=env, check=True)
    assert json.loads(local.stdout)["url"] == from_env
    assert not (shep_home / "store").exists()
    assert shown()["store"] == "sqlite"


def test_a_damaged_store_file_is_one_line(shep_home: Path) -> None:
    shep_home.mkdir(mode=0o700)
    (shep_home / "store").write_text("not json")
    result = shep("status")
    assert one_error_line(result) == (
        f"{shep_home / 'store'} is damaged. "
        "Point this home at its store again: shep settings store --url URL"
    )


def test_a_damaged_store_file_is_repaired_by_the_command_it_names(
    shep_home: Path, pg_url: str
) -> None:
    shep_home.mkdir(mode=0o700)
    (shep_home / "store").write_text("not json")
    result = shep("settings", "store", "--url", pg_url)
    assert result.returncode == 0, result.stderr
    assert saved(shep_home) == {"url": pg_url}


def test_a_home_moved_between_stores_keeps_a_copy_of_each(
    shep_home: Path, pg_server: PostgresServer
) -> None:
    """Pointed at another store and back, a home reads each store's own copy: the second
    store's log shows at once, the first's is as it was when the home comes back, and
    nothing says a copy "was made from another store"."""
    first, second = pg_server.database(), pg_server.database()
    shep("settings", "store", "--url", first, check=True)
    shep("settings", "set", "heartbeat_interval", "5", check=True)

    moved = shep("settings", "store", "--url", second)
    assert moved.returncode == 0, moved.stderr
    assert moved.stderr == ""
    second_copy = copy_file(str(shep_home), second)
    assert moved.stdout.splitlines()[1] == f"copy: {second_copy} (0 events)"
    shep("settings", "set", "heartbeat_interval", "6", check=True)
    assert (
        json.loads(shep("settings", "show", "--json", check=True).stdout)["heartbeat_interval"]
        == 6.0
    )

    local = shep("settings", "store", "--local")
    assert local.returncode == 0, local.stderr
    back = shep("settings", "store", "--url", first)
    assert back.returncode == 0, back.stderr
    assert back.stdout.splitlines()[1] == f"copy: {copy_file(str(shep_home), first)} (1 event)"
    assert (
        json.loads(shep("settings", "show", "--json", check=True).stdout)["heartbeat_interval"]
        == 5.0
    )
    assert [row[3] for row in server_rows(first)] == ["events.settings:SettingChanged"]
    assert len(server_rows(second)) == 1


def test_an_older_shep_s_copy_of_the_store_is_taken_over(
    shep_home: Path, own_pg_server: PostgresServer
) -> None:
    """The single ``shared-cache.db`` an older shep kept is taken over when it is a copy of
    the home's store: the home reads it even with the server away, and it is removed with
    the files beside it. One of another store is left alone, and the store's copy is made
    anew from the server."""
    url, other = own_pg_server.database(), own_pg_server.database()
    shep("settings", "store", "--url", url, check=True)
    for value in ("5", "6"):
        shep("settings", "set", "heartbeat_interval", value, check=True)
    assert shown()["copied_events"] == 2
    copy = Path(copy_file(str(shep_home), url))
    legacy = shep_home / "shared-cache.db"
    copy.rename(legacy)
    (shep_home / f"{copy.stem}.written").rename(shep_home / "shared-cache.written")
    rows = server_rows(url)

    own_pg_server.kill()  # what the home shows now, it read from the older copy
    away = shep("status", "--json")
    assert away.returncode == 0, away.stderr
    assert away.stdout == "[]\n"
    assert f"Cannot reach the shared store at {where(url)}" in away.stderr
    assert "Showing this machine's copy of the log (copied " in away.stderr
    assert away.stderr.rstrip().endswith(", 2 events).")
    assert sorted(p.name for p in shep_home.glob("shared-cache*")) == sorted(
        [copy.name, f"{copy.stem}.written"]
    )
    conn = apsw.Connection(str(copy))
    try:
        copied = conn.execute("SELECT notification_id, chain_hash FROM stored_events").fetchall()
    finally:
        conn.close()
    assert [(int(n), bytes(h)) for n, h in copied] == [(row[0], row[5]) for row in rows]

    # A copy of another store is not taken: left as it is, and this store's copy made anew.
    own_pg_server.revive()
    copy.rename(legacy)
    on_other = shown({"SHEP_DATABASE_URL": other})
    assert (on_other["copy"], on_other["copied_events"]) == (copy_file(str(shep_home), other), 0)
    assert legacy.exists()
    assert not copy.exists()


def test_settings_show_with_the_server_away(shep_home: Path, own_pg_server: PostgresServer) -> None:
    """With the shared store away, `shep settings show`, `flags` and `workflow` read this
    home's copy, as status does: the values recorded on the server last copied, and one
    line saying the server is away (they failed with that line before)."""
    url = own_pg_server.database()
    shep("settings", "store", "--url", url, check=True)
    shep("settings", "agent", "--agent", "demo", check=True)
    shep("settings", "set", "heartbeat_interval", "7", check=True)
    shep("settings", "flags", "enable", "collaboration", check=True)
    online = {
        args: shep("settings", *args, check=True).stdout
        for args in (("show", "--json"), ("flags", "--json"), ("workflow", "--json"))
    }
    assert json.loads(online["show", "--json"])["heartbeat_interval"] == 7.0
    assert json.loads(online["show", "--json"])["agent_type"] == "demo"

    own_pg_server.kill()
    for args, before in online.items():
        away = shep("settings", *args)
        assert away.returncode == 0, away.stderr
        assert away.stdout == before
        assert len(away.stderr.splitlines()) == 1
        assert away.stderr.startswith(f"shep: Cannot reach the shared store at {where(url)} (")
        assert re.search(
            r"Showing this machine's copy of the log \(copied \d+s ago, 3 events\)\.\n$",
            away.stderr,
        )


def test_settings_work_on_a_copy_that_cannot_be_read(
    shep_home: Path, pg_server: PostgresServer
) -> None:
    """The saved store was recreated at the same address (another log under its name): the
    home's copy is refused by every command, but `shep settings store` still moves the
    home, back to its own shep.db here, which every command then reads."""
    url = pg_server.database()
    shep("settings", "store", "--url", url, check=True)
    shep("settings", "set", "heartbeat_interval", "5", check=True)
    assert shown()["copied_events"] == 1
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(pg_server.url("postgres"), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    assert pg_server.database(name) == url
    with EventStore(url) as store:
        store.append([changed(1, "6")])
    refused = shep("status")
    assert "was made from another store" in one_error_line(refused)

    back = shep("settings", "store", "--local")
    assert back.returncode == 0, back.stderr
    assert back.stdout == f"store: this home's own SQLite file {shep_home / 'shep.db'}\n"
    assert shep("status", check=True).stdout.startswith("No runs yet.")
