"""A rebuild killed with SIGKILL at any moment leaves the projections as they were or rebuilt.

The projections of the store below are made to differ from what a rebuild
gives (each marked as built by another version, some rows changed), so the
two states can be told apart. A real ``shep`` process migrating them is killed
at random moments; each time the tables, their tracking positions and their
versions must be exactly the old ones or exactly the new ones.
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

import apsw
import pytest

from events.store import EventStore
from projections.catch_up import SHADOW_PREFIX, rebuild
from projections.database import open_database
from projections.schema import PROJECTIONS
from projections.tables import PROJECTION_INDEXES, PROJECTION_NAMES, VERSIONS_TABLE
from tests.support.cli import shep
from tests.support.histories import random_decisions, random_run

State = dict[str, list[tuple[object, ...]]]


def state(db_path: Path) -> State:
    """Every projection table, the projections' tracking rows and versions (a plain read)."""
    conn = apsw.Connection(str(db_path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        tables = {
            t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr)
            for p in PROJECTIONS
            for t in p.tables
        }
        names = ",".join("?" * len(PROJECTION_NAMES))
        tables["tracking"] = sorted(
            conn.execute(
                f"SELECT * FROM tracking WHERE application_name IN ({names})", PROJECTION_NAMES
            ).fetchall()
        )
        tables[VERSIONS_TABLE] = sorted(conn.execute(f"SELECT * FROM {VERSIONS_TABLE}"))
        return tables
    finally:
        conn.close()


def shadows(db_path: Path) -> list[str]:
    """The new tables a rebuild has begun (left behind when it is killed)."""
    conn = apsw.Connection(str(db_path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return [
            str(name)
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE name LIKE ?", (SHADOW_PREFIX + "%",)
            )
        ]
    finally:
        conn.close()


def indexes(db_path: Path) -> set[str]:
    conn = apsw.Connection(str(db_path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return {
            str(name)
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type='index' AND sql IS NOT NULL"
            )
        }
    finally:
        conn.close()


def make_old(db_path: Path) -> None:
    """Mark every projection as built by another version and change rows of each."""
    conn = apsw.Connection(str(db_path))
    conn.execute(f"UPDATE {VERSIONS_TABLE} SET version = 0")
    conn.execute("UPDATE runs SET workflow = 'old-' || workflow")
    conn.execute("DELETE FROM logs WHERE position % 3 = 0")
    conn.execute("UPDATE nodes SET status = 'old'")
    conn.execute("UPDATE inbox SET prompt = 'old'")
    conn.execute("DELETE FROM decisions WHERE position % 2 = 0")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_rebuild_killed_at_random_moments_leaves_the_old_or_the_new_state(
    db_path: Path, tmp_path: Path
) -> None:
    """SIGKILL `shep status` while it rebuilds projections of another version, at random
    moments from its start to its end: every time, every projection table, tracking row
    and version is the old one or the new one, never a mix. The next command then
    completes the rebuild (and drops what the killed one had begun).
    """
    with EventStore(db_path, synchronous="OFF") as store:
        rng = random.Random(9)
        for _ in range(1500):
            run_id = random_run(store, rng)
            if rng.random() < 0.3:
                random_decisions(store, run_id, rng)
    shep("status", check=True)
    conn = open_database(db_path)
    rebuild(conn)
    conn.close()
    new = state(db_path)
    make_old(db_path)
    old = state(db_path)
    assert old != new
    pristine = tmp_path / "old.db"
    shutil.copy(db_path, pristine)

    started = time.monotonic()
    shep("status", check=True)  # how long a whole migration takes here
    took = time.monotonic() - started
    assert state(db_path) == new
    assert indexes(db_path) >= set(PROJECTION_INDEXES)

    rng = random.Random(4)
    outcomes: list[str] = []
    for _ in range(12):
        for suffix in ("-wal", "-shm"):
            Path(f"{db_path}{suffix}").unlink(missing_ok=True)
        shutil.copy(pristine, db_path)
        process = subprocess.Popen(
            [sys.executable, "-m", "shep", "status"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            env=os.environ.copy(),
        )
        time.sleep(rng.uniform(0, took))
        process.send_signal(signal.SIGKILL)
        process.wait()
        after = state(db_path)
        assert after in (old, new), "a killed rebuild left a mix of old and new"
        outcomes.append("new" if after == new else "old, begun" if shadows(db_path) else "old")
    assert "old, begun" in outcomes, f"no kill landed inside a rebuild: {outcomes}"

    # After a kill inside a rebuild, the next command rebuilds and leaves nothing behind.
    if outcomes[-1] != "old, begun":
        shutil.copy(pristine, db_path)
        process = subprocess.Popen([sys.executable, "-m", "shep", "status"])
        while not shadows(db_path) and process.poll() is None:
            time.sleep(0.005)
        process.send_signal(signal.SIGKILL)
        process.wait()
    shep("status", check=True)
    assert state(db_path) == new
    assert shadows(db_path) == []
    assert indexes(db_path) >= set(PROJECTION_INDEXES)
