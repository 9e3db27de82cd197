"""Every agent type shep can run, and the factory that builds an executor for one."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping
from types import MappingProxyType

from events.errors import AgentError, AgentNotFoundError, SettingsError
from shep.agents import (
    aider,
    claude_code,
    codex,
    continue_cli,
    copilot,
    cursor,
    gemini,
    opencode,
    qwen_code,
)
from shep.agents.failures import clean
from shep.agents.model import AgentExecutor
from shep.agents.process import ProcessLimits
from shep.agents.spec import AgentSpec, lazy_executor

__all__ = ["AGENT_SPECS", "create_executor", "get_spec", "probe_version", "require_installed"]

#: The built-in demo agent (``shep.demo.agent``): canned answers, no AI.
DEMO = AgentSpec(
    type="demo",
    label="Demo agent (built in; canned answers, no AI)",
    binary="",
    install_hint="built in: nothing to install",
    token_env=(),
    verified=True,
    verified_version="built-in",
    executor=lazy_executor("shep.demo.agent", "DemoExecutor"),
)

AGENT_SPECS: Mapping[str, AgentSpec] = MappingProxyType(
    {
        spec.type: spec
        for spec in (
            claude_code.SPEC,
            codex.SPEC,
            gemini.SPEC,
            opencode.SPEC,
            qwen_code.SPEC,
            aider.SPEC,
            continue_cli.SPEC,
            cursor.SPEC,
            copilot.SPEC,
            DEMO,
        )
    }
)

_VERSION = re.compile(r"\d+(?:\.\d+)+(?:[-+][0-9A-Za-z.-]+)?")


def get_spec(agent_type: str) -> AgentSpec:
    """The spec of ``agent_type``; ``SettingsError`` naming the known types if unknown."""
    spec = AGENT_SPECS.get(agent_type)
    if spec is None:
        known = ", ".join(AGENT_SPECS)
        raise SettingsError(
            f"Unknown agent type {agent_type!r}. Known types: {known}. "
            "Choose one with `shep settings agent`."
        )
    return spec


def require_installed(agent_type: str, binary: str | None) -> None:
    """``AgentNotFoundError`` saying how to install it, when the agent's binary (or the
    configured ``binary``) is not on PATH; built-in agents need none."""
    import shutil

    spec = get_spec(agent_type)
    if not spec.binary:
        return
    executable = binary or spec.binary
    if shutil.which(executable) is None:
        raise AgentNotFoundError(
            f"{spec.label} is not installed: `{executable}` was not found. "
            f"Install it with `{spec.install_hint}`, or run `shep settings agent`.",
            agent=agent_type,
        )


def create_executor(
    agent_type: str,
    *,
    token: str | None = None,
    binary: str | None = None,
    env: Mapping[str, str] | None = None,
    limits: ProcessLimits | None = None,
) -> AgentExecutor:
    """An executor for ``agent_type``.

    ``binary`` overrides the executable; ``env`` is merged over ``os.environ`` for the
    child; ``token`` goes only into the child's environment, under the spec's
    variable(s). ``limits`` bounds the subprocess (kill grace, output cap, ...).
    """
    return get_spec(agent_type).create(token=token, binary=binary, env=env, limits=limits)


def probe_version(agent_type: str, binary: str | None = None, *, timeout: float = 15.0) -> str:
    """The version ``<binary> --version`` reports (e.g. ``"2.1.197"``).

    Raises ``AgentNotFoundError`` (with the install command) if the binary is
    missing, ``AgentError`` if it fails or does not answer within ``timeout`` s.
    """
    spec = get_spec(agent_type)
    if not spec.binary:
        return spec.verified_version or "built-in"
    executable = binary or spec.binary
    try:
        done = subprocess.run(
            [executable, "--version"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            start_new_session=True,
            check=False,
        )
    except FileNotFoundError as e:
        raise AgentNotFoundError(
            f"{spec.label} is not installed: `{executable}` was not found. "
            f"Install it with `{spec.install_hint}`.",
            agent=spec.type,
        ) from e
    except PermissionError as e:
        raise AgentNotFoundError(
            f"{spec.label}: `{executable}` is not executable. Reinstall it with "
            f"`{spec.install_hint}`.",
            agent=spec.type,
        ) from e
    except subprocess.TimeoutExpired as e:
        raise AgentError(
            f"{spec.label}: `{executable} --version` did not answer within {timeout:g} s.",
            agent=spec.type,
        ) from e
    stdout = done.stdout.decode("utf-8", errors="replace")
    stderr = done.stderr.decode("utf-8", errors="replace")
    if done.returncode != 0:
        raise AgentError(
            f"{spec.label}: `{executable} --version` failed with exit code {done.returncode}: "
            f"{clean(stderr or stdout) or 'no message'}",
            agent=spec.type,
        )
    for text in (stdout, stderr):
        match = _VERSION.search(text)
        if match:
            return match.group(0)
    first = next((line.strip() for line in stdout.splitlines() if line.strip()), "")
    if not first:
        raise AgentError(
            f"{spec.label}: `{executable} --version` printed nothing.", agent=spec.type
        )
    return first
