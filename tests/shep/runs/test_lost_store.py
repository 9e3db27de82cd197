"""A home deleted (or its store replaced) under a running worker: one line, and it stops.

A worker writes into the SQLite file it opened. Once that file is no longer the
one at the store's path (deleted with the home, or replaced by a new home's
store or a restored copy), whatever it records goes nowhere anyone reads, or
would mix two logs: its heartbeat notices at the next beat, its agent is
stopped, nothing more is written, and it says why in one line.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import apsw
import pytest

from shep.home.procs import pid_alive
from tests.shep.runs.conftest import agent_calls
from tests.shep.runs.test_background_recovery import run_row, start_background, wait_for

pytestmark = pytest.mark.slow


def _started(agent_log: Path) -> list[str]:
    return [c["node"] for c in agent_calls(agent_log) if c["phase"] == "start"]


def test_a_foreground_run_whose_home_is_deleted_stops_in_one_line(
    repo: Path,
    fake_claude: Path,
    agent_log: Path,
    shep_home: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`rm -rf $SHEP_HOME` during the first agent call: the run does not go on to report
    completed in the deleted file; it stops within a few heartbeats, with its agent, exit 1,
    and one line on stderr (no traceback) saying the store was deleted.
    """
    monkeypatch.setenv("FAKE_DELAY", "3")
    worker = subprocess.Popen(
        [sys.executable, "-m", "shep", "run", "analyze-repository", "--repo", str(repo)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: _started(agent_log) == ["scan"], what="the first agent call")
        agent_pid = agent_calls(agent_log)[0]["pid"]
        shutil.rmtree(shep_home)
        _, err = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert worker.returncode == 1, err
    assert "Traceback" not in err
    assert "completed" not in err
    lines = [line for line in err.splitlines() if line.startswith("shep: ")]
    run_id = err.split("Run ", 1)[1][:8]
    assert lines == [
        f"shep: The event store {shep_home / 'shep.db'} was deleted while run {run_id} ran: "
        "this worker stopped its agent and recorded nothing more."
    ], err
    assert _started(agent_log) == ["scan"]  # no node after the deletion
    assert not pid_alive(agent_pid)
    assert not shep_home.exists()  # and nothing made it again


def test_a_background_worker_whose_store_is_replaced_writes_into_neither(
    repo: Path,
    fake_claude: Path,
    agent_log: Path,
    shep_home: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The store file is replaced under a background worker (a copy put back at its path, as
    a restore from backup does): the worker stops with its agent, writes nothing into the new
    file, and its log holds one line (no traceback); the restored store then shows the run
    interrupted, and `shep resume` finishes it.
    """
    monkeypatch.setenv("FAKE_DELAY", "3")
    run_id = start_background(repo)
    wait_for(lambda: _started(agent_log) == ["scan"], what="the first agent call")
    worker_pid = run_row(run_id)["pid"]
    assert isinstance(worker_pid, int)
    db = shep_home / "shep.db"
    _replace_with_copy(db)
    copied = _event_count(db)

    wait_for(lambda: not pid_alive(worker_pid), timeout=30, what="the worker to stop")
    assert _event_count(db) == copied  # nothing written into the new file
    log = (shep_home / "logs" / f"{run_id}.log").read_text()
    assert "Traceback" not in log
    assert [line for line in log.splitlines() if line.startswith("shep: ")] == [
        f"shep: The event store {db} was replaced by another file while run {run_id[:8]} ran: "
        "this worker stopped its agent and recorded nothing more, in either file. If it is a "
        f"restored copy, `shep resume {run_id[:8]}` goes on from what it holds."
    ], log
    assert _started(agent_log) == ["scan"]

    monkeypatch.setenv("FAKE_DELAY", "0.05")
    assert run_row(run_id)["status"] == "interrupted"
    resumed = subprocess.run(
        [sys.executable, "-m", "shep", "resume", run_id[:8]],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert run_row(run_id)["status"] == "completed"


def _replace_with_copy(db: Path) -> None:
    """Put a consistent copy of ``db`` at its path (a new file: another inode)."""
    copy = db.with_name("restored.db")
    source = apsw.Connection(str(db))
    target = apsw.Connection(str(copy))
    with target.backup("main", source, "main") as backup:
        while not backup.done:
            backup.step(-1)
    source.close()
    target.execute("PRAGMA journal_mode=WAL")
    target.close()
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    os.replace(copy, db)


def _event_count(db: Path) -> int:
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return int(conn.execute("SELECT count(*) FROM stored_events").fetchone()[0])  # type: ignore[index]
    finally:
        conn.close()
