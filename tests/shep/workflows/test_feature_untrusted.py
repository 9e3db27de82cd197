"""Whole features against a hostile agent or repository, and crashes at git's worst moments.

The agent is ``fake_feature_agent.py`` as `claude` (its ``shell`` behaviour plays an
agent's shell tool); crashes are real SIGKILLs of the worker, landed by
``stopping_git.py`` (the real git, stopped at a chosen command) while shep waits on git.
What is checked is what a user would find: their repository's refs and files, the
event log, files outside the repository, markers left by commands that must not run.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from events.features import (
    FeatureMerged,
    MergePrepared,
    ReviewedTreeRestored,
    TaskCompleted,
    WorktreeCreated,
    WorktreeRemoved,
)
from events.runs import RunCompleted, RunCreated, RunFailed, RunStarted
from shep.git import slugify
from shep.home.procs import pid_alive
from tests.shep.workflows.conftest import FeatureAgent, git
from tests.shep.workflows.test_feature_workflow import (
    DESCRIPTION,
    assert_merged,
    branches,
    decide,
    feat_new,
    inbox,
    only_run,
    run_events,
    show,
    snapshot_refs,
    tree_files,
)
from tests.support.cli import shep
from tests.support.event_log import of_type, read_events, wait_until

STOPPING = Path(__file__).with_name("stopping_git.py")
HOOKS = (
    "post-index-change",
    "pre-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "post-checkout",
    "post-merge",
    "reference-transaction",
    "post-rewrite",
)

StopAt = Callable[..., Path]


@pytest.fixture
def stop_at(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StopAt:
    """``stop_at(*match, when=...)``: the next git command shep runs that matches stops
    there (see ``stopping_git``); returns the marker file it writes when it does."""
    real = shutil.which("git")
    assert real is not None
    bin_dir = tmp_path / "stopping-git"
    bin_dir.mkdir()
    wrapper = bin_dir / "git"
    wrapper.write_text(f"#!{sys.executable}\n" + STOPPING.read_text())
    wrapper.chmod(0o755)
    rules_file = tmp_path / "stopping-git.json"
    rules: list[dict[str, Any]] = []
    rules_file.write_text("[]")
    monkeypatch.setenv("STOPPING_GIT_REAL", real)
    monkeypatch.setenv("STOPPING_GIT_RULES", str(rules_file))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    def add(*match: str, when: str = "after") -> Path:
        marker = tmp_path / f"stopped-{len(rules)}.json"
        rules.append({"match": list(match), "marker": str(marker), "when": when})
        rules_file.write_text(json.dumps(rules))
        return marker

    return add


def kill_where_stopped(marker: Path) -> dict[str, int]:
    """Wait until git stopped at ``marker``'s rule; SIGKILL shep's process that ran it,
    the stopped git and its hook (as a crash of the machine's worker would)."""
    wait_until(marker.exists, timeout=90, what=f"git to stop at {marker.name}")
    stopped: dict[str, int] = json.loads(marker.read_text())
    for pid in (stopped["ppid"], stopped["pid"], stopped.get("hook", 0)):
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not pid_alive(stopped["ppid"]), timeout=10, what="shep to die")
    return stopped


# -- hooks and a rewritten .git ----------------------------------------------------------------


