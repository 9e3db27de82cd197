"""Two machines on one shared store: two shep homes, two host names, one PostgreSQL database.

The "laptop" is the test's own SHEP_HOME; the "buildbox" is a second home
with its own copy of the log and its own SHEP_HOST. Runs start on the laptop;
the build box shows them, follows them, answers and cancels them; orphans
across hosts are judged by heartbeat age alone; two hosts resuming one run:
exactly one wins.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shep.home.procs import pid_alive
from tests.shep.nodes.conftest import agent_log, fake_claude, repo, test_workflows
from tests.shep.runs.conftest import agent_calls
from tests.shep.runs.test_background_recovery import wait_for
from tests.support.cli import shep

__all__ = ["agent_log", "fake_claude", "repo", "test_workflows"]

Env = dict[str, str]


@pytest.fixture
def laptop(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> Env:
    """The test's own home, on the shared store (requested before ``fake_claude``,
    so the agent settings it records go to the shared store)."""
    monkeypatch.setenv("SHEP_DATABASE_URL", pg_url)
    monkeypatch.setenv("SHEP_HOST", "laptop")
    return {}


@pytest.fixture
def buildbox(laptop: Env, tmp_path: Path) -> Env:
    return {"SHEP_HOME": str(tmp_path / "buildbox-home"), "SHEP_HOST": "buildbox"}


def row(run_id: str, env: Env) -> dict[str, object]:
    result = shep("status", run_id, "--json", env=env, check=True)
    return dict(json.loads(result.stdout))


def inbox(env: Env) -> list[dict[str, object]]:
    return list(json.loads(shep("inbox", "--json", env=env, check=True).stdout))


def start(repo: Path, workflow: str) -> str:
    result = shep("run", workflow, "--repo", str(repo), "--background", check=True)
    return result.stdout.strip()


def waiting_item(run_id: str, kind: str, env: Env) -> dict[str, object]:
    def found() -> bool:
        return [i["kind"] for i in inbox(env) if i["run_id"] == run_id] == [kind]

    wait_for(found, what=f"a {kind} of run {run_id[:8]} in the inbox")
    return next(i for i in inbox(env) if i["run_id"] == run_id)


@pytest.mark.slow
def test_a_run_on_the_laptop_is_shown_followed_and_decided_from_the_buildbox(
    laptop: Env, buildbox: Env, repo: Path, fake_claude: Path, agent_log: Path, shep_home: Path
) -> None:
    """The build box answers the question and approves the gate; the run goes on on the
    laptop (its waiter resumes it), and the build box's follower sees it to the end."""
    run_id = start(repo, "gated-review")
    question = waiting_item(run_id, "question", buildbox)
    assert question["prompt"] == "How large should the change be?"
    assert row(run_id, buildbox)["status"] == "waiting_answer"

    follower = subprocess.Popen(
        [sys.executable, "-m", "shep", "logs", run_id[:8], "--follow"],
        env={**os.environ, **buildbox},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        answered = shep("answer", str(question["item_id"])[:8], "--option", "small", env=buildbox)
        assert answered.returncode == 0, answered.stderr
        assert f"Run {run_id[:8]} goes on on laptop, where it runs" in answered.stderr
        waiting_item(run_id, "approval", buildbox)
        approved = shep("approve", run_id[:8], "--comment", "from the build box", env=buildbox)
        assert approved.returncode == 0, approved.stderr
        wait_for(lambda: row(run_id, buildbox)["status"] == "completed", what="completion")
        out, err = follower.communicate(timeout=60)
    finally:
        if follower.poll() is None:
            follower.kill()
    assert follower.returncode == 0, err
    assert "completed" in out.splitlines()[-1]
    assert "from the build box" in out  # the approval, followed from the other home

    # Every agent call ran on the laptop: its workers' logs are in the laptop's home only.
    assert [c["node"] for c in agent_calls(agent_log) if c["phase"] == "done"] == [
        "draft",
        "finish",
    ]
    assert (shep_home / "logs" / f"{run_id}.log").exists()
    assert not (Path(buildbox["SHEP_HOME"]) / "logs" / f"{run_id}.log").exists()
    # Both homes read the same log: the same run, the same audit head.
    assert row(run_id, laptop)["status"] == "completed"
    heads = {
        shep("audit", "verify", env=env, check=True).stdout.split()[-1]
        for env in (laptop, buildbox)
    }
    assert len(heads) == 1


def test_cancel_from_the_buildbox_stops_the_laptop_s_worker_and_agent(
    laptop: Env,
    buildbox: Env,
    repo: Path,
    fake_claude: Path,
    agent_log: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAKE_FAIL", "hang")
    run_id = start(repo, "analyze-repository")
    wait_for(lambda: any(c["phase"] == "start" for c in agent_calls(agent_log)), what="the agent")
    agent_pid = agent_calls(agent_log)[0]["pid"]
    worker_pid = row(run_id, laptop)["pid"]
    assert isinstance(worker_pid, int)

    result = shep("cancel", run_id[:8], env=buildbox)
    assert result.returncode == 0, result.stderr
    assert "Its worker runs on laptop: it stops, with its agent, at its next heartbeat." in (
        result.stdout + result.stderr
    )
    assert row(run_id, buildbox)["status"] == "cancelled"
    wait_for(lambda: not pid_alive(worker_pid), timeout=20, what="the laptop's worker to stop")
    wait_for(lambda: not pid_alive(agent_pid), timeout=20, what="its agent to stop")
    assert row(run_id, laptop)["status"] == "cancelled"


@pytest.mark.slow
def test_orphans_across_hosts_by_heartbeat_age_and_one_of_two_resumes_wins(
    laptop: Env,
    buildbox: Env,
    repo: Path,
    fake_claude: Path,
    agent_log: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A live run of the laptop outlives the orphan window as seen from the build box and
    stays running; once its worker is killed, the build box waits for the heartbeat to age
    (the pid means nothing there) and only then marks it interrupted. Both hosts then
    resume it at once: exactly one wins."""
    orphan_after = 10.0
    shep("settings", "set", "heartbeat_interval", "0.5", check=True)
    shep("settings", "set", "orphan_after", f"{orphan_after:g}", check=True)
    monkeypatch.setenv("FAKE_FAIL", "hang")
    run_id = start(repo, "analyze-repository")
    wait_for(lambda: any(c["phase"] == "start" for c in agent_calls(agent_log)), what="the agent")

    time.sleep(orphan_after + 2)
    assert row(run_id, buildbox)["status"] == "running"  # live: its heartbeat is fresh

    worker_pid = row(run_id, laptop)["pid"]
    assert isinstance(worker_pid, int)
    for pid in (worker_pid, agent_calls(agent_log)[0]["pid"]):
        os.kill(pid, signal.SIGKILL)
    killed_at = time.monotonic()
    assert row(run_id, buildbox)["status"] == "running"  # a dead pid on another host: no sign
    wait_for(
        lambda: row(run_id, buildbox)["status"] == "interrupted",
        timeout=orphan_after + 30,
        what="the build box to mark the run interrupted",
    )
    assert time.monotonic() - killed_at >= orphan_after - 1
    interrupted = row(run_id, buildbox)
    assert f"no heartbeat for more than {orphan_after:g}s" in str(interrupted["error"])
    assert "on laptop" in str(interrupted["error"])

    resumes = [
        subprocess.Popen(
            [sys.executable, "-m", "shep", "resume", run_id[:8], "--background"],
            env={**os.environ, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for env in (laptop, buildbox)
    ]
    outcomes = [(p.wait(timeout=60), p.communicate()) for p in resumes]
    codes = sorted(code for code, _ in outcomes)
    assert codes[0] == 0, outcomes
    assert codes[1] != 0, outcomes
    loser = next(streams for code, streams in outcomes if code != 0)
    assert len(loser[1].strip().splitlines()) == 1, loser
    assert "Traceback" not in loser[1]
    winner = row(run_id, buildbox)
    assert winner["status"] == "running"
    shep("cancel", run_id[:8], "--grace", "2", env=laptop, check=True)
