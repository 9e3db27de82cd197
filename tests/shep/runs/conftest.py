"""Fixtures for whole runs: a repository, a fake claude on disk, shep configured to use it."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import shep

FAKE = Path(__file__).with_name("fake_claude.py")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("print('hello')\n")
    (root / "pyproject.toml").write_text("[project]\nname = 'app'\n")
    return root


@pytest.fixture
def agent_log(tmp_path: Path) -> Path:
    return tmp_path / "agent.jsonl"


@pytest.fixture
def fake_claude(tmp_path: Path, agent_log: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`claude` is the fake; shep is configured to drive it; heartbeats are fast."""
    binary = tmp_path / "bin" / "claude"
    binary.parent.mkdir()
    binary.write_text(f"#!{sys.executable}\n" + FAKE.read_text())
    binary.chmod(0o755)
    monkeypatch.setenv("FAKE_AGENT_LOG", str(agent_log))
    monkeypatch.setenv("FAKE_STATE", str(tmp_path / "fake-state"))
    monkeypatch.setenv("PATH", f"{binary.parent}{os.pathsep}{os.environ['PATH']}")
    shep("settings", "agent", "--agent", "claude-code", "--binary", str(binary), check=True)
    shep("settings", "set", "heartbeat_interval", "0.2", check=True)
    return binary


def agent_calls(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
