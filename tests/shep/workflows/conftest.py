"""Fixtures for whole feature runs: a real git repository, the fake feature agent as `claude`.

Each test gets a fresh SHEP_HOME (``tests/conftest.py``), a repository made
with git in ``tmp_path`` (branch ``main``, one commit), and
``tests/shep/workflows/fake_feature_agent.py`` installed as the ``claude`` binary
that shep is configured to drive. ``FeatureAgent.script(...)`` says what the
agent does in this test; ``FeatureAgent.calls()`` reads back what it did.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import shep

FAKE = Path(__file__).with_name("fake_feature_agent.py")


def git(repo: Path, *args: str, check: bool = True) -> str:
    """``git ARGS`` in ``repo``; its stdout, stripped."""
    done = subprocess.run(
        ["git", *args], cwd=repo, capture_output=True, text=True, check=False, timeout=30
    )
    if check and done.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {done.stderr}")
    return done.stdout.strip()


def make_repo(root: Path) -> Path:
    """A git repository at ``root`` on ``main`` with one commit (README.md, src/app.py)."""
    (root / "src").mkdir(parents=True)
    (root / "README.md").write_text("# app\n")
    (root / "src" / "app.py").write_text("print('hello')\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.name", "Test User")
    git(root, "config", "user.email", "test@example.com")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial")
    return root


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


@dataclass
class FeatureAgent:
    """The fake agent of one test: its script, its call log, its counters' directory."""

    binary: Path
    script_path: Path
    log_path: Path
    state: Path

    def script(self, **plan: Any) -> None:
        """What the agent does from now on (see ``fake_feature_agent``'s docstring)."""
        self.script_path.write_text(json.dumps(plan))

    def records(self) -> list[dict[str, Any]]:
        if not self.log_path.exists():
            return []
        return [json.loads(line) for line in self.log_path.read_text().splitlines() if line]

    def calls(self) -> list[dict[str, Any]]:
        """One entry per call, in start order: the start record, with ``end`` (the end
        record, or None for a call that never ended)."""
        records = self.records()
        ends = {(r["pid"], r["key"]): r for r in records if r["event"] == "end"}
        return [
            {**r, "end": ends.get((r["pid"], r["key"]))} for r in records if r["event"] == "start"
        ]

    def called(self) -> list[str]:
        return [c["key"] for c in self.calls()]

    def prompts(self, key: str) -> list[str]:
        return [c["prompt"] for c in self.calls() if c["key"] == key]

    def kill_leftovers(self) -> None:
        """SIGKILL agent processes that outlived their worker (a test killed the worker)."""
        for call in self.calls():
            if call["end"] is None:
                with contextlib.suppress(OSError):
                    os.kill(call["pid"], signal.SIGKILL)


@pytest.fixture
def agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FeatureAgent]:
    """`claude` is the fake feature agent; shep drives it; heartbeats are fast; tests pass."""
    binary = tmp_path / "bin" / "claude"
    binary.parent.mkdir()
    binary.write_text(f"#!{sys.executable}\n" + FAKE.read_text())
    binary.chmod(0o755)
    fake = FeatureAgent(
        binary=binary,
        script_path=tmp_path / "feature-script.json",
        log_path=tmp_path / "feature-agent.jsonl",
        state=tmp_path / "feature-state",
    )
    fake.script()
    monkeypatch.setenv("FEATURE_SCRIPT", str(fake.script_path))
    monkeypatch.setenv("FEATURE_LOG", str(fake.log_path))
    monkeypatch.setenv("FEATURE_STATE", str(fake.state))
    monkeypatch.setenv("PATH", f"{binary.parent}{os.pathsep}{os.environ['PATH']}")
    shep("settings", "agent", "--agent", "claude-code", "--binary", str(binary), check=True)
    shep("settings", "set", "heartbeat_interval", "0.2", check=True)
    shep("settings", "set", "test_command", "git status --short", check=True)
    yield fake
    fake.kill_leftovers()
