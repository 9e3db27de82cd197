"""What shep knows about one agent CLI: its binary, how to install it, its token."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shep.agents.model import AgentExecutor
    from shep.agents.process import ProcessLimits

__all__ = ["AgentSpec", "ExecutorFactory", "lazy_executor"]

ExecutorFactory = Callable[..., "AgentExecutor"]


@dataclass(frozen=True)
class AgentSpec:
    """One agent type, as registered in ``AGENT_SPECS``.

    ``token_env`` lists the variables the token is put in (child environment only).
    ``verified`` says whether shep's flags and parser were checked against the real
    binary, and ``verified_version`` which version that was.
    """

    type: str
    label: str
    binary: str
    install_hint: str
    token_env: tuple[str, ...]
    verified: bool
    verified_version: str | None
    executor: ExecutorFactory

    def create(
        self,
        *,
        token: str | None = None,
        binary: str | None = None,
        env: Mapping[str, str] | None = None,
        limits: ProcessLimits | None = None,
    ) -> AgentExecutor:
        """A new executor for this agent type."""
        return self.executor(self, token=token, binary=binary, env=env, limits=limits)


def lazy_executor(module: str, name: str) -> ExecutorFactory:
    """An executor factory that imports ``module`` only when an executor is made: for an
    agent that lives above the agents (the demo agent fakes every workflow's answers)."""

    def create(*args: object, **kwargs: object) -> AgentExecutor:
        import importlib

        factory: ExecutorFactory = getattr(importlib.import_module(module), name)
        return factory(*args, **kwargs)

    return create
