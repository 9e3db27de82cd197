"""Fixtures for gated runs: the fake claude, and the test workflows registered for workers."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.runtime.conftest import agent_log, fake_claude, repo

__all__ = ["agent_log", "fake_claude", "repo"]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def test_workflows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers (and the CLI) register tests/gates/workflows.py's workflows."""
    monkeypatch.setenv("SHEP_WORKFLOW_MODULES", "tests.gates.workflows")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
