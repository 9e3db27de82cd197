"""One worker per run: stopped workers, reused pids, repositories with their own packages.

Everything is real: detached workers, a fake agent CLI subprocess, SIGSTOP,
SIGKILL, and a real store read back event by event.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from uuid import UUID

import apsw
import pytest

from commands.create_run import create_run
from commands.mark_interrupted import mark_interrupted
from commands.start_run import start_run
from events.runs import HeartbeatRecorded, NodeCompleted, RunResumed, RunStarted
from events.store import EventStore
from projections.database import open_database
from shep.home.identity import host_name
from shep.home.procs import pid_alive, process_start
from shep.runs.recovery import find_orphans
from tests.shep.runs.conftest import agent_calls
from tests.shep.runs.test_background_recovery import run_row, start_background, wait_for
from tests.support.cli import shep

NODES = ["scan", "dependencies", "patterns", "report"]


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """An unrelated process that must never be signalled by shep."""
    process = subprocess.Popen(["sleep", "300"])
    yield process
    process.kill()
    process.wait()


def _events(home: Path, run_id: str) -> list[object]:
    with EventStore(home / "shep.db") as store:
        return list(store.load(UUID(run_id)))


def _owners(home: Path, run_id: str) -> list[RunStarted | RunResumed]:
    return [e for e in _events(home, run_id) if isinstance(e, RunStarted | RunResumed)]


def _worker_pid(home: Path, run_id: str) -> int:
    return _owners(home, run_id)[-1].pid


def test_worker_never_imports_the_repository_s_packages(
    repo: Path, fake_claude: Path, tmp_path: Path
) -> None:
    """A repository with its own events/, commands/ and shep/ packages: the worker imports shep's.

    The background worker used to start with the caller's directory first on
    sys.path, so the repository's packages were imported and run.
    """
    marker = tmp_path / "imported-from-repo"
    for package in ("events", "commands", "shep", "projections"):
        (repo / package).mkdir()
        (repo / package / "__init__.py").write_text(
            f"open({str(marker)!r}, 'a').write({package!r} + '\\n')\n"
        )
    result = subprocess.run(
        [sys.executable, "-P", "-m", "shep", "run", "analyze-repository", "--background"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    run_id = result.stdout.strip()
    wait_for(lambda: run_row(run_id)["status"] == "completed", what="completion")
    assert not marker.exists(), marker.read_text()


def _stop_outside_a_transaction(pid: int, db: Path) -> None:
    """SIGSTOP the worker at a moment it holds no write lock.

    A process stopped inside a write transaction keeps the store locked until
    it runs again (as with any SQLite writer); such a moment is short and rare,
    and this test is about what happens around orphan detection, not that.
    """
    probe = apsw.Connection(str(db))
    try:
        while True:
            os.kill(pid, signal.SIGSTOP)
            try:
                probe.execute("BEGIN IMMEDIATE")
                probe.execute("ROLLBACK")
                return
            except apsw.BusyError:
                os.kill(pid, signal.SIGCONT)
                time.sleep(0.02)
    finally:
        probe.close()


def _once_each(events: list[object]) -> list[str]:
    return sorted(e.node for e in events if isinstance(e, NodeCompleted))


@pytest.mark.slow
def test_a_stopped_worker_is_not_an_orphan_and_resume_is_refused(
    repo: Path, fake_claude: Path, agent_log: Path, shep_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGSTOP a worker: however old its heartbeat, it is not interrupted, and resume is refused
    with a line saying why and how to force it.
    """
    monkeypatch.setenv("FAKE_DELAY", "1")
    run_id = start_background(repo)
    wait_for(lambda: len(agent_calls(agent_log)) >= 1, what="the first agent call")
    old = _worker_pid(shep_home, run_id)
    _stop_outside_a_transaction(old, shep_home / "shep.db")
    try:
        conn = open_database(shep_home / "shep.db")
        later = datetime.now(UTC) + timedelta(hours=1)
        assert find_orphans(conn, host=host_name(), orphan_after=120, now=later) == []
        conn.close()
        assert run_row(run_id)["status"] == "running"
        refused = shep("resume", run_id[:8])
        assert refused.returncode == 2
        assert refused.stderr == (
            f"shep: Run {run_id[:8]} is still running (worker {old} on {host_name()}). "
            f"If that worker is stuck, `shep resume {run_id[:8]} --force` stops it and "
            "resumes the run.\n"
        )
    finally:
        os.kill(old, signal.SIGCONT)
    wait_for(lambda: run_row(run_id)["status"] == "completed", what="completion")
    assert _once_each(_events(shep_home, run_id)) == sorted(NODES)