@pytest.mark.slow
def test_a_whole_feature_runs_none_of_the_repositorys_hooks(
    repo: Path, agent: FeatureAgent, shep_home: Path, tmp_path: Path
) -> None:
    """A husky-style relative core.hooksPath whose hooks are in the repository (so in the
    worktree, where the agent can change them): a feature from worktree to snapshots,
    commit, squash merge into the user's checkout and cleanup runs none of them.
    """
    markers = tmp_path / "hooks-ran"
    (repo / ".husky").mkdir()
    for name in HOOKS:
        hook = repo / ".husky" / name
        hook.write_text(f'#!/bin/sh\necho "{name} $PWD" >> "{markers}"\n')
        hook.chmod(0o755)
    git(repo, "add", ".husky")
    git(repo, "-c", "core.hooksPath=/dev/null", "commit", "-q", "-m", "husky hooks")
    git(repo, "config", "core.hooksPath", ".husky")
    old_tip = git(repo, "rev-parse", "HEAD")
    # The project's test command is the user's to run hooks in (the fixture's runs git).
    shep("settings", "set", "test_command", f"{sys.executable} -c pass", check=True)

    done = feat_new(repo, "--allow-all")
    assert done.returncode == 0, done.stderr
    run_id = only_run(shep_home)
    assert_merged(repo, shep_home, run_id, old_tip=old_tip)
    assert len(snapshot_refs(repo, run_id)) > 3
    assert not markers.exists(), markers.read_text()


@pytest.mark.slow
def test_an_agent_that_rewrites_the_git_file_stops_the_run_and_nothing_of_it_runs(
    repo: Path, agent: FeatureAgent, shep_home: Path, tmp_path: Path
) -> None:
    """During task t1 the agent points the worktree's ``.git`` at a git directory it made,
    whose config sets core.fsmonitor to a command. The command never runs; the run fails
    with one line saying so (RunFailed records it); every snapshot is in the user's
    repository (refs/shep/runs), none in the agent's git directory; the base is untouched.
    """
    ran = tmp_path / "fsmonitor-ran"
    monitor = tmp_path / "fsmonitor"
    monitor.write_text(f'#!/bin/sh\necho ran >> "{ran}"\n')
    monitor.chmod(0o755)
    evil = tmp_path / "agents-git-dir"
    agent.script(
        calls={
            "implement:t1": [
                {
                    "shell": f"git init -q '{evil}' && git -C '{evil}' config core.fsmonitor "
                    f"'{monitor}' && echo 'gitdir: {evil}/.git' > .git"
                }
            ]
        }
    )
    old_tip = git(repo, "rev-parse", "HEAD")
    done = feat_new(repo, "--allow-all")
    assert not ran.exists(), "shep's git ran the agent's fsmonitor command"
    assert git(evil, "for-each-ref") == ""
    run_id = only_run(shep_home)
    events = run_events(shep_home, run_id)
    [failed] = of_type(events, RunFailed)
    assert failed.error_type == "WorktreeLinkChangedError"
    assert "not the git directory shep made for this worktree" in failed.message
    assert done.returncode != 0
    assert "not the git directory shep made for this worktree" in done.stderr
    refs = snapshot_refs(repo, run_id)
    assert len(refs) >= 3  # analyze .. plan: every node before the agent rewrote .git
    assert of_type(events, TaskCompleted) == []
    assert git(repo, "rev-parse", "main") == old_tip


@pytest.mark.slow
def test_files_changed_after_the_merge_gate_was_shown_are_not_merged(
    repo: Path, agent: FeatureAgent, shep_home: Path
) -> None:
    """While the merge gate waits, something the agent left running adds a file to the
    worktree and rewrites the approved one. Approved, the merge takes exactly the tree the
    gate showed (its approval names that tree); what changed is kept in a snapshot, and
    the run's log says so.
    """
    old_tip = git(repo, "rev-parse", "HEAD")
    shown = feat_new(repo, "--fast")
    assert shown.returncode == 0, shown.stderr
    run_id = only_run(shep_home)
    [gate] = inbox()
    [created] = of_type(run_events(shep_home, run_id), WorktreeCreated)
    worktree = Path(created.path)
    (worktree / "backdoor.py").write_text("import os\n")
    (worktree / "src" / "fast.py").write_text("FAST = 'changed after review'\n")

    decide("approve", gate["item_id"][:8])
    tip = assert_merged(repo, shep_home, run_id, old_tip=old_tip)
    assert tree_files(repo, tip) == ["README.md", "src/app.py", "src/fast.py"]
    assert show(repo, tip, "src/fast.py") == "FAST = True\n"
    kept = [sha for sha in snapshot_refs(repo, run_id) if "backdoor.py" in tree_files(repo, sha)]
    assert len(kept) == 1
    assert show(repo, kept[0], "src/fast.py") == "FAST = 'changed after review'\n"
    [restored] = of_type(run_events(shep_home, run_id), ReviewedTreeRestored)
    assert restored.approved == git(repo, "rev-parse", f"{tip}^{{tree}}")
    assert restored.found == git(repo, "rev-parse", f"{kept[0]}^{{tree}}")
    assert restored.kept == kept[0]
    logged = shep("logs", run_id[:8], check=True).stdout
    assert f"put back to the tree it approved ({restored.approved[:12]})" in logged
    assert f"kept in snapshot {kept[0][:10]}" in logged


