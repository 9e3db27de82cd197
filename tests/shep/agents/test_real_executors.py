"""shep's executors (``shep.agents``) drive each real CLI against the fake LLM.

Each CLI runs in its own HOME from ``clis.prepare``; that environment reaches the
child through ``env=``, and the API key only through ``token=``, so a passing run
also proves the executor puts the token where the CLI reads it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import cli, fake_llm
from tests.support.fakellm import FakeLLM
from tests.support.real_clis import AGENTS, FIRST, SECOND, TOKEN, CliSetup

# Fixtures this folder's conftest does not give (they were beside these tests before the move).
__all__ = ["cli", "fake_llm"]

agents = pytest.importorskip("shep.agents", reason="shep.agents (the executor layer) is missing")
errors = pytest.importorskip("events.errors")
if not hasattr(agents, "create_executor"):  # a namespace package while it is being written
    pytest.skip("shep.agents.create_executor does not exist yet", allow_module_level=True)

pytestmark = [pytest.mark.real_cli, pytest.mark.timeout(180)]

# The CLIs that report a session id and resume it by id (samples README).
RESUMABLE = {"claude-code", "codex", "gemini-cli", "qwen-code", "opencode"}
# Inherited variables that would send the CLIs elsewhere (qwen proxies even loopback).
_FOREIGN_ENV = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "ANTHROPIC_API_KEY",
    "OPENAI_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "CODEX_API_KEY",
    "CONTINUE_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
)


@pytest.fixture
def executor(cli: CliSetup, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The executor for ``cli.agent``, pointed at the installed binary and the isolated HOME."""
    for name in _FOREIGN_ENV:
        monkeypatch.delenv(name, raising=False)
    return agents.create_executor(cli.agent, token=TOKEN, binary=str(cli.binary), env=cli.env)


def _options(cli: CliSetup, **overrides: Any) -> Any:
    return agents.AgentOptions(**{"cwd": str(cli.cwd), "timeout": 90, **overrides})


def _processes_in(cwd: Path) -> list[int]:
    """Pids of live processes whose working directory is ``cwd``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if Path(os.readlink(entry / "cwd")) == cwd:
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


@pytest.mark.parametrize("agent", AGENTS)
def test_execute_returns_the_scripted_text_and_session(
    agent: str, cli: CliSetup, executor: Any, fake_llm: FakeLLM
) -> None:
    """execute() returns the scripted text, a session id where the CLI has one, our token sent."""
    fake_llm.enqueue_text(FIRST)

    result = executor.execute("Say hello", _options(cli))

    assert result.text == FIRST
    if agent in RESUMABLE:
        assert result.session_id, f"{agent} reports a session id, the executor lost it"
    calls = fake_llm.model_requests
    assert len(calls) == 1
    assert calls[0].api_key == TOKEN, "the token did not reach the CLI's API key variable"
    assert "Say hello" in calls[0].dumps()


@pytest.mark.parametrize("agent", AGENTS)
def test_stream_yields_text_deltas_then_completed(
    agent: str, cli: CliSetup, executor: Any, fake_llm: FakeLLM
) -> None:
    """stream() yields TextDelta(s) spelling the answer and ends with Completed."""
    fake_llm.enqueue_text(FIRST)

    events = list(executor.stream("Say hello", _options(cli)))

    deltas = [e.text for e in events if isinstance(e, agents.TextDelta)]
    assert deltas, f"no TextDelta in {[type(e).__name__ for e in events]}"
    assert "".join(deltas).strip() == FIRST  # line-based CLIs (aider) end with a newline
    assert isinstance(events[-1], agents.Completed)
    assert events[-1].result.text == FIRST
    assert not [e for e in events if isinstance(e, agents.Failed)]
    started = [e for e in events if isinstance(e, agents.SessionStarted)]
    if started and started[0].session_id:
        assert started[0].session_id == events[-1].result.session_id


@pytest.mark.parametrize("agent", AGENTS)
def test_resume_continues_the_same_session(
    agent: str, cli: CliSetup, executor: Any, fake_llm: FakeLLM
) -> None:
    """Resuming the returned session id replays the earlier turn to the model."""
    if agent not in RESUMABLE and not executor.supports("session-resume"):
        pytest.skip(f"{agent}: no resume by session id (the executor says so, as the README)")
    assert executor.supports("session-resume"), f"{agent} resumes by id; executor says no"
    fake_llm.enqueue_text(FIRST)
    fake_llm.enqueue_text(SECOND)

    first = executor.execute("Remember the word BANANA", _options(cli))
    second = executor.execute("Which word?", _options(cli, resume_session=first.session_id))

    assert second.text == SECOND
    assert second.session_id == first.session_id
    replayed = fake_llm.model_requests[-1].dumps()
    assert "Remember the word BANANA" in replayed
    assert FIRST in replayed


@pytest.mark.parametrize("agent", AGENTS)
def test_401_raises_agent_auth_error(
    agent: str, cli: CliSetup, executor: Any, fake_llm: FakeLLM
) -> None:
    """A 401 from the API raises AgentAuthError from execute() and stream(), token redacted."""
    fake_llm.enqueue_error(401, times=None)

    with pytest.raises(errors.AgentAuthError) as raised:
        executor.execute("Say hello", _options(cli))
    with pytest.raises(errors.AgentAuthError):
        list(executor.stream("Say hello", _options(cli)))

    assert TOKEN not in str(raised.value)
    assert not raised.value.retryable


@pytest.mark.parametrize("agent", AGENTS)
def test_timeout_raises_and_kills_the_whole_agent(
    agent: str, cli: CliSetup, executor: Any, fake_llm: FakeLLM
) -> None:
    """A model that never answers in time gives AgentTimeoutError; no process is left behind."""
    fake_llm.enqueue_text("too late", delay=120)

    started = time.monotonic()
    with pytest.raises(errors.AgentTimeoutError):
        executor.execute("Say hello", _options(cli, timeout=5))

    assert time.monotonic() - started < 30
    deadline = time.monotonic() + 5
    while _processes_in(cli.cwd) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _processes_in(cli.cwd) == [], "the agent's processes outlived the timeout"
