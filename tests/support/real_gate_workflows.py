"""A gated workflow for the real-CLI tests, registered through ``SHEP_WORKFLOW_MODULES``.

``real-gate``: plan (agent, read only) -> approve (gate on plan; a rejection
sends the run back to plan) -> apply (agent, may write). The run waits at the
gate with no worker, and ``apply`` continues the agent session ``plan`` began.
Each instruction carries a ``[step:NAME]`` marker, so a test can tell the
steps' model requests apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shep.workflows.base import (
    AgentStep,
    Approval,
    ApprovalGate,
    NodeKit,
    StepState,
    Workflow,
    add_step,
    route_gate,
)


class GateState(StepState, total=False):
    """real-gate keeps nothing beyond the node kinds' own keys."""


def _approval(state: Mapping[str, Any]) -> Approval:
    plan = (state.get("results") or {}).get("plan", "").strip()
    return Approval(summary=f"Plan ready: {plan.splitlines()[0][:120] if plan else '(empty)'}")


PLAN = AgentStep(
    name="plan",
    title="Plan",
    instruction="[step:plan] Read the repository at {repo} (read only) and propose a change plan.",
)
APPROVE = ApprovalGate(name="approve", title="Approve the plan", phase="plan", approval=_approval)
APPLY = AgentStep(
    name="apply",
    title="Apply",
    writes=True,
    instruction="[step:apply] The plan was approved. Apply it, then say what you changed.",
)
STEPS = (PLAN, APPROVE, APPLY)


def _build(kit: NodeKit) -> Any:
    from langgraph.graph import END, START, StateGraph

    graph: StateGraph[Any, Any, Any, Any] = StateGraph(GateState)
    for step in STEPS:
        add_step(graph, kit, step)
    graph.add_edge(START, "plan")
    graph.add_edge("plan", "approve")
    graph.add_conditional_edges("approve", route_gate(APPROVE, "apply"), ["plan", "apply"])
    graph.add_edge("apply", END)
    return graph


REAL_GATE = Workflow(
    name="real-gate",
    description="Test workflow: agent step, approval gate, agent step in the same session.",
    steps=STEPS,
    build=_build,
)

WORKFLOWS = (REAL_GATE,)
