"""The store's schema: an older store is migrated forward once, after a copy; a newer one is
never written; a migration killed anywhere leaves the old store or the new one.

The old stores are real: written by shep 0.1.0 (``tests/events/stores``), made
bigger, for the kills, by appending to them through the 0.1.0 layout's
recorder (which migrates nothing).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from uuid import uuid4

import apsw
import pytest

from events import versions
from events.audit import open_log, verify_chain
from events.base import utc_now
from events.errors import StoreUnavailableError
from events.mapper import MsgspecMapper
from events.migrations import read_meta, user_version
from events.runs import AgentOutputRecorded
from events.sqlite import ApswProcessRecorder
from events.sqlite_datastore import ApswDatastore
from events.store import EventStore
from tests.events.old_stores import EVENTS_0_1_0, HEAD_0_1_0, unpack_0_1_0
from tests.support.cli import shep

ROOT = Path(__file__).resolve().parents[2]


def _schema(db: Path) -> tuple[int, dict[str, str]]:
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return user_version(conn), read_meta(conn)
    finally:
        conn.close()


def _head(db: Path) -> tuple[int, bytes]:
    """How many events the store holds and its head hash, after verifying the whole chain."""
    conn = open_log(db)
    try:
        report = verify_chain(conn)
    finally:
        conn.close()
    assert report.ok, report.problem
    return report.events, report.head_hash


def test_an_old_store_is_migrated_once_after_a_copy_is_kept(shep_home: Path) -> None:
    """Opening 0.1.0's store migrates it to schema 2 once: a copy is kept first as
    ``shep.db.bak-0.1.0`` (the old store, whole), one line says so, the events are
    untouched, and the next opening changes nothing and says nothing."""
    db = unpack_0_1_0(shep_home)
    assert _schema(db) == (1, {})
    notices: list[str] = []
    with EventStore(db, on_notice=notices.append) as store:
        assert store.schema.version == versions.STORE_SCHEMA_VERSION
    backup = shep_home / "shep.db.bak-0.1.0"
    assert notices == [
        f"upgraded the event store from schema 1 to {versions.STORE_SCHEMA_VERSION} "
        f"(shep 0.1.0 -> {versions.SHEP_VERSION}); the old store is kept as {backup}."
    ]
    assert _schema(db) == (
        versions.STORE_SCHEMA_VERSION,
        {"newest_writer": versions.SHEP_VERSION, "schema_written_by": versions.SHEP_VERSION},
    )
    assert _head(db) == (EVENTS_0_1_0, HEAD_0_1_0)
    assert _schema(backup) == (1, {})
    assert _head(backup) == (EVENTS_0_1_0, HEAD_0_1_0)
    assert os.stat(backup).st_mode & 0o777 == os.stat(db).st_mode & 0o777

    copied = backup.read_bytes()
    with EventStore(db, on_notice=notices.append):
        pass
    assert len(notices) == 1
    assert backup.read_bytes() == copied
    assert sorted(p.name for p in shep_home.iterdir() if ".bak" in p.name) == [backup.name]


def test_the_first_command_after_an_upgrade_says_it_migrated_the_store(shep_home: Path) -> None:
    """A writing command on a home of shep 0.1.0 migrates the store and says so on stderr,
    once; the next command says nothing of it."""
    unpack_0_1_0(shep_home)
    env = {"SHEP_HOME": str(shep_home)}
    first = shep("settings", "set", "heartbeat_interval", "25", env=env, check=True)
    assert first.stderr.count("shep: upgraded the event store from schema 1 to") == 1
    assert f"kept as {shep_home / 'shep.db.bak-0.1.0'}." in first.stderr
    second = shep("settings", "set", "heartbeat_interval", "30", env=env, check=True)
    assert "upgraded" not in second.stderr


def test_a_new_store_is_made_at_the_current_schema_without_a_copy(db_path: Path) -> None:
    """A new store starts at the current schema, says nothing and copies nothing."""
    notices: list[str] = []
    with EventStore(db_path, on_notice=notices.append) as store:
        assert store.schema.version == versions.STORE_SCHEMA_VERSION
    assert notices == []
    assert _schema(db_path)[0] == versions.STORE_SCHEMA_VERSION
    assert [p.name for p in db_path.parent.iterdir() if ".bak" in p.name] == []


def test_a_newer_shep_records_itself_as_the_newest_writer(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each store says the newest shep that opened it to write: raised by a newer one, never
    lowered by an older one (which names it when it meets what it cannot read)."""
    EventStore(db_path).close()
    monkeypatch.setattr(versions, "SHEP_VERSION", "0.10.0")
    EventStore(db_path).close()
    assert _schema(db_path)[1]["newest_writer"] == "0.10.0"
    monkeypatch.setattr(versions, "SHEP_VERSION", "0.9.3")
    with EventStore(db_path) as store:
        assert store.schema.newest_writer == "0.10.0"
    assert _schema(db_path)[1]["newest_writer"] == "0.10.0"


