"""Every agent type shep can run, and the factory that builds an executor for one."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from types import MappingProxyType

from events.errors import (
    AgentError,
    AgentNotFoundError,
    AgentOutputError,
    AgentTimeoutError,
    SettingsError,
)
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
from shep.agents.process import AgentProcess, ProcessLimits
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


#: Bytes of a ``--version`` answer read at most (a line longer than it stops the binary).
_VERSION_OUTPUT = 64 * 1024
#: Lines of a ``--version`` answer kept (the version is on one of the first).
_VERSION_LINES = 20


def probe_version(agent_type: str, binary: str | None = None, *, timeout: float = 15.0) -> str:
    """The version ``<binary> --version`` reports (e.g. ``"2.1.197"``).

    The binary is untrusted: it runs in its own process group, which is killed
    (children included) when it does not answer within ``timeout`` s, and what it
    prints is read up to a bound. Raises ``AgentNotFoundError`` (with the install
    command) if the binary is missing, ``AgentError`` if it fails, says nothing, or
    does not answer in time.
    """
    spec = get_spec(agent_type)
    if not spec.binary:
        return spec.verified_version or "built-in"
    executable = binary or spec.binary
    command = f"`{executable} --version`"
    limits = ProcessLimits(
        kill_grace=1.0, output_cap=_VERSION_OUTPUT, drain=0.5, stderr_tail=_VERSION_OUTPUT
    )
    kept: list[bytes] = []
    try:
        with AgentProcess(
            [executable, "--version"],
            stdin=None,
            env=os.environ,
            cwd=None,
            limits=limits,
            timeout=timeout,
            agent=spec.type,
            label=spec.label,
            install_hint=spec.install_hint,
        ) as proc:
            for line in proc.lines():
                if len(kept) < _VERSION_LINES:
                    kept.append(line)
            outcome = proc.finish()
    except AgentNotFoundError as e:
        if isinstance(e.__cause__, FileNotFoundError):
            raise AgentNotFoundError(
                f"{spec.label} is not installed: `{executable}` was not found. "
                f"Install it with `{spec.install_hint}`.",
                agent=spec.type,
            ) from e.__cause__
        if isinstance(e.__cause__, PermissionError):
            raise AgentNotFoundError(
                f"{spec.label}: `{executable}` is not executable. Reinstall it with "
                f"`{spec.install_hint}`.",
                agent=spec.type,
            ) from e.__cause__
        raise
    except AgentTimeoutError as e:
        raise AgentError(
            f"{spec.label}: {command} did not answer within {timeout:g} s; shep stopped it.",
            agent=spec.type,
        ) from e
    except AgentOutputError as e:
        raise AgentError(
            f"{spec.label}: {command} printed a line of more than "
            f"{_VERSION_OUTPUT // 1024} KiB; shep stopped it.",
            agent=spec.type,
        ) from e
    stdout = b"\n".join(kept).decode("utf-8", errors="replace")
    stderr = outcome.stderr
    if outcome.exit_code != 0:
        raise AgentError(
            f"{spec.label}: {command} failed with exit code {outcome.exit_code}: "
            f"{clean(stderr or stdout) or 'no message'}",
            agent=spec.type,
        )
    for text in (stdout, stderr):
        match = _VERSION.search(text)
        if match:
            return match.group(0)
    first = next((line.strip() for line in stdout.splitlines() if line.strip()), "")
    if not first:
        raise AgentError(f"{spec.label}: {command} printed nothing.", agent=spec.type)
    return first[:200]
