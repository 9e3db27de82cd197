"""The evaluator the supervisor consults: the configured agent CLI, through the executor port.

It runs in an empty temporary directory with no tools: it reads the prompt
and answers, and can change nothing. Its token goes only to its own process.

It runs in its own session (so a timeout kills its whole group), which a
supervisor killed with SIGKILL does not take down with it: each evaluator
carries its supervisor's identity in ``SHEP_SUPERVISOR_OWNER``, and the next
supervisor stops those whose supervisor is gone (``stop_stray_evaluators``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
from pathlib import Path

from shep.agents import AgentOptions, create_executor
from shep.agents.process import output_limits
from shep.home.procs import process_start
from shep.home.secrets import load_token
from shep.home.settings import Settings

#: The environment variable naming an evaluator's supervisor: ``<pid>/<process start>``.
OWNER_ENV = "SHEP_SUPERVISOR_OWNER"


class AgentEvaluator:
    """Calls the configured agent once per item; its failures raise (and escalate)."""

    def __init__(self, home: Path, settings: Settings) -> None:
        agent_type = settings.require_agent()
        self.name = agent_type
        self.default_model = settings.model
        self.executor = create_executor(
            agent_type,
            token=load_token(home, agent_type),
            binary=settings.binary,
            env={"SHEP_SUPERVISOR": "1", OWNER_ENV: _owner(os.getpid())},
            limits=output_limits(settings.counts["agent_output_mib"]),
        )

    def __call__(self, prompt: str, *, model: str | None, timeout: float) -> str:
        with tempfile.TemporaryDirectory(prefix="shep-supervisor-") as empty:
            result = self.executor.execute(
                prompt,
                AgentOptions(
                    cwd=empty,
                    allowed_tools=(),
                    max_turns=1,
                    model=model or self.default_model,
                    timeout=timeout,
                ),
            )
        return result.text


def _owner(pid: int) -> str:
    return f"{pid}/{process_start(pid) or ''}"


def stop_stray_evaluators() -> list[int]:
    """SIGKILL the process groups of evaluators whose supervisor is gone; their pids (Linux).

    An evaluator has nothing to save (no tools, an empty directory), and its
    answer has no one to read it: the item is evaluated again.
    """
    from shep.home.procs import processes_with, worker_alive

    stopped: list[int] = []
    groups = {os.getpgid(0)}  # never this process's own
    for pid, owner in processes_with(OWNER_ENV):
        pid_text, _, started = owner.partition("/")
        if not pid_text.isdigit() or worker_alive(int(pid_text), started or None):
            continue
        with contextlib.suppress(OSError):
            group = os.getpgid(pid)
            if group not in groups:
                groups.add(group)
                os.killpg(group, signal.SIGKILL)
                stopped.append(pid)
    return stopped
