"""`shep demo`: a first run with no agent CLI, in a temporary home."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import shep
from tests.support.terminal import Terminal


def test_demo_runs_end_to_end_in_its_own_home(shep_home: Path) -> None:
    """The demo analyzes the sample repository, shows status and logs, and leaves
    the user's own SHEP_HOME untouched."""
    result = shep("demo", "--delay", "0", timeout=120)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "DEMO agent (canned answers, not an AI)" in out
    assert "$ shep status" in out
    assert "run.completed" in out
    report = Path(re.search(r"The report is (\S+)\.", out).group(1))  # type: ignore[union-attr]
    assert report.read_text().startswith("# Repository analysis: inventory")
    assert "demo agent" in report.read_text()
    assert not shep_home.exists()
    demo_home = report.parent.parent
    verify = shep("audit", "verify", env={"SHEP_HOME": str(demo_home)})
    assert verify.returncode == 0
    assert verify.stdout.startswith("OK: ")


def _finished_demo(tmp: Path) -> Path:
    """The one demo home the demo made under ``tmp`` (its TMPDIR), checked to be done:
    its feature merged into the sample repository, and no run left running or waiting.
    """
    [home] = tmp.glob("shep-demo-*")
    listed = shep("status", "--all", "--json", env={"SHEP_HOME": str(home)})
    runs = json.loads(listed.stdout)
    assert [(r["workflow"], r["status"]) for r in runs] == [("feature", "completed")], runs
    subject = subprocess.run(
        ["git", "-C", str(home / "inventory"), "log", "-1", "--format=%s"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert subject.startswith("Add a low-stock report"), subject
    shown = shep("feat", "show", runs[0]["run_id"][:8], env={"SHEP_HOME": str(home)})
    assert "result    merged into main" in shown.stdout, shown.stdout
    return home


@pytest.mark.slow
def test_demo_feature_runs_unattended_on_a_terminal(tmp_path: Path) -> None:
    """`shep demo feature` on a real terminal, nobody typing: it answers and approves as
    it says, never stops for a key (no picker opens), and ends with the feature merged.
    """
    terminal = Terminal(
        "demo", "feature", "--delay", "0", columns=80, rows=50, env={"TMPDIR": str(tmp_path)}
    )
    try:
        assert terminal.wait(timeout=90) == 0, terminal.text()
    finally:
        terminal.close()
    shown = terminal.text()
    assert "Inbox:" not in shown  # the picker's header: nothing asked for a key
    assert "$ shep inbox --run " in shown
    assert "Try next:" in shown
    _finished_demo(tmp_path)


@pytest.mark.slow
def test_demo_feature_piped_into_head_still_finishes_what_it_started(tmp_path: Path) -> None:
    """`shep demo feature | head -3`: head leaves after three lines, and the demo still
    takes its feature to the merged commit (quietly), exits 0, and leaves nothing running
    or waiting.
    """
    done = subprocess.run(
        ["bash", "-c", f"{sys.executable} -m shep demo feature --delay 0 | head -3"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 3
    assert "Traceback" not in done.stderr
    _finished_demo(tmp_path)


@pytest.mark.slow
def test_the_demo_agent_keeps_to_the_timeout_as_a_real_agent_does(
    shep_home: Path, tmp_path: Path
) -> None:
    """--timeout bounds a demo agent's call too: a call slower than it fails its node
    with AgentTimeoutError (retried as a timeout is), and the run fails, as with a real
    agent CLI. It ignored the timeout and slept its whole delay."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "app.py").write_text("print('hi')\n")
    slow = {"SHEP_DEMO_DELAY": "30"}
    shep("settings", "agent", "--agent", "demo", check=True)
    result = shep(
        "run", "analyze-repository", "--repo", str(repo), "--timeout", "1", env=slow, timeout=50
    )
    assert result.returncode == 1, result.stderr
    assert "did not finish within 1 s" in result.stderr
    [run] = json.loads(shep("status", "--all", "--json").stdout)
    assert run["status"] == "failed"
    assert run["error"].startswith("AgentTimeoutError")
