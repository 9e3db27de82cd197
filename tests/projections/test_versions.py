"""Each projection has a version; a changed one is rebuilt alone, with progress reports."""

from __future__ import annotations

import fcntl
import os
import random
import threading
from pathlib import Path

import apsw
import pytest

from events.base import topic_of
from events.errors import StoreError
from events.inbox import ApprovalGranted
from events.store import EventStore
from projections.catch_up import catch_up, rebuild
from projections.database import open_database
from projections.schema import PROJECTIONS
from projections.state import RebuildProgress, stored_versions
from projections.tables import (
    LEGACY_SCHEMA,
    LEGACY_SCHEMA_TABLE,
    PROJECTION_NAMES,
    PROJECTION_VERSIONS,
    VERSIONS_TABLE,
)
from shep.audit.format import VERDICTS
from tests.projections.test_rebuild import snapshot
from tests.support.cli import shep
from tests.support.histories import random_decisions, random_run


def _history(store: EventStore, db_path: Path, runs: int = 15) -> apsw.Connection:
    rng = random.Random(5)
    for _ in range(runs):
        run_id = random_run(store, rng)
        if rng.random() < 0.4:
            random_decisions(store, run_id, rng)
    conn = open_database(db_path)
    catch_up(conn)
    return conn


def _mark(conn: apsw.Connection) -> None:
    """Change a row of runs and of logs, as a projection of another version might hold."""
    conn.execute("UPDATE runs SET workflow = 'marked'")
    conn.execute("UPDATE logs SET message = 'marked'")


