"""The waiter of a run suspended on a shared store rides out a PostgreSQL restart.

A run on the laptop waits for a person; its worker left a waiter (``shep
_await``) there, since a decision may come from another machine. The server is
killed (SIGKILL) and started again; then the build box answers. The laptop's
waiter, not some later shep command on the laptop, resumes the run: nothing is
run in the laptop's home meanwhile (its status is read from the build box).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from shep.home.procs import pid_alive
from tests.shep.nodes.conftest import agent_log, fake_claude, repo, test_workflows
from tests.shep.runs.test_background_recovery import wait_for
from tests.support.cli import shep
from tests.support.postgres_server import PostgresServer

__all__ = ["agent_log", "fake_claude", "repo", "test_workflows"]

Env = dict[str, str]


@pytest.fixture
def laptop(own_pg_server: PostgresServer, monkeypatch: pytest.MonkeyPatch) -> Env:
    """The test's own home, on a database of a server the test kills (before ``fake_claude``,
    so the agent settings go to the shared store)."""
    monkeypatch.setenv("SHEP_DATABASE_URL", own_pg_server.database())
    monkeypatch.setenv("SHEP_HOST", "laptop")
    return {}


@pytest.fixture
def buildbox(laptop: Env, tmp_path: Path) -> Env:
    return {"SHEP_HOME": str(tmp_path / "buildbox-home"), "SHEP_HOST": "buildbox"}


def _status(run_id: str, env: Env) -> str:
    result = shep("status", run_id, "--json", env=env, check=True)
    return str(json.loads(result.stdout)["status"])


def _items(run_id: str, env: Env) -> list[dict[str, object]]:
    items = json.loads(shep("inbox", "--json", env=env, check=True).stdout)
    return [i for i in items if i["run_id"] == run_id]


def _waiters(run_id: str) -> list[int]:
    """Pids of live `shep _await RUN` processes."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"_await" in argv and run_id.encode() in argv and pid_alive(int(entry.name)):
            found.append(int(entry.name))
    return found


@pytest.mark.slow
def test_a_decision_made_elsewhere_after_a_server_restart_resumes_the_run(
    laptop: Env,
    buildbox: Env,
    own_pg_server: PostgresServer,
    repo: Path,
    fake_claude: Path,
    shep_home: Path,
) -> None:
    """Server killed and revived while the run waits; the build box answers: the laptop's
    waiter resumes the run (it then waits at its gate), and its log says it lost the
    store and found it back.
    """
    started = shep("run", "gated-review", "--repo", str(repo), "--background", check=True)
    run_id = started.stdout.strip()
    wait_for(
        lambda: [i["kind"] for i in _items(run_id, buildbox)] == ["question"],
        what="the question in the build box's inbox",
    )
    wait_for(lambda: len(_waiters(run_id)) == 1, what="the laptop's waiter")
    [waiter] = _waiters(run_id)

    own_pg_server.kill()
    time.sleep(6)  # the waiter polls every 2 s: it finds the server gone
    own_pg_server.revive()
    log = shep_home / "logs" / f"{run_id}.log"
    assert pid_alive(waiter), f"the waiter gave up when the server went away:\n{log.read_text()}"

    [question] = _items(run_id, buildbox)
    answered = shep("answer", str(question["item_id"])[:8], "--option", "small", env=buildbox)
    assert answered.returncode == 0, answered.stderr
    wait_for(
        lambda: [i["kind"] for i in _items(run_id, buildbox)] == ["approval"],
        timeout=90,
        what="the laptop's waiter to resume the run to its gate",
    )
    assert _status(run_id, buildbox) == "waiting_approval"
    said = log.read_text()
    assert "lost the shared store" in said
    assert "the shared store is back after" in said
    assert "Traceback" not in said
