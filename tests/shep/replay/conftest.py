"""Real histories to replay, recorded once per session with the demo agent.

One shep home holds three runs made with the real CLI: ``gated`` (the
``gated-review`` test workflow: a question answered by alice, the gate rejected
by bob with a reason, then approved by carol), ``feature`` (``shep feat new
--fast --allow-all`` on a git repository: a worktree, snapshots, a squash
merge) and ``analyze`` (``analyze-repository``). Each test gets a copy of that
home as its own SHEP_HOME, so what one test does to its store no other sees.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.shep.workflows.conftest import make_repo
from tests.support.cli import shep

ROOT = Path(__file__).resolve().parents[3]
REJECTION = "name the modules it touches"
APPROVAL = "ship it"


@dataclass(frozen=True)
class Recorded:
    """The session's recorded home and the ids of its runs (hex)."""

    home: Path
    gated: str
    feature: str
    analyze: str
    feature_repo: Path


def _env(home: Path) -> dict[str, str]:
    return {
        "SHEP_HOME": str(home),
        "SHEP_DEMO_DELAY": "0",
        "SHEP_WORKFLOW_MODULES": "tests.support.workflows",
        "PYTHONPATH": str(ROOT),
    }


def _shep(env: Mapping[str, str], *args: str) -> str:
    return shep(*args, env=env, timeout=120, check=True).stdout


def _run_id(env: Mapping[str, str], workflow: str) -> str:
    runs = json.loads(_shep(env, "status", "--all", "--json"))
    [run] = [r for r in runs if r["workflow"] == workflow]
    return str(run["run_id"])


def _pending(env: Mapping[str, str]) -> dict[str, object]:
    [item] = json.loads(_shep(env, "inbox", "--json"))
    return dict(item)


@pytest.fixture(scope="session")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    """Record the three runs (about ten seconds, once)."""
    base = tmp_path_factory.mktemp("replay-history")
    home = base / "home"
    env = _env(home)
    _shep(env, "settings", "agent", "--agent", "demo")

    plain = base / "plain"
    (plain / "src").mkdir(parents=True)
    (plain / "src" / "app.py").write_text("print('hello')\n")
    _shep(env, "run", "gated-review", "--repo", str(plain))
    gated = _run_id(env, "gated-review")
    question = _pending(env)
    _shep(env, "answer", str(question["item_id"]), "--option", "small", "--as", "alice", "--wait")
    _shep(env, "reject", gated, "--reason", REJECTION, "--as", "bob", "--wait")
    _shep(env, "approve", gated, "--comment", APPROVAL, "--as", "carol", "--wait")
    status = json.loads(_shep(env, "status", gated, "--json"))
    assert status["status"] == "completed", status

    _shep(env, "run", "analyze-repository", "--repo", str(plain))
    analyze = _run_id(env, "analyze-repository")

    repo = make_repo(base / "repo")
    _shep(
        env, "feat", "new", "Add a greeting function", "--repo", str(repo), "--fast", "--allow-all"
    )
    feature = _run_id(env, "feature-fast")
    return Recorded(home, gated, feature, analyze, repo)


@pytest.fixture
def history(recorded: Recorded, shep_home: Path, monkeypatch: pytest.MonkeyPatch) -> Recorded:
    """This test's SHEP_HOME: a copy of the recorded home (the test workflows registered)."""
    shutil.copytree(recorded.home, shep_home)
    for key, value in _env(shep_home).items():
        monkeypatch.setenv(key, value)
    return Recorded(
        shep_home, recorded.gated, recorded.feature, recorded.analyze, recorded.feature_repo
    )
