"""`shep projections rebuild` killed with SIGKILL mid-way loses no index for good."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import apsw
import pytest

from events.store import EventStore
from projections.database import PROJECTION_INDEXES, PROJECTION_NAMES, open_database
from projections.runner import rebuild
from projections.schema import PROJECTIONS
from tests.e2e.cli import shep
from tests.histories import random_run
from tests.projections.test_rebuild import snapshot

_DDL_INDEXES = {s.split()[5] for p in PROJECTIONS for s in p.ddl if s.startswith("CREATE INDEX")}


def indexes(db_path: Path) -> set[str]:
    conn = apsw.Connection(str(db_path))
    try:
        return {
            str(name)
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type='index' AND sql IS NOT NULL"
            )
        }
    finally:
        conn.close()


def kill_rebuild_mid_way(db_path: Path) -> bool:
    """Start a real rebuild; SIGKILL it once it has dropped the tables, before its indexes.

    Returns whether the kill landed mid-way (the rebuild may finish first on a busy machine).
    """
    conn = apsw.Connection(str(db_path))
    names = ",".join("?" * len(PROJECTION_NAMES))
    rebuild_proc = subprocess.Popen(
        [sys.executable, "-m", "shep", "projections", "rebuild"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=os.environ.copy(),
    )
    try:
        deadline = time.monotonic() + 60
        while rebuild_proc.poll() is None and time.monotonic() < deadline:
            # The rebuild's first transaction deletes the tracking rows and drops the tables.
            row = conn.execute(
                f"SELECT count(*) FROM tracking WHERE application_name IN ({names})",
                PROJECTION_NAMES,
            ).fetchone()
            if row is not None and row[0] < len(PROJECTION_NAMES):
                rebuild_proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.001)
    finally:
        rebuild_proc.kill()
        rebuild_proc.wait()
        conn.close()
    return rebuild_proc.returncode == -signal.SIGKILL and not indexes(db_path) >= _DDL_INDEXES


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_killed_rebuild_then_any_command_restores_every_index(db_path: Path) -> None:
    """SIGKILL a rebuild mid-way; the next command creates every index again.

    The projections it then holds equal those of a complete rebuild.
    """
    with EventStore(db_path, synchronous="OFF") as store:
        rng = random.Random(9)
        for _ in range(1200):
            random_run(store, rng)
    shep("status", check=True)  # projections caught up: the rebuild starts at once
    assert indexes(db_path) >= _DDL_INDEXES == set(PROJECTION_INDEXES)
    for _ in range(5):
        if kill_rebuild_mid_way(db_path):
            break
    else:
        pytest.fail("the rebuild always finished before it could be killed")

    shep("status", check=True)
    assert indexes(db_path) >= _DDL_INDEXES
    conn = open_database(db_path)
    after_kill = snapshot(conn)
    rebuild(conn)
    assert snapshot(conn) == after_kill
    conn.close()
