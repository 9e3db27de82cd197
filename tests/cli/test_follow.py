"""`shep logs RUN --follow` against a real background worker that dies."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from shep.home.procs import pid_alive
from tests.shep.runs.conftest import agent_calls, agent_log, fake_claude, repo
from tests.shep.runs.test_background_recovery import run_row, start_background, wait_for

__all__ = ["agent_log", "fake_claude", "repo"]  # fixtures this module uses


def test_follow_ends_when_the_worker_is_killed(
    repo: Path, fake_claude: Path, agent_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGKILL the worker while `--follow` waits: follow applies the orphan rule on its own,
    prints the run.interrupted line, tells how to resume, and exits 130 like `shep run`."""
    monkeypatch.setenv("FAKE_FAIL", "hang")
    run_id = start_background(repo)
    wait_for(
        lambda: any(c["phase"] == "start" for c in agent_calls(agent_log)),
        what="the agent to start",
    )
    agent_pid = agent_calls(agent_log)[0]["pid"]
    worker_pid = run_row(run_id)["pid"]
    assert isinstance(worker_pid, int)
    follower = subprocess.Popen(
        [sys.executable, "-m", "shep", "logs", run_id[:8], "--follow"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )
    try:
        assert follower.stdout is not None
        # The first line comes after the start-up orphan check: from here on, only
        # the follow loop itself can notice the dead worker.
        first = follower.stdout.readline()
        assert "run.created" in first
        os.kill(worker_pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(os.getpgid(agent_pid), signal.SIGKILL)
        wait_for(lambda: not pid_alive(worker_pid), timeout=10, what="the worker to die")
        rest, err = follower.communicate(timeout=20)
    finally:
        follower.kill()
        follower.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(agent_pid, signal.SIGKILL)
    short = run_id[:8]
    assert follower.returncode == 130
    last = rest.splitlines()[-1]
    assert " run.interrupted: interrupted: " in last
    assert err.endswith(f"Run {short} interrupted. Continue it with `shep resume {short}`.\n")
    assert "Traceback" not in err
    assert run_row(run_id)["status"] == "interrupted"


def test_follow_of_an_interrupted_run_ends_at_once(
    repo: Path, fake_claude: Path, agent_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Following a run that is already interrupted prints its log and the resume hint, exit 130."""
    monkeypatch.setenv("FAKE_FAIL", "hang")
    run_id = start_background(repo)
    wait_for(
        lambda: any(c["phase"] == "start" for c in agent_calls(agent_log)),
        what="the agent to start",
    )
    agent_pid = agent_calls(agent_log)[0]["pid"]
    worker_pid = run_row(run_id)["pid"]
    assert isinstance(worker_pid, int)
    os.kill(worker_pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(os.getpgid(agent_pid), signal.SIGKILL)
    wait_for(lambda: not pid_alive(worker_pid), timeout=10, what="the worker to die")
    assert run_row(run_id)["status"] == "interrupted"
    result = subprocess.run(
        [sys.executable, "-m", "shep", "logs", run_id, "--follow"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=os.environ.copy(),
        timeout=20,
        check=False,
    )
    short = run_id[:8]
    assert result.returncode == 130
    assert " run.interrupted: interrupted: " in result.stdout.splitlines()[-1]
    assert result.stderr == f"Run {short} interrupted. Continue it with `shep resume {short}`.\n"


@pytest.mark.slow
def test_ctrl_c_stops_following_and_says_the_run_goes_on(
    repo: Path, fake_claude: Path, agent_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGINT (Ctrl-C) to `shep logs --follow` while the run works: it says that following
    stopped and that the run goes on, with the command to follow again (never "aborted",
    which reads as if the run was stopped), exits 130, and the run is still running.
    """
    monkeypatch.setenv("FAKE_FAIL", "hang")
    run_id = start_background(repo)
    wait_for(
        lambda: any(c["phase"] == "start" for c in agent_calls(agent_log)),
        what="the agent to start",
    )
    agent_pid = agent_calls(agent_log)[0]["pid"]
    follower = subprocess.Popen(
        [sys.executable, "-m", "shep", "logs", run_id[:8], "--follow"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )
    short = run_id[:8]
    try:
        assert follower.stdout is not None
        assert "run.created" in follower.stdout.readline()
        follower.send_signal(signal.SIGINT)
        _, err = follower.communicate(timeout=20)
        assert follower.returncode == 130
        assert err.splitlines() == [
            f"Stopped following run {short}; the run goes on "
            f"(`shep logs {short} --follow` to follow it again)."
        ], err
        assert run_row(run_id)["status"] == "running"
    finally:
        follower.kill()
        follower.wait()
        shep_cancel = subprocess.run(
            [sys.executable, "-m", "shep", "cancel", short],
            check=False,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        assert shep_cancel.returncode == 0, shep_cancel.stderr
        with contextlib.suppress(ProcessLookupError):
            os.killpg(agent_pid, signal.SIGKILL)
