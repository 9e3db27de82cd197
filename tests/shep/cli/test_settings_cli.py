"""`shep settings`: choosing the agent, storing the token apart, and never leaking it."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput

from shep.agents import AGENT_SPECS
from shep.cli.settings import run_wizard
from tests.support.cli import shep
from tests.support.terminal import Terminal

TOKEN = "sk-ant-SECRET-0123456789abcdef-never-store-me"


@pytest.fixture
def fake_claude(tmp_path: Path) -> Path:
    """An executable that answers --version like the real claude CLI."""
    path = tmp_path / "bin" / "claude"
    path.parent.mkdir()
    path.write_text(f"#!{sys.executable}\nprint('2.1.197 (Claude Code)')\n")
    path.chmod(0o755)
    return path


def test_configure_with_token_from_stdin(fake_claude: Path, shep_home: Path) -> None:
    """--token-stdin stores the token in a 0600 file; the event says only that one is set."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "shep",
            "settings",
            "agent",
            "--agent",
            "claude-code",
            "--auth",
            "token",
            "--token-stdin",
            "--model",
            "opus",
            "--binary",
            str(fake_claude),
        ],
        input=TOKEN + "\n",
        capture_output=True,
        text=True,
        env=os.environ.copy(),
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == ("Configured claude-code 2.1.197 (auth: token, model: opus).\n")
    secrets = shep_home / "secrets"
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o600
    assert json.loads(secrets.read_text()) == {"claude-code": TOKEN}
    shown = json.loads(shep("settings", "show", "--json", check=True).stdout)
    assert shown["agent_type"] == "claude-code"
    assert shown["auth_method"] == "token"
    assert shown["model"] == "opus"
    assert shown["token"] == "********"
    assert shown["heartbeat_interval"] == 30.0


def test_token_never_reaches_database_logs_or_output(fake_claude: Path, shep_home: Path) -> None:
    """After configuring a token, no byte of the database, WAL or any log holds it."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "shep",
            "settings",
            "agent",
            "--agent",
            "claude-code",
            "--auth",
            "token",
            "--token-stdin",
            "--binary",
            str(fake_claude),
        ],
        input=TOKEN + "\n",
        capture_output=True,
        text=True,
        env=os.environ.copy(),
        check=True,
    )
    outputs = [
        shep("settings", "show").stdout,
        shep("settings", "show", "--json").stdout,
        shep("status").stderr,
    ]
    needle = TOKEN.encode()
    for path in shep_home.rglob("*"):
        if path.is_file() and path.name != "secrets":
            assert needle not in path.read_bytes(), path
            assert b"never-store-me" not in path.read_bytes(), path
    for text in outputs:
        assert "never-store-me" not in text


def test_missing_binary_gives_install_hint(shep_home: Path, tmp_path: Path) -> None:
    """A binary that is not there: one line with the install command, non-zero exit."""
    result = shep(
        "settings", "agent", "--agent", "claude-code", "--binary", str(tmp_path / "nope" / "claude")
    )
    assert result.returncode != 0
    assert result.stderr.count("\n") == 1
    assert "npm install -g @anthropic-ai/claude-code" in result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_agent_type_lists_known(shep_home: Path) -> None:
    """An unknown type names the known ones, exit 2."""
    result = shep("settings", "agent", "--agent", "clippy")
    assert result.returncode == 2
    assert result.stderr.startswith("shep: Unknown agent type 'clippy'. Known: ")
    assert "claude-code" in result.stderr


def test_no_terminal_and_no_flags_is_clear(shep_home: Path) -> None:
    """Without a terminal the wizard cannot run: say which flag to pass."""
    result = shep("settings", "agent")
    assert result.returncode == 2
    assert result.stderr == ("shep: No terminal for the wizard: pass --agent TYPE (and --auth).\n")


def test_token_auth_without_token_is_refused(fake_claude: Path, shep_home: Path) -> None:
    """--auth token with no --token-stdin is refused before anything is stored."""
    result = shep(
        "settings",
        "agent",
        "--agent",
        "claude-code",
        "--auth",
        "token",
        "--binary",
        str(fake_claude),
    )
    assert result.returncode == 2
    assert "needs a token" in result.stderr
    assert not (shep_home / "secrets").exists()


def test_settings_set_and_show(shep_home: Path) -> None:
    """Plain settings are validated, recorded as events, and shown."""
    assert shep("settings", "set", "heartbeat_interval", "5", check=True).stdout == (
        "heartbeat_interval = 5\n"
    )
    bad = shep("settings", "set", "heartbeat_interval", "soon")
    assert bad.returncode == 2
    assert bad.stderr == "shep: 'soon' is not a number of seconds.\n"
    unknown = shep("settings", "set", "colour", "blue")
    assert unknown.returncode == 2
    assert "Unknown setting 'colour'" in unknown.stderr
    shown = json.loads(shep("settings", "show", "--json", check=True).stdout)
    assert shown["heartbeat_interval"] == 5.0
    assert shown["agent_type"] is None


def test_wizard_through_pipe_input() -> None:
    """The wizard takes agent type, auth, a hidden token and a model from prompt-toolkit input."""
    with create_pipe_input() as pipe:
        pipe.send_text("codex\rtoken\rsk-wizard-token\rgpt-5.5\r")
        choice = run_wizard(dict(AGENT_SPECS), input=pipe, output=DummyOutput())
    assert (choice.agent_type, choice.auth_method, choice.token, choice.model) == (
        "codex",
        "token",
        "sk-wizard-token",
        "gpt-5.5",
    )


def test_wizard_rejects_unknown_type_then_accepts() -> None:
    """An unknown agent type is refused by the validator; the next answer is taken."""
    with create_pipe_input() as pipe:
        pipe.send_text("clippy\r" + "\x7f" * 6 + "gemini-cli\r\r\r")
        choice = run_wizard(dict(AGENT_SPECS), input=pipe, output=DummyOutput())
    assert (choice.agent_type, choice.auth_method, choice.token, choice.model) == (
        "gemini-cli",
        "session",
        None,
        None,
    )


def test_agent_help_lists_the_agent_types(shep_home: Path) -> None:
    """`shep settings agent --help` shows every registered agent type as --agent's choices."""
    result = shep("settings", "agent", "--help", check=True)
    choices = "|".join(sorted(AGENT_SPECS))
    assert f"  --agent [{choices}]" in result.stdout.splitlines()


