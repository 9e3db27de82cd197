"""AGENT_SPECS, create_executor and probe_version."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from events.errors import AgentError, AgentNotFoundError, SettingsError
from shep.agents import (
    AGENT_SPECS,
    FEATURES,
    AgentExecutor,
    create_executor,
    probe_version,
)
from tests.shep.agents.conftest import Fake, pid_gone

TYPES = (
    "claude-code",
    "codex",
    "gemini-cli",
    "opencode",
    "qwen-code",
    "aider",
    "continue",
    "cursor",
    "copilot",
)

# What each agent honours, as documented in docs/agents.md.
SUPPORTS = {
    "claude-code": FEATURES,
    "codex": {"session-resume", "streaming", "tool-scoping", "structured-output"},
    "gemini-cli": {"session-resume", "streaming", "tool-scoping"},
    "opencode": {"session-resume", "streaming"},
    "qwen-code": FEATURES,
    "aider": {"tool-scoping"},
    "continue": {"tool-scoping", "system-prompt"},
    "cursor": {"session-resume", "streaming", "tool-scoping"},
    "copilot": {"session-resume", "streaming", "tool-scoping"},
}


def test_every_agent_type_is_registered() -> None:
    """AGENT_SPECS has the nine agent CLIs and the built-in demo, each keyed by its type name."""
    assert tuple(AGENT_SPECS) == (*TYPES, "demo")
    for name, spec in AGENT_SPECS.items():
        assert spec.type == name
        if name == "demo":
            continue
        assert spec.binary
        assert spec.install_hint
        assert spec.token_env
        assert spec.label


def test_spec_details_for_install_and_tokens() -> None:
    """Install commands and token variables are the ones each CLI documents."""
    claude = AGENT_SPECS["claude-code"]
    assert claude.install_hint == "npm install -g @anthropic-ai/claude-code"
    assert claude.token_env == ("ANTHROPIC_API_KEY",)
    assert AGENT_SPECS["codex"].token_env == ("CODEX_API_KEY", "OPENAI_API_KEY")
    assert AGENT_SPECS["gemini-cli"].token_env == ("GEMINI_API_KEY",)
    assert AGENT_SPECS["aider"].install_hint == "python -m pip install aider-chat"
    assert AGENT_SPECS["cursor"].binary == "cursor-agent"


def test_only_cursor_is_unverified() -> None:
    """Cursor is built from its documentation; every other agent ran for real."""
    unverified = {name for name, spec in AGENT_SPECS.items() if not spec.verified}
    assert unverified == {"cursor"}
    assert AGENT_SPECS["cursor"].verified_version is None
    assert AGENT_SPECS["claude-code"].verified_version == "2.1.197"


@pytest.mark.parametrize("agent", TYPES)
def test_executors_satisfy_the_protocol_and_report_features(agent: str) -> None:
    """Each executor is an AgentExecutor named after its type, with its feature set."""
    executor = create_executor(agent)
    assert isinstance(executor, AgentExecutor)
    assert executor.name == agent
    assert {f for f in FEATURES if executor.supports(f)} == SUPPORTS[agent]
    assert executor.supports("teleportation") is False


def test_unknown_agent_type_lists_the_known_ones() -> None:
    """An unknown type raises SettingsError naming every known type."""
    with pytest.raises(SettingsError) as caught:
        create_executor("clippy")
    assert str(caught.value) == (
        "Unknown agent type 'clippy'. Known types: claude-code, codex, gemini-cli, opencode, "
        "qwen-code, aider, continue, cursor, copilot, demo. Choose one with `shep settings agent`."
    )


def test_executor_repr_never_shows_the_token() -> None:
    """The token stays out of reprs (and so out of log lines that print executors)."""
    executor = create_executor("claude-code", token="sk-very-secret")
    assert "sk-very-secret" not in repr(executor)


def _version_script(fake: Fake, body: str) -> str:
    script = fake.tmp / "versioned"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return str(script)


@pytest.mark.parametrize(
    ("printed", "version"),
    [
        ("echo '2.1.197 (Claude Code)'", "2.1.197"),
        ("echo 'codex-cli 0.169.0'", "0.169.0"),
        ("echo 'GitHub Copilot CLI 1.0.102.'; echo 'Run copilot update'", "1.0.102"),
        ("echo 'WARNING: proceeding' >&2; echo 'codex-cli 0.169.0'", "0.169.0"),
    ],
)
def test_probe_version_reads_the_version_string(fake: Fake, printed: str, version: str) -> None:
    """probe_version runs `<binary> --version` and returns the version it reports."""
    assert probe_version("codex", _version_script(fake, printed)) == version


def test_probe_version_of_a_missing_binary_names_the_install_command() -> None:
    """A missing binary raises AgentNotFoundError with the install hint."""
    with pytest.raises(AgentNotFoundError) as caught:
        probe_version("claude-code", "/nonexistent/claude")
    assert str(caught.value) == (
        "Claude Code is not installed: `/nonexistent/claude` was not found. "
        "Install it with `npm install -g @anthropic-ai/claude-code`."
    )


def test_probe_version_default_binary_is_looked_up_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a binary override the spec's binary name is used (and may be missing)."""
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(AgentNotFoundError, match="`cursor-agent` was not found"):
        probe_version("cursor")


