"""``shep feat new --fast`` end to end with the REAL claude CLI, on a real git repository.

The scripted LLM answers the ``fast`` step with a tool_use of claude's own ``Write``
tool, so the file is written by claude itself, in the worktree shep made for the
feature (shep passes ``--allowedTools ...,Write,Edit`` for a writing step; that is
what lets a headless ``claude -p`` run Write instead of denying it). The run stops
at the merge gate with no worker; ``shep approve ITEM`` resumes it in the
background, and the merge squashes the branch into the user's ``main``, then
removes the worktree and the branch. The event log keeps the merge commit and the
``fast`` step's snapshot, whose ref lives in the user's repository.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from events.features import FeatureMerged, WorktreeCreated, WorktreeRemoved
from events.runs import NodeCompleted
from events.setting_values import SETTINGS
from events.store import EventStore
from shep.features.start import plan_feature
from shep.home.procs import pid_alive
from tests.cli.test_run_real import Shep
from tests.support.fakellm import FakeLLM
from tests.support.real_clis import TOKEN, CliSetup

pytestmark = [pytest.mark.real_cli, pytest.mark.timeout(300)]

DESCRIPTION = "Add a hello module that prints a greeting"
HELLO = 'def greet() -> str:\n    return "hello from shep"\n\n\nprint(greet())\n'
DONE = "FAST-5d21: wrote hello.py with greet(); nothing else changed."
MARKER = "[shep feature: fast]"


@pytest.fixture
def fake_llm() -> Iterator[FakeLLM]:
    """The scripted LLM; it answers 401 to any key but shep's token."""
    with FakeLLM(api_key=TOKEN) as llm:
        yield llm


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


def _user_repo(path: Path) -> Path:
    """A repository on ``main`` with one commit and its own identity."""
    path.mkdir()
    _git(path, "init", "-q", "-b", "main")
    _git(path, "config", "user.name", "Test User")
    _git(path, "config", "user.email", "test@example.com")
    (path / "README.md").write_text("# app\n")
    _git(path, "add", "README.md")
    _git(path, "commit", "-q", "-m", "initial")
    return path


def _describe(llm: FakeLLM) -> str:
    return "\n".join(
        f"  {r.method} {r.path} [{r.api}{' aux' if r.aux else ''}] -> {r.outcome}"
        for r in llm.requests
    )


def _wait(shep: Shep, run_id: str, done: Callable[[dict[str, Any]], bool], what: str) -> None:
    """Poll ``shep status RUN`` until ``done``; fail at once if the run failed or was cancelled."""
    deadline = time.monotonic() + 180
    row: dict[str, Any] = {}
    while time.monotonic() < deadline:
        row = json.loads(shep("status", run_id, "--json").stdout)
        if done(row):
            return
        if row["status"] in ("failed", "cancelled", "interrupted"):
            break
        time.sleep(0.2)
    log = shep("logs", run_id, check=False).stdout[-4000:]
    raise AssertionError(f"waiting for {what}, the run is {row.get('status')}:\n{log}")