def test_root_help_does_not_import_the_agent_registry(shep_home: Path) -> None:
    """`shep --help` lists `settings` without importing the agents (every executor module)."""
    code = (
        "import sys\n"
        "from shep.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print('AGENTS=' + ','.join(sorted(m for m in sys.modules "
        "if m.startswith('shep.agents'))), file=sys.stderr)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert "settings" in result.stdout
    assert result.stderr == "AGENTS=\n"


@pytest.mark.slow
@pytest.mark.parametrize("model", ["", "sonnet"])
def test_wizard_on_a_terminal_after_a_hidden_token_keeps_the_model_visible_and_optional(
    fake_claude: Path, shep_home: Path, model: str
) -> None:
    """The wizard on a real terminal with token auth: the token is typed hidden, and the
    model prompt after it is not (what is typed shows) and takes an empty answer (the
    agent's default): no option of one prompt carries over to the next.
    """
    env = {"PATH": f"{fake_claude.parent}{os.pathsep}{os.environ['PATH']}"}
    terminal = Terminal("settings", "agent", columns=100, rows=40, env=env)
    try:
        terminal.expect("Agent type: ")
        terminal.type("claude-code\r")
        terminal.expect("[session]: ")
        terminal.type("token\r")
        terminal.expect("API token (hidden): ")
        terminal.type(TOKEN + "\r")
        terminal.expect("Default model (empty: the agent's default): ")
        terminal.type(model)
        if model:
            terminal.expect(f"Default model (empty: the agent's default): {model}")
        terminal.type("\r")
        terminal.expect("Configured claude-code")
        assert terminal.wait(timeout=30) == 0
    finally:
        terminal.close()
    shown = terminal.text()
    assert TOKEN not in shown
    assert "cannot be empty" not in shown
    default = "the agent's default"
    assert f"(auth: token, model: {model or default})." in shown
    settings = json.loads(shep("settings", "show", "--json", check=True).stdout)
    assert (settings["auth_method"], settings["model"]) == ("token", model or None)
