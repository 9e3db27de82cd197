"""SIGKILL workers at random moments, resume, and prove nothing was lost, doubled or redone."""

from __future__ import annotations

import os
from pathlib import Path

import apsw
import pytest

from events.audit import verify_chain
from projections.tables import PROJECTION_TABLES
from tests.shep.runs.chaos import Chaos

TRIALS = int(os.environ.get("SHEP_CHAOS_TRIALS", "50"))


def _tables(db: Path) -> dict[str, list[tuple[object, ...]]]:
    conn = apsw.Connection(str(db))
    try:
        return {
            t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr)
            for t in PROJECTION_TABLES
        }
    finally:
        conn.close()


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_chaos_sigkill_and_resume(tmp_path: Path) -> None:
    """At least SHEP_CHAOS_TRIALS (50) SIGKILLs: every run completes, the log is whole."""
    chaos = Chaos(tmp_path, seed=int(os.environ.get("SHEP_CHAOS_SEED", "1")))
    report = chaos.run(TRIALS)
    assert report.kills >= TRIALS
    assert set(report.statuses.values()) == {"completed"}, report.statuses
    assert report.reexecuted_nodes == 0
    db = chaos.home / "shep.db"
    conn = apsw.Connection(str(db))
    chain = verify_chain(conn)
    assert chain.ok, chain.problem
    positions = [
        r[0]
        for r in conn.execute("SELECT notification_id FROM stored_events ORDER BY notification_id")
    ]
    assert positions == list(range(1, len(positions) + 1)), "positions have gaps"
    for (stream,) in conn.execute("SELECT DISTINCT originator_id FROM stored_events"):
        versions = [
            r[0]
            for r in conn.execute(
                "SELECT originator_version FROM stored_events WHERE originator_id=? "
                "ORDER BY originator_version",
                (stream,),
            )
        ]
        assert versions == list(range(1, len(versions) + 1)), f"stream {stream} has gaps"
    conn.close()
    for run_id in report.runs:
        completions = [
            line
            for line in chaos.shep("logs", run_id, "--json").stdout.splitlines()
            if '"node.completed"' in line
        ]
        assert len(completions) == 4, f"run {run_id}: {len(completions)} node completions"
    chaos.shep("status")  # projections caught up
    incremental = _tables(db)
    assert chaos.shep("projections", "rebuild").returncode == 0
    assert _tables(db) == incremental


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_chaos_smoke(tmp_path: Path) -> None:
    """A few SIGKILLs, with the same guarantees (slow suite, next to the 50 trials)."""
    chaos = Chaos(tmp_path, seed=7)
    report = chaos.run(3, max_kills_per_run=3)
    assert report.kills >= 3
    assert set(report.statuses.values()) == {"completed"}
    assert report.reexecuted_nodes == 0
    conn = apsw.Connection(str(chaos.home / "shep.db"))
    assert verify_chain(conn).ok
    conn.close()
