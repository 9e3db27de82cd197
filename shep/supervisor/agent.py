"""The evaluator the supervisor consults: the configured agent CLI, through the executor port.

It runs in an empty temporary directory with no tools: it reads the prompt
and answers, and can change nothing. Its token goes only to its own process.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from shep.agents import AgentOptions, create_executor
from shep.secrets import load_token
from shep.settings import Settings


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
            env={"SHEP_SUPERVISOR": "1"},
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
