"""Background workers, cancel, and recovery after a real SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from shep.home.procs import pid_alive
from tests.shep.runs.conftest import agent_calls
from tests.support.cli import shep


def wait_for(condition: Callable[[], bool], timeout: float = 60, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def run_row(run_id: str) -> dict[str, object]:
    return json.loads(shep("status", run_id, "--json", check=True).stdout)


def start_background(repo: Path) -> str:
    result = shep("run", "analyze-repository", "--repo", str(repo), "--background", check=True)
    run_id = result.stdout.strip()
    assert len(run_id) == 32
    assert "--follow" in result.stderr
    return run_id


def test_background_run_completes_and_logs_to_file(
    repo: Path, fake_claude: Path, shep_home: Path
) -> None:
    """--background returns the run id at once; the detached worker finishes the run."""
    run_id = start_background(repo)
    wait_for(lambda: run_row(run_id)["status"] == "completed", what="completion")
    assert (repo / "shep-analysis.md").exists()
    log = shep_home / "logs" / f"{run_id}.log"
    assert "report done" in log.read_text()
    assert (log.stat().st_mode & 0o777) == 0o600


def test_cancel_stops_worker_and_agent(
    repo: Path, fake_claude: Path, agent_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """cancel records the cancellation, then TERM/KILLs the worker and the agent's group."""
    monkeypatch.setenv("FAKE_FAIL", "hang")
    run_id = start_background(repo)
    wait_for(
        lambda: any(c["phase"] == "start" for c in agent_calls(agent_log)),
        what="the agent to start",
    )
    agent_pid = agent_calls(agent_log)[0]["pid"]
    worker_pid = run_row(run_id)["pid"]
    assert isinstance(worker_pid, int)
    result = shep("cancel", run_id[:8], "--grace", "2", check=True)
    assert result.stdout.endswith(f"Cancelled run {run_id[:8]}.\n")
    row = run_row(run_id)
    assert row["status"] == "cancelled"
    assert str(row["error"]).startswith("cancelled by ")
    wait_for(lambda: not pid_alive(worker_pid), timeout=10, what="the worker to exit")
    wait_for(lambda: not pid_alive(agent_pid), timeout=10, what="the agent to exit")
    again = shep("cancel", run_id)
    assert again.returncode == 2
    assert again.stderr == f"shep: Run {run_id} is cancelled; cannot cancel it.\n"


@pytest.mark.slow
def test_sigkilled_worker_is_detected_and_resumed(
    repo: Path, fake_claude: Path, agent_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGKILL the worker mid-node: the next command marks the run interrupted; resume
    finishes it without re-running completed nodes."""
    monkeypatch.setenv("FAKE_DELAY", "1.0")
    run_id = start_background(repo)
    wait_for(
        lambda: any(
            c["node"] == "dependencies" and c["phase"] == "start" for c in agent_calls(agent_log)
        ),
        what="the second node",
    )
    worker_pid = run_row(run_id)["pid"]
    assert isinstance(worker_pid, int)
    os.kill(worker_pid, signal.SIGKILL)
    wait_for(lambda: not pid_alive(worker_pid), timeout=10, what="the worker to die")
    status = shep("status", "--all")
    assert f"1 interrupted run: shep resume {run_id[:8]}" in status.stderr
    assert run_row(run_id)["status"] == "interrupted"
    monkeypatch.setenv("FAKE_DELAY", "0.05")
    resumed = shep("resume", run_id[:8], timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    row = run_row(run_id)
    assert row["status"] == "completed"
    starts = [c["node"] for c in agent_calls(agent_log) if c["phase"] == "start"]
    assert starts.count("scan") == 1, "a completed node ran again"
    assert starts.count("dependencies") == 2, "the node in flight is re-run"
    assert shep("audit", "verify", check=True).returncode == 0


@pytest.mark.slow
def test_run_offers_to_resume_interrupted_run(
    repo: Path, fake_claude: Path, agent_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a terminal, `shep run` asks for --resume/--no-resume; each does what it says."""
    monkeypatch.setenv("FAKE_DELAY", "1.0")
    run_id = start_background(repo)
    wait_for(
        lambda: any(c["phase"] == "start" for c in agent_calls(agent_log)),
        what="the agent to start",
    )
    worker_pid = run_row(run_id)["pid"]
    assert isinstance(worker_pid, int)
    os.kill(worker_pid, signal.SIGKILL)
    wait_for(lambda: not pid_alive(worker_pid), timeout=10, what="the worker to die")
    monkeypatch.setenv("FAKE_DELAY", "0.05")
    asked = shep("run", "analyze-repository", "--repo", str(repo))
    assert asked.returncode == 2
    assert "was interrupted here. Pass --resume to continue it or --no-resume" in asked.stderr
    assert (
        shep("run", "analyze-repository", "--repo", str(repo), "--resume", timeout=120).returncode
        == 0
    )
    assert run_row(run_id)["status"] == "completed"
    runs = json.loads(shep("status", "--all", "--json", check=True).stdout)
    assert len(runs) == 1


def test_resume_refuses_finished_run(repo: Path, fake_claude: Path) -> None:
    """Only an interrupted run can be resumed; a completed one says so."""
    shep("run", "analyze-repository", "--repo", str(repo), check=True, timeout=120)
    run_id = json.loads(shep("status", "--all", "--json").stdout)[0]["run_id"]
    result = shep("resume", run_id)
    assert result.returncode == 2
    assert result.stderr == f"shep: Run {run_id} is completed; cannot resume it.\n"


@pytest.mark.slow
def test_heartbeats_are_recorded(
    repo: Path, fake_claude: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A running worker records heartbeats with its pid and host."""
    monkeypatch.setenv("FAKE_DELAY", "1.0")
    result = shep("run", "analyze-repository", "--repo", str(repo), check=True, timeout=120)
    assert result.returncode == 0
    row = run_row(json.loads(shep("status", "--all", "--json").stdout)[0]["run_id"])
    assert row["last_heartbeat"] is not None
    assert row["host"]


@pytest.mark.parametrize(
    ("keys", "expected"),
    [("\r", True), ("y\r", True), ("n\r", False), ("maybe\r" + "\x7f" * 5 + "no\r", False)],
)
def test_resume_prompt_answers(keys: str, expected: bool) -> None:
    """ "Resume? [Y/n]": Enter and y resume, n does not, anything else is asked again."""
    from prompt_toolkit.input import create_pipe_input
    from prompt_toolkit.output import DummyOutput

    from shep.cli.run import ask_resume

    with create_pipe_input() as pipe:
        pipe.send_text(keys)
        assert ask_resume("0123456789abcdef", input=pipe, output=DummyOutput()) is expected
