"""How each real agent CLI is installed, configured and run offline against the fake LLM.

Everything here comes from /work/shared/agent-cli-samples/README.md: the config files,
the environment variables and the flags that make each CLI talk to 127.0.0.1 only.
``prepare(agent, home, base_url)`` writes a CLI's config into an isolated HOME and
returns a ``CliSetup``; its ``env`` is what shep's executor gets as ``env=``, and
``token_env`` names the variable the CLI reads its API key from.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

DEFAULT_PREFIX = Path.home() / ".cache" / "shep-agent-clis"
TOKEN = "sk-shep-test-token-0123456789"
# Scripted answers for a first turn and a resumed second turn.
FIRST = "Noted: the magic word is BANANA."
SECOND = "Second turn: I remember. The magic word is BANANA."

# shep agent type -> path of the binary under the install prefix (.ci/install-agent-clis)
BINARIES = {
    "claude-code": "node_modules/.bin/claude",
    "codex": "node_modules/.bin/codex",
    "gemini-cli": "node_modules/.bin/gemini",
    "opencode": "node_modules/.bin/opencode",
    "qwen-code": "node_modules/.bin/qwen",
    "continue": "node_modules/.bin/cn",
    "aider": "aider-venv/bin/aider",
}
AGENTS = tuple(BINARIES)


def install_prefix() -> Path:
    return Path(os.environ.get("SHEP_AGENT_CLIS") or DEFAULT_PREFIX).expanduser()


def find_binary(agent: str) -> Path | None:
    path = install_prefix() / BINARIES[agent]
    return path if path.is_file() and os.access(path, os.X_OK) else None


@dataclass
class CliSetup:
    """One CLI made ready in an isolated HOME, pointed at the fake LLM."""

    agent: str
    binary: Path
    home: Path
    cwd: Path  # HOME/work: the project directory the agent works in
    env: dict[str, str]  # HOME, config locations, base URLs, "no telemetry" switches
    token_env: str  # the variable the CLI reads its API key from
    config: Path | None = None  # a config file the CLI must be told about (cn --config)

    def child_env(self, token: str = TOKEN) -> dict[str, str]:
        """A clean environment for running the CLI directly: nothing leaks in from ours."""
        path = os.pathsep.join(
            dict.fromkeys(
                [
                    str(Path(shutil.which("node") or "/usr/bin/node").parent),
                    str(self.binary.parent),
                    "/usr/local/bin",
                    "/usr/bin",
                    "/bin",
                ]
            )
        )
        return {
            "PATH": path,
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            "NO_COLOR": "1",
            **self.env,
            self.token_env: token,
        }

    def run(
        self, args: list[str], *, token: str = TOKEN, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run the CLI in its own process group (killed whole on timeout), stdin closed."""
        with subprocess.Popen(
            [str(self.binary), *args],
            cwd=self.cwd,
            env=self.child_env(token),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        ) as proc:
            try:
                stdout, stderr = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                stdout, stderr = proc.communicate()
                raise AssertionError(
                    f"{self.agent} ran past {timeout}s: {args}\nstdout: {stdout[-2000:]}\n"
                    f"stderr: {stderr[-2000:]}"
                ) from None
        return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _json(path: Path, value: object) -> Path:
    return _write(path, json.dumps(value, indent=2))


def _claude(home: Path, cwd: Path, base: str) -> tuple[dict[str, str], str, Path | None]:
    env = {
        "ANTHROPIC_BASE_URL": base,  # no /v1: claude calls $BASE/v1/messages?beta=true
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_BUG_COMMAND": "1",
        "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1",
        "CLAUDE_CODE_MAX_RETRIES": "1",
    }
    return env, "ANTHROPIC_API_KEY", None


def _codex(home: Path, cwd: Path, base: str) -> tuple[dict[str, str], str, Path | None]:
    codex_home = home / ".codex"
    _write(
        codex_home / "config.toml",
        f"""\
model = "gpt-5.5"
model_provider = "fake"
approval_policy = "never"
sandbox_mode = "workspace-write"
check_for_update_on_startup = false

[model_providers.fake]
name = "fake-llm"
base_url = "{base}/v1"
env_key = "OPENAI_API_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false

[feedback]
enabled = false

[otel]
exporter = "none"

[projects."{cwd}"]
trust_level = "trusted"
""",
    )
    env = {"CODEX_HOME": str(codex_home), "OPENAI_BASE_URL": f"{base}/v1"}
    return env, "OPENAI_API_KEY", None


_NO_UPDATES = {
    "disableAutoUpdate": True,
    "disableUpdateNag": True,
    "enableAutoUpdate": False,
    "enableAutoUpdateNotification": False,
}


def _gemini(home: Path, cwd: Path, base: str) -> tuple[dict[str, str], str, Path | None]:
    _json(
        home / ".gemini" / "settings.json",
        {
            "security": {
                "auth": {"selectedType": "gemini-api-key"},
                "folderTrust": {"enabled": False},
            },
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "general": {**_NO_UPDATES, "maxAttempts": 2},
            "model": {"name": "gemini-2.5-pro"},
        },
    )
    (home / "tmp").mkdir(exist_ok=True)
    env = {
        "GOOGLE_GEMINI_BASE_URL": base,
        "GEMINI_MODEL": "gemini-2.5-pro",
        "GEMINI_CLI_NO_RELAUNCH": "true",
        "GEMINI_SANDBOX": "false",
        "TMPDIR": str(home / "tmp"),
    }
    return env, "GEMINI_API_KEY", None