def test_a_store_of_a_newer_schema_is_read_but_never_written(shep_home: Path) -> None:
    """A store whose schema a newer shep (0.4.0, schema 3) made: reading commands work,
    writing ones refuse with one line saying why and exit 5, and nothing is appended."""
    db = unpack_0_1_0(shep_home)
    EventStore(db).close()
    conn = apsw.Connection(str(db))
    conn.execute("UPDATE shep_meta SET value = '0.4.0'")
    conn.execute("PRAGMA user_version=3")
    conn.close()
    env = {"SHEP_HOME": str(shep_home)}
    assert shep("logs", "d247bdbc", env=env).returncode == 0
    refused = shep("settings", "set", "heartbeat_interval", "25", env=env)
    assert refused.returncode == 5
    assert refused.stderr == (
        f"shep: The event store {db} has schema 3, written by shep 0.4.0; this is shep "
        f"{versions.SHEP_VERSION} (schema {versions.STORE_SCHEMA_VERSION}), which does not "
        "write to a newer store: upgrade shep.\n"
    )
    assert _head(db) == (EVENTS_0_1_0, HEAD_0_1_0)


def test_an_old_store_that_cannot_be_written_is_read_as_it_is(shep_home: Path) -> None:
    """An old store this process cannot write (an immutable file here; a read-only mount or
    someone else's home elsewhere) is read without migrating it: `shep settings show`
    works, the store stays at schema 1 and no copy is made."""
    db = unpack_0_1_0(shep_home)
    if os.geteuid() == 0:
        if subprocess.run(["chattr", "+i", str(db)], check=False).returncode != 0:
            pytest.skip("chattr +i is not available here")
    else:
        db.chmod(0o444)
    try:
        shown = shep("settings", "show", env={"SHEP_HOME": str(shep_home)})
    finally:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(db)], check=True)
        db.chmod(0o644)
    assert shown.returncode == 0, shown.stderr
    assert "agent_type: demo" in shown.stdout
    assert _schema(db) == (1, {})
    assert [p.name for p in shep_home.iterdir() if ".bak" in p.name] == []


def test_a_copy_that_cannot_be_made_changes_nothing(shep_home: Path) -> None:
    """When the old store cannot be copied aside (here a directory is in the way), the
    upgrade stops with one line saying so and what to do, and leaves the store as it was."""
    db = unpack_0_1_0(shep_home)
    (shep_home / "shep.db.bak-0.1.0").mkdir()
    with pytest.raises(StoreUnavailableError) as refused:
        EventStore(db)
    assert str(refused.value).startswith(
        f"Could not copy the event store to {shep_home / 'shep.db.bak-0.1.0'} before upgrading it ("
    )
    assert str(refused.value).endswith(
        "); nothing was changed. Free some space, or make its directory writable, and run "
        "the command again."
    )
    assert _schema(db) == (1, {})
    assert _head(db) == (EVENTS_0_1_0, HEAD_0_1_0)
    assert not (shep_home / "shep.db.bak-0.1.0.tmp").exists()


# --- killed while migrating -------------------------------------------------------------