def test_probe_version_failure_carries_the_message(fake: Fake) -> None:
    """A --version that fails raises AgentError with the CLI's own message."""
    script = _version_script(fake, "echo 'error: unknown flag' >&2; exit 3")
    with pytest.raises(AgentError) as caught:
        probe_version("gemini-cli", script)
    assert str(caught.value) == (
        f"Gemini CLI: `{script} --version` failed with exit code 3: error: unknown flag"
    )


def test_probe_version_times_out(fake: Fake) -> None:
    """A --version that hangs gives up after the timeout."""
    script = _version_script(fake, "sleep 5")
    with pytest.raises(AgentError, match=r"did not answer within 0\.2 s"):
        probe_version("aider", script, timeout=0.2)


def test_probe_version_that_hangs_has_its_whole_group_killed(fake: Fake) -> None:
    """A --version that hangs in a child of its own (as a node launcher does) leaves no
    process behind: the timeout kills the binary's whole process group, not only it."""
    pidfile = fake.tmp / "child.pid"
    script = _version_script(fake, f"sleep 30 & echo $! > {pidfile}; wait")
    with pytest.raises(AgentError, match=r"did not answer within 0\.5 s"):
        probe_version("aider", script, timeout=0.5)
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while not pid_gone(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pid_gone(child)


def test_probe_version_reads_a_flood_up_to_a_bound(fake: Fake) -> None:
    """A --version that prints without end is stopped once its line passes the bound, not
    read into memory until the timeout."""
    script = _version_script(fake, "exec tr '\\0' x < /dev/zero")
    with pytest.raises(AgentError, match="printed a line of more than 64 KiB"):
        probe_version("aider", script, timeout=60)


def test_probe_version_without_a_version_number_returns_the_first_line(fake: Fake) -> None:
    """Output without a dotted number comes back as its first line."""
    assert probe_version("continue", _version_script(fake, "echo 'nightly build'")) == (
        "nightly build"
    )


def test_samples_path_is_inside_the_repository() -> None:
    """The test samples live in tests/shep/agents/samples (no dependency on ../shared)."""
    here = Path(__file__).parent
    assert (here / "samples" / "README.md").is_file()


def test_demo_agent_is_built_in_and_labelled() -> None:
    """The demo agent needs no binary; its answers say they come from a demo."""
    from shep.agents import AgentOptions

    assert probe_version("demo") == "built-in"
    executor = create_executor("demo", env={"SHEP_DEMO_DELAY": "0"})
    result = executor.execute("Describe its structure", AgentOptions(cwd="."))
    assert "[demo agent" in result.text
    assert result.session_id is not None
    assert result.session_id.startswith("demo-")


def test_ci_installs_the_versions_shep_is_verified_with() -> None:
    """.ci/install-agent-clis installs, for each agent CLI, the version its spec says shep is
    verified with (``verified_version``, which `shep doctor` checks the user's against):
    changing one without the other fails here."""
    import re

    script = (Path(__file__).parents[3] / ".ci" / "install-agent-clis").read_text()
    packages = dict(
        spec.rsplit("@", 1) for spec in re.findall(r'^\s+"(@?[^"@]+@[^"]+)"$', script, re.M)
    )
    (aider,) = re.findall(r'^AIDER_VERSION="([^"]+)"$', script, re.M)
    pinned = {"aider-chat": aider, **packages}
    by_package = {
        "@anthropic-ai/claude-code": "claude-code",
        "@openai/codex": "codex",
        "@google/gemini-cli": "gemini-cli",
        "opencode-ai": "opencode",
        "@qwen-code/qwen-code": "qwen-code",
        "@continuedev/cli": "continue",
        "aider-chat": "aider",
    }
    assert set(pinned) == set(by_package)
    for package, version in pinned.items():
        spec = AGENT_SPECS[by_package[package]]
        assert package in spec.install_hint
        assert (package, spec.verified_version) == (package, version)