# -- restoring a cut-off task ------------------------------------------------------------------


@pytest.mark.slow
def test_resuming_a_cut_off_task_never_deletes_a_file_through_a_symlink(
    repo: Path, agent: FeatureAgent, shep_home: Path, tmp_path: Path
) -> None:
    """A committed link ``out -> <a directory outside>``, and a task of a parallel phase
    declaring ``out/victim.txt``. The worker is SIGKILLed while that task runs, after its
    sibling finished; `shep resume` restores the cut-off task's files: the file outside
    the repository is not deleted (it still starts with what the user wrote).
    """
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.txt"
    victim.write_text("the user's own file\n")
    (repo / "out").symlink_to(outside)
    git(repo, "add", "out")
    git(repo, "commit", "-q", "-m", "a link out")
    agent.script(
        phases=[{"id": "p1", "name": "Side by side", "parallel": True}],
        tasks=[
            {"id": "t1", "phase": "p1", "files": ["src/one.py"]},
            {"id": "t2", "phase": "p1", "files": ["out/victim.txt"]},
        ],
        after_hang_of={"implement:t1": "implement:t2"},
        calls={"implement:t2": [{"hang": True, "hang_seconds": 60}]},
    )
    started = feat_new(repo, "--allow-all", "--background")
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip()
    wait_until(
        lambda: of_type(run_events(shep_home, run_id), TaskCompleted, task="t1"),
        what="t1 to complete while t2 hangs",
    )
    [owner] = of_type(run_events(shep_home, run_id), RunStarted)
    os.kill(owner.pid, signal.SIGKILL)
    wait_until(lambda: not pid_alive(owner.pid), timeout=10, what="the worker to die")
    agent.kill_leftovers()

    resumed = shep("resume", run_id[:8], timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert victim.exists(), "shep deleted a file outside the repository"
    assert victim.read_text().startswith("the user's own file\n")
    assert of_type(run_events(shep_home, run_id), RunCompleted)


# -- the merge: found only by the commit this run made -------------------------------------------


@pytest.mark.slow
def test_a_later_feature_quoting_the_run_trailer_is_not_taken_for_the_merge(
    repo: Path, agent: FeatureAgent, shep_home: Path
) -> None:
    """Feature A waits at its merge gate; feature B, whose description holds A's
    ``Shep-Run: <A's run id>`` line, merges first. Approving A merges A's own work in a
    commit of its own: B's commit is not recorded as A's merge, and A's branch is not
    deleted unmerged.
    """
    agent.script(tasks=[{"id": "t1", "phase": "p1", "files": ["src/a.py"]}])
    first = feat_new(repo, "--allow-prd", "--allow-plan", description="Add feature A")
    assert first.returncode == 0, first.stderr
    run_a = only_run(shep_home)
    [gate] = inbox()
    agent.script(tasks=[{"id": "t1", "phase": "p1", "files": ["src/b.py"]}])
    description = f"Add feature B\n\nShep-Run: {run_a}"
    second = feat_new(repo, "--allow-all", description=description)
    assert second.returncode == 0, second.stderr
    b_tip = git(repo, "rev-parse", "main")
    assert f"Shep-Run: {run_a}" in git(repo, "log", "-1", "--format=%B", b_tip)

    approved = shep("approve", gate["item_id"][:8], "--wait", timeout=120)
    assert approved.returncode == 0, approved.stderr
    events = run_events(shep_home, run_a)
    [merged] = of_type(events, FeatureMerged)
    assert merged.commit != b_tip, "B's commit was taken for A's merge"
    assert git(repo, "rev-parse", "main") == merged.commit
    assert git(repo, "rev-list", "--parents", "-n", "1", merged.commit).split()[1:] == [b_tip]
    assert show(repo, merged.commit, "src/a.py") == "# written by task t1\n"
    assert [e.commit for e in of_type(events, MergePrepared)] == [merged.commit]


@pytest.mark.slow
def test_sigkill_right_after_the_base_moved_off_checkout_still_records_the_merge(
    repo: Path, agent: FeatureAgent, shep_home: Path, stop_at: StopAt
) -> None:
    """The base is checked out nowhere (the user is on another branch): the worker is
    SIGKILLed the moment ``update-ref`` moved it to the squash commit. `shep resume`
    records that commit as the merge (the one MergePrepared named) and makes no other.
    """
    git(repo, "checkout", "-q", "-b", "elsewhere")
    old_tip = git(repo, "rev-parse", "main")
    marker = stop_at("update-ref", "refs/heads/main")
    started = feat_new(repo, "--allow-all", "--base", "main", "--background")
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip()
    kill_where_stopped(marker)
    squash = git(repo, "rev-parse", "main")
    assert squash != old_tip
    events = run_events(shep_home, run_id)
    assert of_type(events, FeatureMerged) == []
    assert [e.commit for e in of_type(events, MergePrepared)] == [squash]

    resumed = shep("resume", run_id[:8], timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert git(repo, "rev-parse", "main") == squash, "a second squash commit"
    assert [e.commit for e in of_type(run_events(shep_home, run_id), FeatureMerged)] == [squash]
    assert assert_merged(repo, shep_home, run_id, old_tip=old_tip) == squash


# -- a kill at the worst moments of cleanup ---------------------------------------------------


@pytest.mark.slow
def test_a_kill_during_branch_deletion_records_the_branch_as_gone(
    repo: Path, agent: FeatureAgent, shep_home: Path, stop_at: StopAt
) -> None:
    """The worker is SIGKILLed once git deleted the feature branch, before shep recorded
    the worktree's removal: after `shep resume`, WorktreeRemoved says the branch was
    deleted, as git's refs say.
    """
    marker = stop_at("branch", "-D")
    started = feat_new(repo, "--allow-all", "--background")
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip()
    kill_where_stopped(marker)
    events = run_events(shep_home, run_id)
    [created] = of_type(events, WorktreeCreated)
    assert created.branch not in branches(repo)
    assert of_type(events, WorktreeRemoved) == []

    resumed = shep("resume", run_id[:8], timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    [removed] = of_type(run_events(shep_home, run_id), WorktreeRemoved)
    assert removed.branch_deleted is True
    assert "deleted" in shep("logs", run_id[:8], check=True).stdout.split("worktree")[-1]


@pytest.mark.slow
def test_locks_left_by_a_git_killed_with_its_worker_do_not_stop_resume(
    repo: Path, agent: FeatureAgent, shep_home: Path, stop_at: StopAt
) -> None:
    """The worker and its git are SIGKILLed while git holds the feature branch's lock, moving
    it to the feature's commit: `shep resume` finds no live git holding it, removes it,
    and the feature merges.
    """
    branch = f"refs/heads/shep/{slugify(DESCRIPTION)}"
    marker = stop_at("update-ref", branch, when="holding")
    old_tip = git(repo, "rev-parse", "HEAD")
    started = feat_new(repo, "--allow-all", "--background")
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip()
    kill_where_stopped(marker)
    assert (repo / ".git" / f"{branch}.lock").exists()

    resumed = shep("resume", run_id[:8], timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert ".lock" not in resumed.stderr
    assert_merged(repo, shep_home, run_id, old_tip=old_tip)


# -- an empty repository -----------------------------------------------------------------------


def test_feat_new_in_a_repository_without_a_commit_says_so(
    tmp_path: Path, agent: FeatureAgent, shep_home: Path
) -> None:
    """`git init` and nothing more: one line saying the repository has no commit yet,
    exit code 1, nothing made."""
    empty = tmp_path / "empty"
    subprocess.run(["git", "init", "-q", "-b", "trunk", str(empty)], check=True)
    result = feat_new(empty, "--allow-all")
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "has no commit yet on trunk" in lines[0]
    assert "is not a commit" not in lines[0]
    assert of_type(read_events(shep_home), RunCreated) == []
    assert agent.calls() == []


# -- a fork killed while its worktree is made ----------------------------------------------------


@pytest.mark.slow
def test_gc_reports_and_removes_what_a_fork_killed_while_making_its_worktree_left(
    repo: Path, agent: FeatureAgent, shep_home: Path, stop_at: StopAt
) -> None:
    """`shep fork` of a feature is SIGKILLed once git made its branch and worktree, before
    its run exists: `shep feat gc --dry-run` names the branch and the worktree as a
    leftover, `shep feat gc` removes both, and the finished feature is left alone.
    """
    done = feat_new(repo, "--allow-prd", "--allow-plan")
    assert done.returncode == 0, done.stderr
    run_id = only_run(shep_home)
    events = run_events(shep_home, run_id)
    checkpoint = next(
        e for e in events if type(e).__name__ == "CheckpointSaved" and e.checkpoint_ns == ""
    )
    marker = stop_at("worktree", "add")
    fork = subprocess.Popen(
        [sys.executable, "-m", "shep", "fork", run_id[:8], "--at", checkpoint.checkpoint_id],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    kill_where_stopped(marker)
    fork.wait(timeout=10)
    left = [b for b in branches(repo) if b not in (created_branch(shep_home, run_id), "main")]
    assert len(left) == 1, branches(repo)
    leftover = left[0]
    assert of_type(read_events(shep_home), RunCreated)[1:] == []

    dry = shep("feat", "gc", "--dry-run", check=True)
    assert leftover in dry.stdout, dry.stdout
    assert leftover in branches(repo)
    cleaned = shep("feat", "gc", check=True)
    assert leftover in cleaned.stdout, cleaned.stdout
    assert leftover not in branches(repo)
    assert created_branch(shep_home, run_id) in branches(repo)
    assert "orphan" not in shep("feat", "gc", "--dry-run", check=True).stdout


def created_branch(home: Path, run_id: str) -> str:
    [created] = of_type(run_events(home, run_id), WorktreeCreated)
    return created.branch


@pytest.mark.slow
def test_merge_hooks_run_the_users_hooks_at_the_merge(
    repo: Path, agent: FeatureAgent, shep_home: Path, tmp_path: Path
) -> None:
    """With the merge_hooks setting on, the user's post-merge hook runs when shep moves
    their checkout to the squash commit (and only then: no commit hook ran before)."""
    markers = tmp_path / "hooks-ran"
    for name in ("post-merge", "post-commit", "post-index-change"):
        hook = repo / ".git" / "hooks" / name
        hook.write_text(f'#!/bin/sh\necho {name} >> "{markers}"\n')
        hook.chmod(0o755)
    shep("settings", "workflow", "--merge-hooks", check=True)
    old_tip = git(repo, "rev-parse", "HEAD")
    done = feat_new(repo, "--allow-all")
    assert done.returncode == 0, done.stderr
    assert_merged(repo, shep_home, only_run(shep_home), old_tip=old_tip)
    ran = markers.read_text().split()
    assert "post-merge" in ran
    assert "post-commit" not in ran
