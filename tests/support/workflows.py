"""Test workflows with every node kind, registered through ``SHEP_WORKFLOW_MODULES``.

``gated-review``: draft (agent) -> scope (question) -> check (deterministic)
-> approve (gate on draft; a rejection loops back to draft) -> finish (agent).
``two-questions``: two questions asked in parallel branches, then a
deterministic join that writes both answers to a file.
``linked-artifact``: a deterministic step makes the approved file a symbolic link to
the file its ``outside`` input names (as an agent or a repository could), then a gate.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from events.errors import StepFailedError
from shep.workflows.base import (
    AgentStep,
    Approval,
    ApprovalGate,
    DeterministicStep,
    NodeKit,
    Option,
    Question,
    QuestionStep,
    StepIO,
    StepState,
    Workflow,
    add_step,
    route_gate,
)

REVIEW_FILE = "shep-review.md"


class ReviewState(StepState, total=False):
    """gated-review keeps nothing beyond the node kinds' own keys."""


def _scope(state: Mapping[str, Any]) -> Question:
    inputs = state.get("inputs") or {}
    after = inputs.get("default_after")
    return Question(
        "How large should the change be?",
        (
            Option("small", "Small: one module", recommended=True),
            Option("large", "Large: the whole package"),
        ),
        context="The draft is ready; scope decides what finish touches.",
        default_after=float(after) if after else None,
    )


def _check(state: Mapping[str, Any], io: StepIO) -> dict[str, Any]:
    draft = (state.get("results") or {}).get("draft", "")
    if not draft.strip():
        raise StepFailedError("the draft is empty")
    scope = (state.get("answers") or {}).get("scope", "")
    (io.repo / REVIEW_FILE).write_text(f"# Review\n\nScope: {scope}\n\n{draft}\n")
    return {}


DRAFT = AgentStep(
    name="draft", title="Draft", instruction="[step:draft] Draft a change plan for {repo}."
)
SCOPE = QuestionStep(name="scope", title="Scope", ask=_scope)
CHECK = DeterministicStep(name="check", title="Check", run=_check)
APPROVE = ApprovalGate(
    name="approve",
    title="Approve the draft",
    phase="draft",
    approval=lambda state: Approval(
        summary=f"Draft ready, scope {(state.get('answers') or {}).get('scope')}",
        artifacts=(REVIEW_FILE,),
    ),
)
FINISH = AgentStep(
    name="finish", title="Finish", instruction="[step:finish] Finish the change as drafted."
)
REVIEW_STEPS = (DRAFT, SCOPE, CHECK, APPROVE, FINISH)


def _after_draft(state: Mapping[str, Any]) -> str:
    return "check" if "scope" in (state.get("answers") or {}) else "scope"


def _build_review(kit: NodeKit) -> Any:
    from langgraph.graph import END, START, StateGraph

    graph: StateGraph[Any, Any, Any, Any] = StateGraph(ReviewState)
    for step in REVIEW_STEPS:
        add_step(graph, kit, step)
    graph.add_edge(START, "draft")
    graph.add_conditional_edges("draft", _after_draft, ["scope", "check"])
    graph.add_edge("scope", "check")
    graph.add_edge("check", "approve")
    graph.add_conditional_edges("approve", route_gate(APPROVE, "finish"), ["draft", "finish"])
    graph.add_edge("finish", END)
    return graph


GATED_REVIEW = Workflow(
    name="gated-review",
    description="Test workflow: agent, question, deterministic step, gate, agent.",
    steps=REVIEW_STEPS,
    build=_build_review,
)


def _ask(letter: str) -> QuestionStep:
    return QuestionStep(
        name=f"ask_{letter}",
        title=f"Question {letter}",
        ask=lambda state: Question(
            f"Pick for {letter}",
            (Option("x", "X", recommended=True), Option("y", "Y")),
        ),
    )


ASK_A, ASK_B = _ask("a"), _ask("b")


def _join(state: Mapping[str, Any], io: StepIO) -> dict[str, Any]:
    answers = state.get("answers") or {}
    (io.repo / "answers.txt").write_text(f"a={answers.get('ask_a')}\nb={answers.get('ask_b')}\n")
    return {}


JOIN = DeterministicStep(name="join", title="Join", run=_join)


def _build_parallel(kit: NodeKit) -> Any:
    from langgraph.graph import END, START, StateGraph

    graph: StateGraph[Any, Any, Any, Any] = StateGraph(ReviewState)
    for step in (ASK_A, ASK_B, JOIN):
        add_step(graph, kit, step)
    graph.add_edge(START, "ask_a")
    graph.add_edge(START, "ask_b")
    graph.add_edge(["ask_a", "ask_b"], "join")
    graph.add_edge("join", END)
    return graph


TWO_QUESTIONS = Workflow(
    name="two-questions",
    description="Test workflow: two questions in parallel branches, then a join.",
    steps=(ASK_A, ASK_B, JOIN),
    build=_build_parallel,
)


def _link(state: Mapping[str, Any], io: StepIO) -> dict[str, Any]:
    (io.repo / REVIEW_FILE).symlink_to(io.inputs["outside"])
    return {}


LINK = DeterministicStep(name="link", title="Link", run=_link)
APPROVE_LINKED = ApprovalGate(
    name="approve",
    title="Approve the linked file",
    phase="link",
    approval=lambda state: Approval(summary="A file to approve", artifacts=(REVIEW_FILE,)),
)


def _build_linked(kit: NodeKit) -> Any:
    from langgraph.graph import END, START, StateGraph

    graph: StateGraph[Any, Any, Any, Any] = StateGraph(ReviewState)
    for step in (LINK, APPROVE_LINKED):
        add_step(graph, kit, step)
    graph.add_edge(START, "link")
    graph.add_edge("link", "approve")
    graph.add_conditional_edges("approve", route_gate(APPROVE_LINKED, END), ["link", END])
    return graph


LINKED_ARTIFACT = Workflow(
    name="linked-artifact",
    description="Test workflow: the approved file is a symbolic link out of the repository.",
    steps=(LINK, APPROVE_LINKED),
    build=_build_linked,
    inputs={"outside": "the file the link points at"},
)

WORKFLOWS = (GATED_REVIEW, TWO_QUESTIONS, LINKED_ARTIFACT)
