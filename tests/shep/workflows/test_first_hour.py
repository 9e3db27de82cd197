"""The order a new user follows (the README, docs/teams.md): analyze a repository, then
start a feature in it; from the repository's root or from a subdirectory of it.

The real CLI as subprocesses, the built-in demo agent, the bundled sample repository
made a git repository.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from events.features import FeatureMerged
from events.runs import RunCompleted, RunCreated
from shep.demo import SAMPLE_REPO
from tests.shep.workflows.conftest import FeatureAgent, git
from tests.shep.workflows.test_feature_workflow import feat_new
from tests.support.event_log import of_type, read_events, run_stream


def _shep(cwd: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``shep ARGS`` run from ``cwd``, as a user types it there."""
    return subprocess.run(
        [sys.executable, "-m", "shep", *args],
        cwd=cwd,
        env={**os.environ, "SHEP_DEMO_DELAY": "0"},
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
    )


@pytest.fixture
def sample(tmp_path: Path) -> Path:
    """The sample repository, committed on main; the demo agent configured."""
    repo = tmp_path / "inventory"
    shutil.copytree(SAMPLE_REPO, repo, ignore=shutil.ignore_patterns("__pycache__"))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "Test User")
    git(repo, "config", "user.email", "test@example.com")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "initial")
    configured = _shep(tmp_path, "settings", "agent", "--agent", "demo")
    assert configured.returncode == 0, configured.stderr
    return repo


@pytest.mark.slow
def test_run_and_feat_new_from_a_subdirectory_work_on_the_whole_repository(
    sample: Path, shep_home: Path
) -> None:
    """`shep run analyze-repository` and `shep feat new` started in a subdirectory both take
    the repository's root (one rule): the analysis covers the root and its report is
    written there, and the feature's repository is the same root.
    """
    subdirectory = sample / "inventory"
    started = _shep(subdirectory, "feat", "new", "Add a low-stock report", "--background")
    assert started.returncode == 0, started.stderr
    analyzed = _shep(subdirectory, "run", "analyze-repository")
    assert analyzed.returncode == 0, analyzed.stderr
    feature, analysis = of_type(read_events(shep_home), RunCreated)
    assert analysis.workflow == "analyze-repository"
    assert analysis.repo == str(sample.resolve())
    assert feature.inputs["source_repo"] == analysis.repo
    assert (sample / "shep-analysis.md").is_file()
    assert not (subdirectory / "shep-analysis.md").exists()
    _shep(sample, "cancel", feature.originator_id.hex[:8])


@pytest.mark.slow
def test_analyze_then_a_feature_in_the_same_repository_runs_to_the_merge(
    sample: Path, shep_home: Path
) -> None:
    """The documented order: analyze-repository leaves its report (untracked) in the
    repository, and `shep feat new` there starts anyway, and its merge goes through; the
    report stays where it was, untracked and unchanged. Other uncommitted changes still
    stop `feat new`.
    """
    analyzed = _shep(sample.parent, "run", "analyze-repository", "--repo", str(sample))
    assert analyzed.returncode == 0, analyzed.stderr
    report = (sample / "shep-analysis.md").read_text()
    assert git(sample, "status", "--porcelain") == "?? shep-analysis.md"

    started = _shep(sample.parent, "feat", "new", "Add a low-stock report", "--repo", str(sample))
    assert started.returncode == 0, started.stderr
    [question] = _inbox(sample)
    answered = _shep(sample, "answer", question, "--option", "1", "--wait")
    assert answered.returncode == 0, answered.stderr
    for _ in range(3):  # the requirements, plan and merge gates
        [gate] = _inbox(sample)
        approved = _shep(sample, "approve", gate, "--wait")
        assert approved.returncode == 0, approved.stderr
    feature = of_type(read_events(shep_home), RunCreated)[-1].originator_id.hex
    events = run_stream(read_events(shep_home), feature)
    assert of_type(events, RunCompleted)
    [merged] = of_type(events, FeatureMerged)
    assert git(sample, "rev-parse", "main") == merged.commit
    assert (sample / "shep-analysis.md").read_text() == report
    assert git(sample, "status", "--porcelain") == "?? shep-analysis.md"

    (sample / "notes.txt").write_text("mine\n")
    refused = _shep(sample, "feat", "new", "Add a restock command", "--repo", str(sample))
    assert refused.returncode != 0
    assert "uncommitted changes on main (notes.txt)" in refused.stderr


def _inbox(cwd: Path) -> list[str]:
    """The ids of the items waiting in the inbox."""
    listed = _shep(cwd, "inbox", "--json")
    assert listed.returncode == 0, listed.stderr
    return [item["item_id"] for item in json.loads(listed.stdout)]


@pytest.mark.slow
def test_a_feature_that_writes_the_reports_path_waits_for_the_untracked_report(
    repo: Path, agent: FeatureAgent, shep_home: Path
) -> None:
    """An untracked shep-analysis.md is let be only while the merge leaves it alone: a
    feature whose branch adds that same path stops at the merge with the question about
    uncommitted changes naming it, and the user's report is untouched.
    """
    (repo / "shep-analysis.md").write_text("# the user's report\n")
    agent.script(fast_files={"shep-analysis.md": "# the agent's\n"})
    started = feat_new(repo, "--fast", "--allow-all")
    assert started.returncode == 0, started.stderr
    [question] = json.loads(_shep(repo, "inbox", "--json").stdout)
    assert question["node"] == "conflict"
    assert "uncommitted changes on main (shep-analysis.md)" in question["prompt"]
    assert (repo / "shep-analysis.md").read_text() == "# the user's report\n"