def _qwen(home: Path, cwd: Path, base: str) -> tuple[dict[str, str], str, Path | None]:
    _json(
        home / ".qwen" / "settings.json",
        {
            "security": {"auth": {"selectedType": "openai"}, "folderTrust": {"enabled": False}},
            "telemetry": {"enabled": False},
            "privacy": {"usageStatisticsEnabled": False},
            "general": _NO_UPDATES,
            "memory": {"enableManagedAutoMemory": False},  # else a 2nd chat call per run
        },
    )
    # Never a proxy for qwen: it sends loopback traffic through it too.
    env = {
        "OPENAI_BASE_URL": f"{base}/v1",
        "OPENAI_MODEL": "qwen3-coder-plus",
        "QWEN_CODE_NO_RELAUNCH": "true",
        "GEMINI_CLI_NO_RELAUNCH": "true",
        "QWEN_SANDBOX": "false",
    }
    return env, "OPENAI_API_KEY", None


def _opencode(home: Path, cwd: Path, base: str) -> tuple[dict[str, str], str, Path | None]:
    config = home / ".config"
    _json(
        config / "opencode" / "opencode.json",
        {
            "model": "fakeanthropic/fake-model",
            "small_model": "fakeanthropic/fake-model",
            "autoupdate": False,
            "share": "disabled",
            "enabled_providers": ["fakeanthropic"],
            "permission": {"edit": "allow", "bash": "allow", "webfetch": "deny"},
            "provider": {
                "fakeanthropic": {
                    "name": "Fake Anthropic",
                    "npm": "@ai-sdk/anthropic",
                    "options": {"baseURL": f"{base}/v1", "apiKey": "{env:ANTHROPIC_API_KEY}"},
                    "models": {
                        "fake-model": {
                            "name": "Fake model",
                            "tool_call": True,
                            "limit": {"context": 200000, "output": 8192},
                        }
                    },
                }
            },
        },
    )
    env = {
        "XDG_CONFIG_HOME": str(config),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_STATE_HOME": str(home / ".local/state"),
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
        "OPENCODE_DISABLE_SHARE": "1",
        "OPENCODE_DISABLE_CLAUDE_CODE": "1",
    }
    return env, "ANTHROPIC_API_KEY", None


def _continue(home: Path, cwd: Path, base: str) -> tuple[dict[str, str], str, Path | None]:
    global_dir = home / ".continue"
    config = _write(
        global_dir / "config.yaml",
        f"""\
name: fake-llm
version: 0.0.1
schema: v1
models:
  - name: fake
    provider: openai
    model: fake-model
    apiBase: "{base}/v1"
    apiKey: "${{{{ secrets.CONTINUE_API_KEY }}}}"
    roles: [chat, edit, apply]
    capabilities: [tool_use]
""",
    )
    # cn resolves ``secrets.X`` from the environment, and shep puts its token in
    # CONTINUE_API_KEY; SHEP_CONTINUE_CONFIG is how shep's executor is given --config.
    env = {
        "CONTINUE_GLOBAL_DIR": str(global_dir),
        "CONTINUE_CLI_ENABLE_TELEMETRY": "0",
        "CONTINUE_METRICS_ENABLED": "0",
        "SHEP_CONTINUE_CONFIG": str(config),
    }
    return env, "CONTINUE_API_KEY", config


def _aider(home: Path, cwd: Path, base: str) -> tuple[dict[str, str], str, Path | None]:
    # A fresh, non-empty cost map, or aider downloads litellm's from GitHub.
    _json(
        home / ".aider" / "caches" / "model_prices_and_context_window.json",
        {
            "fake-model": {
                "max_tokens": 8192,
                "max_input_tokens": 200000,
                "max_output_tokens": 8192,
                "input_cost_per_token": 0.0,
                "output_cost_per_token": 0.0,
                "litellm_provider": "openai",
                "mode": "chat",
            }
        },
    )
    env = {
        "OPENAI_API_BASE": f"{base}/v1",
        "AIDER_MODEL": "openai/fake-model",
        "AIDER_CHECK_UPDATE": "false",
        "AIDER_ANALYTICS_DISABLE": "true",
        "AIDER_GIT": "false",
        "AIDER_YES_ALWAYS": "true",
        "AIDER_PRETTY": "false",
        "AIDER_SHOW_RELEASE_NOTES": "false",
        "AIDER_AUTO_COMMITS": "false",
        "AIDER_MAP_TOKENS": "0",
        "AIDER_DETECT_URLS": "false",
        "AIDER_SUGGEST_SHELL_COMMANDS": "false",
        "AIDER_TIMEOUT": "60",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    return env, "OPENAI_API_KEY", None


_PREPARE: dict[str, Callable[[Path, Path, str], tuple[dict[str, str], str, Path | None]]] = {
    "claude-code": _claude,
    "codex": _codex,
    "gemini-cli": _gemini,
    "opencode": _opencode,
    "qwen-code": _qwen,
    "continue": _continue,
    "aider": _aider,
}


def prepare(agent: str, binary: Path, home: Path, base_url: str) -> CliSetup:
    """Write ``agent``'s offline config into ``home`` and return how to run it."""
    cwd = home / "work"
    cwd.mkdir(parents=True, exist_ok=True)
    env, token_env, config = _PREPARE[agent](home, cwd, base_url)
    env = {"HOME": str(home), **env}
    return CliSetup(
        agent=agent, binary=binary, home=home, cwd=cwd, env=env, token_env=token_env, config=config
    )
