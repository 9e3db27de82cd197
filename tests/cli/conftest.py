"""Fixtures for the real-CLI tests: the fake LLM, and each CLI in an isolated HOME.

Install the CLIs with ``.ci/install-agent-clis`` (prefix: ``$SHEP_AGENT_CLIS``, default
``~/.cache/shep-agent-clis``), then run ``pytest -m real_cli``.
The real-CLI tests that run ``shep`` itself live here; those that drive an agent CLI
without shep (``tests/shep/agents/test_real_*.py``) import these fixtures.
A CLI that is not installed is skipped, with the reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import real_clis as clis
from tests.support.fakellm import FakeLLM


@pytest.fixture
def fake_llm() -> Iterator[FakeLLM]:
    """A fresh scripted LLM server on 127.0.0.1 for one test."""
    with FakeLLM() as llm:
        yield llm


@pytest.fixture
def cli(agent: str, fake_llm: FakeLLM, tmp_path: Path) -> clis.CliSetup:
    """The real ``agent`` CLI, configured in ``tmp_path/home`` to talk to ``fake_llm`` only."""
    binary = clis.find_binary(agent)
    if binary is None:
        pytest.skip(
            f"{agent} is not installed at {clis.install_prefix() / clis.BINARIES[agent]}"
            f"; run .ci/install-agent-clis (prefix from $SHEP_AGENT_CLIS)"
        )
    return clis.prepare(agent, binary, tmp_path / "home", fake_llm.base_url)
