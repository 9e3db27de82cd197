"""A run on a shared store whose server dies mid-run (a real SIGKILL of PostgreSQL).

Back within the orphan window: the worker kept its agent running, records
what it held once the server answers, each event once, and the run completes.
Away for longer: the worker stops with its agent, nothing half-written, and
the run is resumable once the server is back.
"""

from __future__ import annotations

import collections
import time
from pathlib import Path

import psycopg
import pytest

from events.postgres_verify import verify_pg_chain
from shep.home.procs import pid_alive
from tests.shep.runs.conftest import agent_calls, agent_log, fake_claude, repo
from tests.shep.runs.test_background_recovery import run_row, start_background, wait_for
from tests.support.cli import shep
from tests.support.postgres_server import PostgresServer

__all__ = ["agent_log", "fake_claude", "repo"]


@pytest.fixture
def shared(own_pg_server: PostgresServer, monkeypatch: pytest.MonkeyPatch) -> str:
    """This home on a database of a server the test may kill (before ``fake_claude``)."""
    url = own_pg_server.database()
    monkeypatch.setenv("SHEP_DATABASE_URL", url)
    return url


def topics_of(url: str, run_id: str) -> list[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT topic FROM stored_events WHERE originator_id = %s ORDER BY notification_id",
            (run_id,),
        ).fetchall()
    return [r[0].rsplit(":", 1)[-1] for r in rows]


@pytest.mark.slow
def test_a_run_rides_out_a_server_restart_and_completes_with_each_event_once(
    shared: str,
    own_pg_server: PostgresServer,
    repo: Path,
    fake_claude: Path,
    agent_log: Path,
    shep_home: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAKE_DELAY", "3")
    run_id = start_background(repo)
    wait_for(lambda: any(c["phase"] == "start" for c in agent_calls(agent_log)), what="the agent")

    own_pg_server.kill()
    time.sleep(5)  # the first node's agent finishes while the server is away
    own_pg_server.revive()
    wait_for(lambda: run_row(run_id)["status"] == "completed", timeout=90, what="completion")

    calls = agent_calls(agent_log)
    assert [c["node"] for c in calls if c["phase"] == "start"] == [
        "scan",
        "dependencies",
        "patterns",
        "report",
    ]  # the agent was never started again: the worker kept it running
    topics = topics_of(shared, run_id)
    completed = collections.Counter(t for t in topics if t == "NodeCompleted")
    assert completed["NodeCompleted"] == 4
    assert topics.count("RunCompleted") == 1
    report = verify_pg_chain(shared)
    assert report.ok
    log = (shep_home / "logs" / f"{run_id}.log").read_text()
    assert "lost the shared store" in log
    assert "the shared store is back after" in log


@pytest.mark.slow
def test_a_server_away_past_the_orphan_window_stops_the_worker_and_the_run_resumes(
    shared: str,
    own_pg_server: PostgresServer,
    repo: Path,
    fake_claude: Path,
    agent_log: Path,
    shep_home: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shep("settings", "set", "orphan_after", "10", check=True)
    monkeypatch.setenv("FAKE_FAIL", "hang")
    run_id = start_background(repo)
    wait_for(lambda: any(c["phase"] == "start" for c in agent_calls(agent_log)), what="the agent")
    worker_pid = run_row(run_id)["pid"]
    assert isinstance(worker_pid, int)
    agent_pid = agent_calls(agent_log)[0]["pid"]
    before = topics_of(shared, run_id)

    own_pg_server.kill()
    wait_for(lambda: not pid_alive(worker_pid), timeout=60, what="the worker to give up")
    wait_for(lambda: not pid_alive(agent_pid), timeout=10, what="its agent to stop")
    log = (shep_home / "logs" / f"{run_id}.log").read_text()
    assert "gave up after" in log
    own_pg_server.revive()

    # Nothing half-written: the chain verifies and the run's stream went on from where it was.
    assert verify_pg_chain(shared).ok
    assert topics_of(shared, run_id)[: len(before)] == before
    # This host sees its worker gone and marks the run interrupted; resume finishes it.
    row = run_row(run_id)
    assert row["status"] == "interrupted", row
    monkeypatch.delenv("FAKE_FAIL")
    resumed = shep("resume", run_id[:8])
    assert resumed.returncode == 0, resumed.stderr
    assert run_row(run_id)["status"] == "completed"
    assert verify_pg_chain(shared).ok