@pytest.mark.parametrize("agent", ["claude-code"])
def test_fast_feature_is_written_by_claude_and_squash_merged(
    agent: str, cli: CliSetup, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """claude's Write tool creates hello.py in the feature's worktree; the run waits at the
    merge gate (1 file changed); once approved, main gets one squash commit with exactly
    that file, the worktree and branch are gone, and the log holds FeatureMerged with that
    commit and the fast step's snapshot, readable from the user's repository.
    """
    repo = _user_repo(tmp_path / "repo")
    base_sha = _git(repo, "rev-parse", "HEAD").strip()
    home = tmp_path / "shep-home"
    shep = Shep(cli, home)
    shep(
        "settings", "agent", "--agent", agent, "--auth", "token", "--token-stdin",
        "--binary", str(cli.binary), stdin=TOKEN + "\n",
    )  # fmt: skip

    # Write takes an absolute path, so the script needs the worktree shep will make:
    # shep's own choice (nothing is made by plan_feature), checked against what it says.
    prefix = str(SETTINGS["branch_prefix"].default)
    planned = plan_feature(home, repo, DESCRIPTION, base=None, prefix=prefix)
    worktree = planned.worktree
    fake_llm.enqueue_tool_call(
        "Write",
        {"file_path": str(worktree / "hello.py"), "content": HELLO},
        text="I'll add hello.py.",
    )
    fake_llm.enqueue_text(DONE)

    started = shep("feat", "new", DESCRIPTION, "--fast", "--repo", str(repo), timeout=180)
    assert f"branch {planned.branch} from main" in started.stderr, started.stderr
    assert f"worktree {worktree}" in started.stderr, started.stderr
    runs = json.loads(shep("status", "--json").stdout)
    assert len(runs) == 1, runs
    run_id = runs[0]["run_id"]
    _wait(shep, run_id, lambda r: r["status"] == "waiting_approval", "the merge gate")
    worker = json.loads(shep("status", run_id, "--json").stdout)["pid"]
    deadline = time.monotonic() + 30
    while pid_alive(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pid_alive(worker), f"worker {worker} still runs while the run waits"

    # claude asked the model twice (the Write call, then the answer after its result),
    # both times with the fast step's prompt, and the tool really ran: no denial.
    assert fake_llm.pending() == 0, f"scripted replies left over:\n{_describe(fake_llm)}"
    calls = fake_llm.model_requests
    assert len(calls) == 2, _describe(fake_llm)
    assert all(c.api_key == TOKEN for c in calls)
    assert all(MARKER in c.dumps() for c in calls)
    results = [
        block
        for message in calls[1].body["messages"]
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]
    assert len(results) == 1, results
    assert not results[0].get("is_error"), results[0]
    assert (worktree / "hello.py").read_text() == HELLO
    assert not (repo / "hello.py").exists()

    # The gate is in the inbox, and its summary measures the agent's work.
    items = json.loads(shep("inbox", "--json").stdout)
    assert [(i["kind"], i["run_id"], i["node"]) for i in items] == [
        ("approval", run_id, "merge_gate")
    ], items
    gate = items[0]
    assert gate["prompt"].startswith(f"Merge {planned.branch} into main: "), gate
    assert re.search(r"\b1 files? changed\b", gate["prompt"]), gate["prompt"]
    assert _git(repo, "rev-parse", "main").strip() == base_sha

    approved = shep("approve", gate["item_id"])
    assert approved.stdout.startswith(f"Approved {gate['item_id'][:8]} "), approved
    _wait(shep, run_id, lambda r: r["status"] == "completed", "completion after the approval")
    assert json.loads(shep("inbox", "--json").stdout) == []

    # main has one new commit, a squash (one parent), adding exactly hello.py.
    head = _git(repo, "rev-parse", "main").strip()
    assert _git(repo, "rev-list", f"{base_sha}..main").split() == [head]
    assert _git(repo, "rev-list", "--parents", "-n", "1", head).split() == [head, base_sha]
    assert _git(repo, "diff", "--name-status", base_sha, head).splitlines() == ["A\thello.py"]
    assert _git(repo, "show", f"{head}:hello.py") == HELLO
    # No spec.yaml in a fast feature: the description is the subject; the user's identity.
    assert _git(repo, "log", "-1", "--format=%s%n%an <%ae>", head).splitlines() == [
        DESCRIPTION,
        "Test User <test@example.com>",
    ]
    assert _git(repo, "status", "--porcelain") == ""
    # The worktree and the branch are gone, from the disk and from git's records.
    assert not worktree.exists()
    assert str(worktree) not in _git(repo, "worktree", "list", "--porcelain")
    assert _git(repo, "branch", "--list", planned.branch) == ""

    with EventStore(home / "shep.db") as store:
        events = store.load(UUID(run_id))
    created = [e for e in events if isinstance(e, WorktreeCreated)]
    assert [(e.path, e.branch, e.base, e.base_sha) for e in created] == [
        (str(worktree), planned.branch, "main", base_sha)
    ]
    merged = [e for e in events if isinstance(e, FeatureMerged)]
    assert [(e.into, e.commit, e.files) for e in merged] == [("main", head, 1)]
    removed = [e for e in events if isinstance(e, WorktreeRemoved)]
    assert [(e.path, e.branch, e.branch_deleted) for e in removed] == [
        (str(worktree), planned.branch, True)
    ]
    fast = [e for e in events if isinstance(e, NodeCompleted) and e.node == "fast"]
    assert len(fast) == 1, fast
    snapshot = fast[0].snapshot
    assert snapshot, fast
    # The worktree is gone, but its refs live in the shared object store.
    assert _git(repo, "cat-file", "-p", f"{snapshot}:hello.py") == HELLO
    refs = _git(repo, "for-each-ref", "--format=%(objectname) %(refname)", "refs/shep/")
    assert f"{snapshot} refs/shep/runs/{run_id}/" in refs, refs
    assert TOKEN not in json.dumps(
        [json.loads(x) for x in shep("logs", run_id, "--json").stdout.splitlines()]
    )
    assert shep("audit", "verify").stdout.startswith("OK: ")
