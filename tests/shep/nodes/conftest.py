"""Fixtures for gated runs: the fake claude, and the test workflows registered for workers."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.shep.runs.conftest import agent_log, fake_claude, repo

__all__ = ["agent_log", "fake_claude", "repo"]

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def test_workflows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers (and the CLI) register tests/support/workflows.py's workflows."""
    monkeypatch.setenv("SHEP_WORKFLOW_MODULES", "tests.support.workflows")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
