"""The runtime's node kinds: agent step, deterministic step, question, approval gate."""

from __future__ import annotations

from shep.agents import AgentExecutor
from shep.home.settings import Settings
from shep.nodes.agent import AgentNodes
from shep.nodes.context import RunContext
from shep.nodes.deterministic import deterministic_node
from shep.nodes.human import gate_node, question_node
from shep.workflows.base import (
    AgentStep,
    ApprovalGate,
    DeterministicStep,
    NodeFn,
    QuestionStep,
)

__all__ = ["RunKit"]


class RunKit:
    """The ``NodeKit`` a worker builds a workflow's graph with."""

    def __init__(
        self, ctx: RunContext, executor: AgentExecutor, settings: Settings, timeout: float
    ) -> None:
        self.ctx = ctx
        ctx.settings = settings
        self.agents = AgentNodes(ctx, executor, settings, timeout)

    def agent(self, step: AgentStep) -> NodeFn:
        return self.agents.node(step)

    def deterministic(self, step: DeterministicStep) -> NodeFn:
        return deterministic_node(self.ctx, self.agents, step)

    def question(self, step: QuestionStep) -> NodeFn:
        return question_node(self.ctx, step)

    def gate(self, step: ApprovalGate) -> NodeFn:
        return gate_node(self.ctx, step)
