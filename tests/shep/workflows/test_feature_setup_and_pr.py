"""The worktree setup command, and --pr (a fake `gh`, a real bare remote): what they record."""

from __future__ import annotations

import json
import stat
import subprocess
from pathlib import Path

import pytest

from events.features import (
    BranchPushed,
    FeatureMerged,
    PullRequestOpened,
    WorktreeRemoved,
    WorktreeSetupRan,
)
from events.runs import RunCreated, RunFailed
from tests.shep.workflows.conftest import FeatureAgent, git
from tests.shep.workflows.test_feature_workflow import (
    branches,
    decide,
    feat_new,
    inbox,
    only_run,
    run_events,
)
from tests.support.cli import shep
from tests.support.event_log import of_type, read_events


def test_the_setup_command_runs_in_the_worktree_with_the_features_variables(
    repo: Path, agent: FeatureAgent, shep_home: Path
) -> None:
    shep(
        "settings",
        "workflow",
        "--setup-command",
        "sh -c 'echo \"$SHEP_BRANCH $SHEP_BASE $SHEP_SPEC_DIR\" > setup.txt'",
        check=True,
    )
    result = feat_new(repo, "--fast")
    assert result.returncode == 0, result.stderr
    run_id = only_run(shep_home)
    [ran] = of_type(run_events(shep_home, run_id), WorktreeSetupRan)
    assert ran.exit_code == 0
    worktree = Path(json.loads(shep("status", run_id[:8], "--json", check=True).stdout)["repo"])
    branch, base, spec_dir = (worktree / "setup.txt").read_text().split()
    assert (branch, base) == (git(worktree, "branch", "--show-current"), "main")
    assert spec_dir.startswith("specs/001-")


def test_a_failing_setup_command_fails_the_run_with_its_output(
    repo: Path, agent: FeatureAgent, shep_home: Path
) -> None:
    shep(
        "settings",
        "workflow",
        "--setup-command",
        "sh -c 'echo npm ci broke >&2; exit 3'",
        check=True,
    )
    result = feat_new(repo, "--fast")
    assert result.returncode == 1
    assert "exited with 3" in result.stderr
    run_id = only_run(shep_home)
    events = run_events(shep_home, run_id)
    [ran] = of_type(events, WorktreeSetupRan)
    assert (ran.exit_code, ran.output_tail.strip()) == (3, "npm ci broke")
    [failed] = of_type(events, RunFailed)
    assert "npm ci broke" in failed.message
    assert agent.called() == []  # nothing ran after the setup


def _fake_gh(bin_dir: Path, log: Path) -> None:
    """A `gh` that records its calls and says a PR exists once created."""
    gh = bin_dir / "gh"
    gh.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> {log}\n'
        'case "$1 $2" in\n'
        '  "pr create") echo https://github.example/o/r/pull/7 ;;\n'
        '  "pr view") echo \'{"url": "https://github.example/o/r/pull/7", "number": 7}\' ;;\n'
        "  *) exit 1 ;;\n"
        "esac\n"
    )
    gh.chmod(gh.stat().st_mode | stat.S_IEXEC)


@pytest.mark.parametrize("flag", ["--pr", "--push"])
def test_pr_or_push_in_a_repository_without_a_remote_is_refused_before_anything_runs(
    repo: Path, agent: FeatureAgent, shep_home: Path, flag: str
) -> None:
    """--pr (or --push) where there is no remote to push to: one line saying so, at once,
    not after the whole run; no run, branch or worktree is made, no agent called."""
    assert git(repo, "remote") == ""
    before = branches(repo)
    result = feat_new(repo, "--allow-all", flag)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0] == (
        f"shep: --push/--pr need a remote, and {repo.resolve()} has none. Add one "
        "(`git remote add origin URL`), or leave them out to merge locally."
    )
    assert of_type(read_events(shep_home), RunCreated) == []
    assert branches(repo) == before
    assert not (shep_home / "worktrees").exists() or not any((shep_home / "worktrees").iterdir())
    assert agent.calls() == []


def test_a_partial_clone_is_refused_before_anything_runs(
    repo: Path, agent: FeatureAgent, shep_home: Path, tmp_path: Path
) -> None:
    """A partial clone (``--filter``) fetches missing objects on demand, which shep's git
    never does: one line saying so and what to use instead; nothing made, no agent."""
    git(repo, "config", "core.repositoryformatversion", "1")
    git(repo, "config", "remote.origin.url", str(tmp_path / "elsewhere"))
    git(repo, "config", "remote.origin.promisor", "true")
    git(repo, "config", "extensions.partialClone", "origin")
    result = feat_new(repo, "--allow-all")
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"shep: {repo.resolve()} is a partial clone")
    assert "(`git clone` without --filter)" in lines[0]
    assert of_type(read_events(shep_home), RunCreated) == []
    assert agent.calls() == []


@pytest.mark.slow
def test_pr_pushes_the_branch_and_opens_a_pull_request_instead_of_merging(
    repo: Path, agent: FeatureAgent, shep_home: Path, tmp_path: Path
) -> None:
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    git(repo, "remote", "add", "origin", str(remote))
    log = tmp_path / "gh.log"
    _fake_gh(agent.binary.parent, log)
    old_tip = git(repo, "rev-parse", "main")

    result = feat_new(repo, "--fast", "--pr")
    assert result.returncode == 0, result.stderr
    [gate] = inbox()
    decide("approve", gate["item_id"][:8])

    run_id = only_run(shep_home)
    events = run_events(shep_home, run_id)
    [pushed] = of_type(events, BranchPushed)
    # The pushed commit is the branch's tip, checked on the remote.
    assert git(remote, "rev-parse", f"refs/heads/{pushed.branch}") == pushed.commit
    [opened] = of_type(events, PullRequestOpened)
    assert (opened.url, opened.number) == ("https://github.example/o/r/pull/7", 7)
    calls = log.read_text()
    assert "pr create" in calls
    assert "pr view" in calls
    assert not of_type(events, FeatureMerged)
    assert git(repo, "rev-parse", "main") == old_tip  # nothing merged locally
    [removed] = of_type(events, WorktreeRemoved)
    assert not removed.branch_deleted
    assert pushed.branch in branches(repo)  # the PR's branch stays