_MIGRATE = (
    "import sys\n"
    "from events.store import EventStore\n"
    "print('ready', flush=True)\n"
    "EventStore(sys.argv[1], on_notice=print).close()\n"
    "print('done', flush=True)\n"
)


def _grown_0_1_0(home: Path, megabytes: int) -> Path:
    """0.1.0's store with agent output appended in its own layout (schema 1), until it is
    about ``megabytes`` big: big enough that copying it aside takes a while."""
    db = unpack_0_1_0(home)
    datastore = ApswDatastore(str(db))
    recorder = ApswProcessRecorder(datastore)  # no EventStore: nothing is migrated
    mapper = MsgspecMapper()
    text = "x" * 4000
    try:
        while os.path.getsize(db) < megabytes * 1_000_000:
            stream = uuid4()
            recorder.insert_events(
                [
                    mapper.to_stored_event(
                        AgentOutputRecorded(
                            originator_id=stream, originator_version=v, timestamp=utc_now(),
                            node="scan", kind="text", text=text,
                        )
                    )
                    for v in range(1, 501)
                ]
            )  # fmt: skip
    finally:
        datastore.close()
    conn = apsw.Connection(str(db))
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    assert _schema(db) == (1, {})
    return db


def _migrate_and_kill(db: Path, delay: float | None) -> str:
    """Run a migration of ``db`` in a process of its own; SIGKILL it ``delay`` seconds after it
    is ready to open the store (None: let it finish). Returns what it printed."""
    child = subprocess.Popen(
        [sys.executable, "-c", _MIGRATE, str(db)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    assert child.stdout.readline() == "ready\n"
    if delay is not None:
        time.sleep(delay)
        child.send_signal(signal.SIGKILL)
    out, err = child.communicate(timeout=120)
    assert delay is not None or child.returncode == 0, err
    return out


@pytest.mark.slow
def test_a_migration_killed_at_random_points_leaves_the_old_store_or_the_new(
    tmp_path: Path,
) -> None:
    """SIGKILL at random moments of a migration (opening, the copy, the rename, the
    migration's transaction, after it): every time the store is either the old one
    (schema 1, no meta table) or the new one (schema 2, its meta complete, its copy kept
    whole), with every event as it was; a kept copy is the old store, whole; a partial
    copy only ever has its temporary name. The next opening finishes the job."""
    original = _grown_0_1_0(tmp_path / "original", megabytes=60)
    expected = _head(original)
    rng = random.Random(21)

    def fresh() -> Path:
        home = tmp_path / "home"
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir()
        shutil.copy(original, home / "shep.db")
        return home / "shep.db"

    started = time.monotonic()
    out = _migrate_and_kill(fresh(), None)
    took = time.monotonic() - started
    assert "upgraded the event store from schema 1 to" in out

    outcomes = {"old": 0, "new": 0}
    trials = 16
    for trial in range(trials):
        db = fresh()
        # Spread over the whole migration, and a little past it, at random within each slice.
        delay = (trial + rng.random()) / trials * took * 1.3
        _migrate_and_kill(db, delay)
        version, meta = _schema(db)
        backup = db.parent / "shep.db.bak-0.1.0"
        if version == 1:
            outcomes["old"] += 1
            assert meta == {}
        else:
            outcomes["new"] += 1
            assert version == versions.STORE_SCHEMA_VERSION
            assert set(meta) == {"newest_writer", "schema_written_by"}
            assert backup.exists()
        if backup.exists():
            assert _schema(backup) == (1, {})
            assert _head(backup) == expected
        leftovers = {p.name for p in db.parent.iterdir()} - {
            "shep.db", "shep.db-wal", "shep.db-shm", backup.name
        }  # fmt: skip
        assert leftovers <= {backup.name + ".tmp", backup.name + ".tmp-journal"}, leftovers
        assert _head(db) == expected

        again: list[str] = []
        with EventStore(db, on_notice=again.append) as store:
            assert store.schema.version == versions.STORE_SCHEMA_VERSION
        assert len(again) == (1 if version == 1 else 0)
        assert _head(db) == expected
        assert _head(backup) == expected
    assert outcomes["old"] > 0
    assert outcomes["new"] > 0