@pytest.mark.slow
def test_a_woken_worker_whose_run_was_taken_over_is_fenced_off(
    repo: Path, fake_claude: Path, agent_log: Path, shep_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old defect: a stopped worker is marked interrupted (as a host that only sees its
    stale heartbeat would), the run is resumed, and the old worker wakes. It must append
    nothing more and exit; every node completes exactly once.
    """
    monkeypatch.setenv("FAKE_DELAY", "1")
    run_id = start_background(repo)
    wait_for(lambda: len(agent_calls(agent_log)) >= 1, what="the first agent call")
    old = _worker_pid(shep_home, run_id)
    _stop_outside_a_transaction(old, shep_home / "shep.db")
    try:
        with EventStore(shep_home / "shep.db") as store:
            mark_interrupted(store, UUID(run_id), reason="no heartbeat (other host)", epoch=1)
        resumed = shep("resume", run_id[:8], "--background")
        assert resumed.returncode == 0, resumed.stderr
        wait_for(lambda: len(_owners(shep_home, run_id)) == 2, what="the new owner")
    finally:
        os.kill(old, signal.SIGCONT)
    wait_for(lambda: not pid_alive(old), what="the old worker to exit")
    wait_for(lambda: run_row(run_id)["status"] == "completed", what="completion")

    events = _events(shep_home, run_id)
    assert _once_each(events) == sorted(NODES)
    owners = _owners(shep_home, run_id)
    assert [(o.epoch, o.pid != old) for o in owners] == [(1, False), (2, True)]
    takeover = next(i for i, e in enumerate(events) if isinstance(e, RunResumed))
    late = [e for e in events[takeover:] if isinstance(e, HeartbeatRecorded) and e.pid == old]
    assert late == []
    log = (shep_home / "logs" / f"{run_id}.log").read_text()
    assert "is no longer this worker's" in log


@pytest.mark.slow
def test_resume_force_takes_over_a_stopped_worker(
    repo: Path, fake_claude: Path, agent_log: Path, shep_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`shep resume --force` stops the stuck worker (even a stopped one) and resumes the run."""
    monkeypatch.setenv("FAKE_DELAY", "1")
    run_id = start_background(repo)
    wait_for(lambda: len(agent_calls(agent_log)) >= 1, what="the first agent call")
    old = _worker_pid(shep_home, run_id)
    _stop_outside_a_transaction(old, shep_home / "shep.db")
    try:
        forced = shep("resume", run_id[:8], "--force", "--background")
        assert forced.returncode == 0, forced.stderr
        assert f"stopped worker {old}" in forced.stderr or f"killed worker {old}" in forced.stderr
    finally:
        if pid_alive(old):
            os.kill(old, signal.SIGCONT)
    assert not pid_alive(old)
    wait_for(lambda: run_row(run_id)["status"] == "completed", what="completion")
    assert _once_each(_events(shep_home, run_id)) == sorted(NODES)
    assert [o.epoch for o in _owners(shep_home, run_id)] == [1, 2]


HOLD_THE_WRITE_LOCK = """
import sys, time
import apsw
sys.stdin.readline()
conn = apsw.Connection(sys.argv[1])
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(300)
"""


@pytest.mark.slow  # every command first waits out the store's busy timeout (10 s)
def test_resume_force_finds_a_run_the_projections_never_saw_behind_a_stopped_writer(
    repo: Path, fake_claude: Path, shep_home: Path
) -> None:
    """The worker was stopped inside a write transaction before any command projected its run.

    The projections cannot catch up while it sleeps holding the lock, so the
    run is found in the log; --force stops that worker and the run completes.
    (CI's chaos run once stopped a worker there: resume --force said "No run".)
    """
    worker = subprocess.Popen(
        [sys.executable, "-c", HOLD_THE_WRITE_LOCK, str(shep_home / "shep.db")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        with EventStore(shep_home / "shep.db") as store:
            run_id = create_run(
                store,
                workflow="analyze-repository",
                agent_type="claude-code",
                repo=str(repo),
                node_names=NODES,
                created_by="me",
            )
            start_run(
                store,
                run_id,
                pid=worker.pid,
                host=host_name(),
                process_start=process_start(worker.pid),
            )
        assert worker.stdin is not None
        assert worker.stdout is not None
        worker.stdin.write("go\n")
        worker.stdin.flush()
        assert worker.stdout.readline() == "locked\n"
        os.kill(worker.pid, signal.SIGSTOP)
        forced = shep("resume", run_id.hex[:8], "--force", "--background")
        assert (forced.returncode, forced.stdout.strip()) == (0, run_id.hex), forced.stderr
        assert "locked by another process" in forced.stderr
        assert f"stopped worker {worker.pid}" in forced.stderr
        assert worker.wait(timeout=10) == -signal.SIGTERM
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    wait_for(lambda: run_row(run_id.hex)["status"] == "completed", what="completion")
    assert _once_each(_events(shep_home, run_id.hex)) == sorted(NODES)
    assert [o.epoch for o in _owners(shep_home, run_id.hex)] == [1, 2]


def test_cancel_never_signals_a_process_that_reused_the_worker_s_pid(
    store: EventStore, shep_home: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    """The recorded worker is gone and its pid now belongs to `sleep`: cancel leaves it alone."""
    run_id = create_run(
        store,
        workflow="analyze-repository",
        agent_type="demo",
        repo="/r",
        node_names=NODES,
        created_by="me",
    )
    start_run(store, run_id, pid=sleeper.pid, host=host_name(), process_start="other-boot:1")
    result = shep("cancel", run_id.hex, "--grace", "0.2")
    assert result.returncode == 0, result.stderr
    assert f"Cancelled run {run_id.hex[:8]}." in result.stdout
    assert "worker" not in result.stdout
    assert sleeper.poll() is None, "sleep was signalled"


def test_cancel_signals_the_recorded_worker_when_it_is_the_same_process(
    store: EventStore, shep_home: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    """The counterpart: a process whose pid and start time match is stopped by cancel."""
    run_id = create_run(
        store,
        workflow="analyze-repository",
        agent_type="demo",
        repo="/r",
        node_names=NODES,
        created_by="me",
    )
    start = process_start(sleeper.pid)
    start_run(store, run_id, pid=sleeper.pid, host=host_name(), process_start=start)
    result = shep("cancel", run_id.hex, "--grace", "2")
    assert result.returncode == 0, result.stderr
    assert f"stopped worker {sleeper.pid}" in result.stdout
    assert sleeper.wait(timeout=10) == -signal.SIGTERM


def test_a_run_whose_creator_died_before_starting_it_becomes_resumable(
    store: EventStore, repo: Path, fake_claude: Path
) -> None:
    """Ctrl-C (or a crash) between creating and starting a run: it does not stay pending."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    run_id = create_run(
        store,
        workflow="analyze-repository",
        agent_type="claude-code",
        repo=str(repo),
        node_names=NODES,
        created_by="me",
        pid=gone.pid,
        host=host_name(),
        process_start="gone:1",
    )
    status = shep("status", "--all")
    assert f"1 interrupted run: shep resume {run_id.hex[:8]}" in status.stderr
    assert run_row(run_id.hex)["status"] == "interrupted"
    resumed = shep("resume", run_id.hex[:8])
    assert resumed.returncode == 0, resumed.stderr
    assert run_row(run_id.hex)["status"] == "completed"


def test_a_run_that_cannot_start_is_never_left_pending(
    repo: Path, fake_claude: Path, shep_home: Path
) -> None:
    """A corrupt secrets file: one clear line, and no run stays pending forever."""
    (shep_home / "secrets").write_text("{not json")
    result = shep("run", "analyze-repository", "--repo", str(repo))
    assert result.returncode == 1
    assert result.stderr == (
        f"shep: {shep_home / 'secrets'} is not valid JSON. Configure the token again "
        "with `shep settings agent`.\n"
    )
    listed = shep("status", "--all", "--json", check=True)
    assert '"pending"' not in listed.stdout