def test_a_changed_projection_is_rebuilt_alone_on_open(
    store: EventStore, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new version of the logs projection: opening the store rebuilds logs, reporting its
    progress, and leaves every other projection's tables as they were.
    """
    conn = _history(store, db_path)
    rebuilt = snapshot(conn)
    _mark(conn)
    marked = snapshot(conn)
    conn.close()
    monkeypatch.setitem(PROJECTION_VERSIONS, "logs", PROJECTION_VERSIONS["logs"] + 1)
    reports: list[RebuildProgress] = []
    conn = open_database(db_path, progress=reports.append)
    after = snapshot(conn)
    assert after["logs"] == rebuilt["logs"]
    assert {t: rows for t, rows in after.items() if t != "logs"} == {
        t: rows for t, rows in marked.items() if t != "logs"
    }
    assert {r.projections for r in reports} == {("logs",)}
    assert reports[-1].finished
    assert reports[-1].reason == "changed"
    assert stored_versions(conn) == PROJECTION_VERSIONS
    conn.close()
    reports.clear()
    open_database(db_path, progress=reports.append).close()
    assert reports == []  # current now: nothing to rebuild


def test_a_store_of_the_single_schema_number_keeps_its_projections(
    store: EventStore, db_path: Path
) -> None:
    """A store made before projections had versions (one schema number, 7) is taken as
    version 1 of each: opened by this shep, only the projections changed since (a version
    above 1) are rebuilt, and the others are kept as they were.
    """
    conn = _history(store, db_path)
    _mark(conn)
    marked = snapshot(conn)
    conn.execute(f"DROP TABLE {VERSIONS_TABLE}")
    conn.execute(f"CREATE TABLE {LEGACY_SCHEMA_TABLE} (version INTEGER NOT NULL)")
    conn.execute(f"INSERT INTO {LEGACY_SCHEMA_TABLE} VALUES (?)", (LEGACY_SCHEMA,))
    conn.close()
    reports: list[RebuildProgress] = []
    conn = open_database(db_path, progress=reports.append)
    changed = tuple(name for name in PROJECTION_NAMES if PROJECTION_VERSIONS[name] != 1)
    assert {r.projections for r in reports} == ({changed} if changed else set())
    kept = {t: rows for t, rows in snapshot(conn).items() if t not in _tables_of(changed)}
    assert kept == {t: rows for t, rows in marked.items() if t not in _tables_of(changed)}
    assert stored_versions(conn) == PROJECTION_VERSIONS
    conn.close()


def _tables_of(names: tuple[str, ...]) -> set[str]:
    return {table for p in PROJECTIONS if p.name in names for table in p.tables}


def test_a_store_of_an_older_schema_number_is_rebuilt_whole(
    store: EventStore, db_path: Path
) -> None:
    """Projections of an older single schema number are all rebuilt."""
    conn = _history(store, db_path)
    rebuilt = snapshot(conn)
    _mark(conn)
    conn.execute(f"DROP TABLE {VERSIONS_TABLE}")
    conn.execute(f"CREATE TABLE {LEGACY_SCHEMA_TABLE} (version INTEGER NOT NULL)")
    conn.execute(f"INSERT INTO {LEGACY_SCHEMA_TABLE} VALUES (?)", (LEGACY_SCHEMA - 1,))
    conn.close()
    reports: list[RebuildProgress] = []
    conn = open_database(db_path, progress=reports.append)
    assert snapshot(conn) == rebuilt
    assert reports[-1].projections == PROJECTION_NAMES
    conn.close()


def test_rebuilding_one_projection_leaves_the_others(store: EventStore, db_path: Path) -> None:
    """`rebuild(conn, ["runs"])` rebuilds runs and nodes and touches no other table."""
    conn = _history(store, db_path)
    rebuilt = snapshot(conn)
    _mark(conn)
    marked = snapshot(conn)
    rebuild(conn, ["runs"], batch_size=37)
    after = snapshot(conn)
    assert after["runs"] == rebuilt["runs"]
    assert after["nodes"] == rebuilt["nodes"]
    assert after["logs"] == marked["logs"]
    conn.close()


def test_progress_counts_up_to_the_head(store: EventStore, db_path: Path) -> None:
    """A rebuild reports after each batch, counting up to the log's head, then finished."""
    conn = _history(store, db_path)
    (head,) = conn.execute("SELECT max(notification_id) FROM stored_events").fetchone() or (0,)
    reports: list[RebuildProgress] = []
    assert rebuild(conn, batch_size=100, progress=reports.append) == head
    done = [r.done for r in reports]
    assert done == sorted(done)
    assert len(reports) >= head // 100
    assert reports[-1] == RebuildProgress(PROJECTION_NAMES, head, head, finished=True)
    conn.close()


def test_an_unknown_projection_is_refused(store: EventStore, db_path: Path) -> None:
    """Rebuilding a projection that does not exist says which exist."""
    conn = _history(store, db_path, runs=1)
    with pytest.raises(StoreError, match="No projection named nope"):
        rebuild(conn, ["nope"])
    conn.close()


def test_a_second_rebuild_waits_for_the_first(store: EventStore, db_path: Path) -> None:
    """While another process holds the rebuild lock, a rebuild says it waits, and with
    ``only_changed`` does nothing once the other has brought the versions up to date.
    """
    conn = _history(store, db_path, runs=5)
    conn.execute(f"UPDATE {VERSIONS_TABLE} SET version = 0 WHERE name = 'inbox'")
    lock = os.open(f"{db_path}-rebuild.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)
    reports: list[RebuildProgress] = []
    replayed: list[int] = []

    def wait_and_rebuild() -> None:
        # Opening finds inbox changed and rebuilds it first: that is what waits here.
        other = open_database(db_path, progress=reports.append)
        replayed.append(rebuild(other, ["inbox"], progress=reports.append, only_changed=True))
        other.close()

    waiter = threading.Thread(target=wait_and_rebuild)
    waiter.start()
    try:
        waiter.join(1.0)
        assert waiter.is_alive()
        assert reports
        assert reports[0].waiting
        conn.execute(f"UPDATE {VERSIONS_TABLE} SET version = ? WHERE name = 'inbox'", (1,))
    finally:
        os.close(lock)
    waiter.join(30)
    assert replayed == [0]
    conn.close()


def test_the_cli_says_it_rebuilds_a_changed_projection(store: EventStore, db_path: Path) -> None:
    """`shep status` on a store whose inbox was built by another version rebuilds it first and
    says so in one line on stderr; the next command says nothing.
    """
    _history(store, db_path, runs=5).close()
    conn = apsw.Connection(str(db_path))
    conn.execute(f"UPDATE {VERSIONS_TABLE} SET version = 0 WHERE name = 'inbox'")
    conn.close()
    first = shep("status", check=True)
    assert "Rebuilt inbox (changed in this version of shep) from " in first.stderr
    second = shep("status", check=True)
    assert "Rebuil" not in second.stderr


def test_the_cli_rebuilds_the_projections_it_is_given(store: EventStore, db_path: Path) -> None:
    """`shep projections rebuild logs` rebuilds logs alone and says so; a name that is no
    projection is refused with the names that are.
    """
    conn = _history(store, db_path, runs=5)
    rebuilt = snapshot(conn)
    _mark(conn)
    conn.close()
    done = shep("projections", "rebuild", "logs", check=True)
    assert done.stdout.startswith("Rebuilt logs from ")
    conn = open_database(db_path)
    after = snapshot(conn)
    assert after["logs"] == rebuilt["logs"]
    assert after["runs"] != rebuilt["runs"]  # still marked: not rebuilt
    conn.close()
    refused = shep("projections", "rebuild", "nope")
    assert refused.returncode == 2
    assert "'nope' is not one of 'runs', 'logs'" in refused.stderr


def test_a_store_whose_approvals_read_granted_reads_approved(
    store: EventStore, db_path: Path
) -> None:
    """An approved gate is "approved" everywhere (issue 19): a store whose inbox and
    decisions were built when they said "granted" (inbox 2, decisions 1) is rebuilt on
    open, and its approved gates then read "approved", as the audit export says."""
    conn = _history(store, db_path, runs=30)
    conn.execute("UPDATE inbox SET status='granted' WHERE status='approved'")
    conn.execute("UPDATE decisions SET decision='granted' WHERE decision='approved'")
    conn.execute(
        f"UPDATE {VERSIONS_TABLE} SET version = CASE name WHEN 'inbox' THEN 2 ELSE 1 END "
        "WHERE name IN ('inbox', 'decisions')"
    )
    conn.close()
    conn = open_database(db_path)
    inbox = {r[0] for r in conn.execute("SELECT status FROM inbox")}
    decisions = {r[0] for r in conn.execute("SELECT decision FROM decisions WHERE kind='approval'")}
    said = VERDICTS[topic_of(ApprovalGranted)]
    assert said in inbox
    assert said in decisions
    assert "granted" not in inbox | decisions
    conn.close()
