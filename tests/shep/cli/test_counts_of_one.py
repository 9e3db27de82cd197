"""Counts of one read in the singular wherever shep prints a count: `1 file`, never `1 files`.

The histories are written with the real commands into a real store, and the
CLI runs in-process through ``shep.cli.main``; the guardrails' details are
the ones recorded in the supervisor's decisions and shown by `supervisor why`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from commands.create_run import create_run
from events.store import EventStore
from events.supervisor import Guardrails
from shep.cli import main
from shep.supervisor.guardrails import Metrics, check
from tests.shep.cli.test_feat_views import _merge, new_feature
from tests.shep.workflows.conftest import agent, repo

# Fixtures this folder's conftest does not give (they were beside these tests before the move).
__all__ = ["agent", "repo"]


@pytest.fixture
def shep_out(capsys: pytest.CaptureFixture[str]) -> Callable[..., str]:
    """``shep ARGS`` in this process: its stdout (exit 0 checked)."""

    def run(*args: str) -> str:
        capsys.readouterr()
        code = 0
        try:
            main(list(args))
        except SystemExit as e:
            code = int(e.code or 0)
        out = capsys.readouterr()
        assert code == 0, out.err
        return out.out

    return run


@pytest.fixture(autouse=True)
def isolated_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty-gitconfig"
    empty.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(empty))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")


def test_a_merge_of_one_file_says_1_file_in_feat_show_and_logs(
    shep_out: Callable[..., str], store: EventStore, shep_home: Path, repo: Path
) -> None:
    """A feature merged as one file in one commit: `feat show`'s result line and the
    merge line of `shep logs` say `1 file` (and `1 commit`).
    """
    run_id, plan = new_feature(store, shep_home, repo, "Add a banner")
    commit = _merge(store, run_id, plan)
    shown = shep_out("feat", "show", run_id.hex[:8])
    assert f"merged into main as {commit[:10]} (1 file, +1 -0, 1 commit)" in shown
    logged = shep_out("logs", run_id.hex[:8])
    assert f"merged into main as {commit[:10]}: 1 file, +1 -0" in logged
    assert "1 files" not in shown + logged


def test_a_run_of_one_frame_says_1_frame(
    shep_out: Callable[..., str], store: EventStore, repo: Path
) -> None:
    """A run that was only created has one frame in `shep replay`: `1 frame`."""
    run_id = create_run(
        store,
        workflow="analyze-repository",
        agent_type="demo",
        repo=str(repo),
        node_names=["scan"],
        created_by="tester",
    )
    header = shep_out("replay", run_id.hex[:8]).splitlines()[0]
    assert header.endswith(", 1 frame"), header
    assert "(1 node)" in shep_out("logs", run_id.hex[:8])


def test_guardrail_details_of_one_read_in_the_singular() -> None:
    """The details the guardrails record (and `supervisor why` shows) for one changed
    line, file and path: `1 changed line`, `1 changed file`, `1 changed path`.
    """
    rules = Guardrails(max_diff_lines=5, max_files_changed=5, blocked_paths=["secrets/"])
    metrics = Metrics(diff_lines=1, files_changed=1, paths=("a.py",))
    details = [r.detail for r in check(rules, metrics, "merge")]
    assert details == [
        "1 changed line, within 5",
        "1 changed file, within 5",
        "1 changed path, none blocked",
    ]
    missing = [r.detail for r in check(rules, Metrics(), "merge")]
    assert missing[:2] == ["no diff to count changed lines in", "no diff to count changed files in"]
