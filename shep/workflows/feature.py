"""feature and feature-fast: from a one-sentence description to merged code, in its own worktree.

``shep feat new`` makes the branch and the worktree (``shep.features.start``), then
runs one of these graphs with the worktree as the run's repository:

- **feature**: setup -> analyze -> requirements (-> clarify, one inbox
  question per open question, -> requirements again) -> validate_spec ->
  [prd] -> research -> validate_research -> plan -> validate_plan ->
  [plan_gate] -> implement (the tasks, phase by phase) -> tests ->
  [merge_gate] -> merge;
- **feature-fast**: setup -> fast (implement straight from the description)
  -> tests -> [merge_gate] -> merge.

Each spec file is checked by a validate step; invalid output goes to a repair
step (write tools only, few turns) at most ``MAX_REPAIRS`` times, then the run
fails with the errors, and ``shep resume`` runs the producing step again.
A gate in brackets is skipped when the run's ``allow_*`` input is set. A
rejection sends the run back to the phase with the reason. Every node that
may change files ends with a snapshot of the worktree (``NodeCompleted.snapshot``,
``TaskCompleted.snapshot``).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

from events.errors import StepFailedError
from events.features import FEATURE, FEATURE_FAST
from events.words import counted
from shep.workflows.base import (
    AgentStep,
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
from shep.workflows.feature_gates import (
    conflict_question,
    conflict_record,
    merge_approval,
    plan_approval,
    prd_approval,
)
from shep.workflows.feature_prompts import (
    PLAN_SCHEMA,
    RESEARCH_SCHEMA,
    SPEC_SCHEMA,
    analyze_prompt,
    fast_prompt,
    inputs_of,
    plan_prompt,
    repair_prompt,
    requirements_prompt,
    research_prompt,
    resolve_prompt,
    revise_prompt,
    spec_dir_of,
)
from shep.workflows.feature_steps import implement, merge, setup, tests

#: How many times a repair step may try to fix one invalid file.
MAX_REPAIRS = 3


class FeatureState(StepState, total=False):
    """The feature graphs' state beyond the node kinds' own keys.

    ``qa``: every open question answered so far, question -> answer.
    ``checks``: each validator's latest errors (``[]``: valid). ``repairs``:
    repairs so far per validator. ``route``: where the latest validator or
    merge sends the run. ``repair``: what the repair step fixes now.
    ``review``: the diff against the base and the test result, for the merge gate.
    """

    qa: Annotated[dict[str, str], operator.or_]
    checks: Annotated[dict[str, list[str]], operator.or_]
    repairs: Annotated[dict[str, int], operator.or_]
    route: str
    repair: dict[str, Any]
    review: dict[str, Any]
    merge: dict[str, Any]


# -- validation and repair --------------------------------------------------------------------


def _validator(
    name: str,
    kind: str,
    check: Callable[[Path, Mapping[str, Any]], tuple[str, list[str]]],
    schema: str,
) -> DeterministicStep:
    """A step that validates ``kind``'s file(s) and routes: on, to repair, or to give up."""

    def run(state: Mapping[str, Any], io: StepIO) -> dict[str, Any]:
        file, errors = check(io.repo, state)
        if not errors:
            return {"checks": {kind: []}, "repairs": {kind: 0}, "route": "ok"}
        repairs = (state.get("repairs") or {}).get(kind, 0)
        io.message(f"{file}: {len(errors)} validation error(s)")
        repair = {"kind": kind, "file": file, "errors": errors, "validator": name}
        if repairs >= MAX_REPAIRS:
            return {"checks": {kind: errors}, "repair": repair, "route": "give_up"}
        return {
            "checks": {kind: errors},
            "repairs": {kind: repairs + 1},
            "repair": {**repair, "schema": schema},
            "route": "repair",
        }

    return DeterministicStep(name=name, title=f"Validate {kind}", run=run)


def _check_spec(worktree: Path, state: Mapping[str, Any]) -> tuple[str, list[str]]:
    from shep.workflows.feature_specs import validate_spec

    inputs = inputs_of(state)
    relative = f"{inputs['spec_dir']}/spec.yaml"
    number = int(Path(inputs["spec_dir"]).name.split("-", 1)[0])
    _, errors = validate_spec(
        worktree / relative, number=number, branch=inputs["branch"], inside=worktree
    )
    return relative, errors


def _check_research(worktree: Path, state: Mapping[str, Any]) -> tuple[str, list[str]]:
    from shep.workflows.feature_specs import validate_research

    relative = f"{spec_dir_of(state)}/research.yaml"
    return relative, validate_research(worktree / relative, inside=worktree)[1]


def _check_plan(worktree: Path, state: Mapping[str, Any]) -> tuple[str, list[str]]:
    from shep.workflows.feature_specs import validate_plan, validate_tasks

    spec_dir = spec_dir_of(state)
    plan, errors = validate_plan(worktree / spec_dir / "plan.yaml", inside=worktree)
    if plan is None:
        return f"{spec_dir}/plan.yaml", errors
    tasks_errors = validate_tasks(worktree / spec_dir / "tasks.yaml", plan, inside=worktree)[1]
    return f"{spec_dir}/tasks.yaml", errors + tasks_errors


def _give_up(producers: Mapping[str, str]) -> DeterministicStep:
    """Fail the run with the errors; resumed, send it back to the step that wrote the file."""

    def run(state: Mapping[str, Any], io: StepIO) -> dict[str, Any]:
        repair = state.get("repair") or {}
        kind = repair.get("kind", "")
        producer = producers[kind]
        if io.attempt == 1:
            errors = "; ".join(repair.get("errors", ()))
            raise StepFailedError(
                f"{repair.get('file')} is still invalid after {MAX_REPAIRS} repairs: {errors}. "
                f"`shep resume` runs the {producer} step again."
            )
        io.message(f"resumed: {producer} writes {repair.get('file')} again")
        return {"repairs": {kind: 0}, "route": producer}

    return DeterministicStep(name="give_up", title="Give up on an invalid file", run=run)


# -- requirements' questions -------------------------------------------------------------------


def _open_questions(state: Mapping[str, Any], worktree: Path | None = None) -> list[Any]:
    """The latest spec's open questions that have no answer yet."""
    from shep.workflows.feature_specs import validate_spec

    inputs = inputs_of(state)
    root = Path(worktree or state.get("repo") or ".")
    number = int(Path(inputs["spec_dir"]).name.split("-", 1)[0])
    spec, _ = validate_spec(root / inputs["spec_dir"] / "spec.yaml", number=number, inside=root)
    answered = state.get("qa") or {}
    if spec is None:
        return []
    return [q for q in spec.open_questions if q.question not in answered]


def _validate_spec_step() -> DeterministicStep:
    base = _validator("validate_spec", "spec", _check_spec, SPEC_SCHEMA)

    def run(state: Mapping[str, Any], io: StepIO) -> dict[str, Any]:
        update = base.run(state, io)
        if update["route"] != "ok":
            return update
        if _open_questions(state, io.repo):
            done = int((state.get("iterations") or {}).get("requirements", 0))
            bound = int(io.setting("requirements_iterations"))
            if done > bound:
                raise StepFailedError(
                    f"requirements still has open questions after {counted(bound, 'round')} of "
                    f"answers (requirements_iterations is {bound}). Raise it with `shep settings "
                    "workflow --requirements-iterations N`, then `shep resume`."
                )
            return {**update, "route": "clarify"}
        return update

    return DeterministicStep(name=base.name, title=base.title, run=run)


def _clarify_question(state: Mapping[str, Any]) -> Question:
    pending = _open_questions(state)
    if not pending:
        raise StepFailedError("clarify was reached with no open question")
    question = pending[0]
    options = tuple(
        Option(id=str(i), label=o.label, description=o.description, recommended=o.recommended)
        for i, o in enumerate(question.options, start=1)
    )
    return Question(
        text=question.question,
        options=options,
        context=f"Requirements of: {inputs_of(state)['description']}",
    )


def _clarify_record(state: Mapping[str, Any], answer: str, option: str | None) -> dict[str, Any]:
    pending = _open_questions(state)
    return {"qa": {pending[0].question: answer}} if pending else {}


# -- the steps and the graphs -------------------------------------------------------------------

SETUP = DeterministicStep(name="setup", title="Worktree setup", run=setup)
ANALYZE = AgentStep(name="analyze", title="Analyze", instruction="", prompt=analyze_prompt)
REQUIREMENTS = AgentStep(
    name="requirements",
    title="Requirements",
    instruction="",
    prompt=requirements_prompt,
    writes=True,
)
VALIDATE_SPEC = _validate_spec_step()
CLARIFY = QuestionStep(
    name="clarify", title="Open question", ask=_clarify_question, record=_clarify_record
)
PRD = ApprovalGate(
    name="prd",
    title="Approve the requirements",
    phase="requirements",
    approval=prd_approval,
    kind="prd",
)
RESEARCH = AgentStep(
    name="research", title="Research", instruction="", prompt=research_prompt, writes=True
)
VALIDATE_RESEARCH = _validator("validate_research", "research", _check_research, RESEARCH_SCHEMA)
PLAN = AgentStep(name="plan", title="Plan", instruction="", prompt=plan_prompt, writes=True)
VALIDATE_PLAN = _validator("validate_plan", "plan", _check_plan, PLAN_SCHEMA)
PLAN_GATE = ApprovalGate(
    name="plan_gate",
    title="Approve the plan",
    phase="plan",
    approval=plan_approval,
    kind="plan",
)
REPAIR = AgentStep(
    name="repair",
    title="Repair",
    instruction="",
    prompt=repair_prompt,
    write_only=True,
    max_turns=5,
)
GIVE_UP = _give_up({"spec": "requirements", "research": "research", "plan": "plan"})
IMPLEMENT = DeterministicStep(name="implement", title="Implement", run=implement, writes=True)
FAST = AgentStep(name="fast", title="Implement", instruction="", prompt=fast_prompt, writes=True)
REVISE = AgentStep(name="revise", title="Revise", instruction="", prompt=revise_prompt, writes=True)
TESTS = DeterministicStep(name="tests", title="Tests", run=tests)
MERGE = DeterministicStep(name="merge", title="Merge", run=merge)
CONFLICT = QuestionStep(
    name="conflict", title="Merge conflict", ask=conflict_question, record=conflict_record
)
RESOLVE = AgentStep(
    name="resolve", title="Resolve", instruction="", prompt=resolve_prompt, writes=True
)


#: The full graph's steps up to the tests (``_tail`` adds the rest).
_FULL_HEAD = (
    SETUP,
    ANALYZE,
    REQUIREMENTS,
    VALIDATE_SPEC,
    CLARIFY,
    PRD,
    RESEARCH,
    VALIDATE_RESEARCH,
    PLAN,
    VALIDATE_PLAN,
    PLAN_GATE,
    REPAIR,
    GIVE_UP,
    IMPLEMENT,
    REVISE,
)


def _merge_gate(phase: str) -> ApprovalGate:
    return ApprovalGate(
        name="merge_gate",
        title="Approve the merge",
        phase=phase,
        approval=merge_approval,
        kind="merge",
    )


def _allowed(gate: str) -> Callable[[Mapping[str, Any]], bool]:
    return lambda state: bool(inputs_of(state).get(f"allow_{gate}"))


def _to(gate: ApprovalGate, after: str, allowed: str) -> Callable[[Mapping[str, Any]], str]:
    """Route to ``gate``, or straight to ``after`` when the run's input allows it."""
    skip = _allowed(allowed)
    return lambda state: after if skip(state) else gate.name


def _route(state: Mapping[str, Any]) -> str:
    return str(state.get("route") or "ok")


def _tail(graph: Any, kit: NodeKit, gate: ApprovalGate) -> None:
    """tests -> [merge_gate] -> merge (-> conflict -> merge | resolve | END) -> END."""
    from langgraph.graph import END

    for step in (TESTS, gate, MERGE, CONFLICT, RESOLVE):
        add_step(graph, kit, step)
    graph.add_conditional_edges("tests", _to(gate, "merge", "merge"), [gate.name, "merge"])
    graph.add_conditional_edges("merge_gate", route_gate(gate, "merge"), [gate.phase, "merge"])
    graph.add_conditional_edges(
        "merge", lambda s: "conflict" if _route(s) == "conflict" else END, ["conflict", END]
    )
    graph.add_conditional_edges(
        "conflict",
        lambda s: {"merge": "merge", "resolve": "resolve"}.get(_route(s), END),
        ["merge", "resolve", END],
    )
    graph.add_edge("resolve", "merge")


def _build_full(kit: NodeKit) -> Any:
    from langgraph.graph import START, StateGraph

    graph: StateGraph[Any, Any, Any, Any] = StateGraph(FeatureState)
    merge_gate = _merge_gate("revise")
    for step in _FULL_HEAD:
        add_step(graph, kit, step)
    graph.add_edge(START, "setup")
    graph.add_edge("setup", "analyze")
    graph.add_edge("analyze", "requirements")
    graph.add_edge("requirements", "validate_spec")
    after_spec = _to(PRD, "research", "prd")
    graph.add_conditional_edges(
        "validate_spec",
        lambda s: {"repair": "repair", "give_up": "give_up", "clarify": "clarify"}.get(
            _route(s), after_spec(s)
        ),
        ["repair", "give_up", "clarify", "prd", "research"],
    )
    graph.add_conditional_edges(
        "clarify",
        lambda s: "clarify" if _open_questions(s) else "requirements",
        ["clarify", "requirements"],
    )
    graph.add_conditional_edges("prd", route_gate(PRD, "research"), ["requirements", "research"])
    graph.add_edge("research", "validate_research")
    graph.add_conditional_edges(
        "validate_research",
        lambda s: {"repair": "repair", "give_up": "give_up"}.get(_route(s), "plan"),
        ["repair", "give_up", "plan"],
    )
    graph.add_edge("plan", "validate_plan")
    after_plan = _to(PLAN_GATE, "implement", "plan")
    graph.add_conditional_edges(
        "validate_plan",
        lambda s: {"repair": "repair", "give_up": "give_up"}.get(_route(s), after_plan(s)),
        ["repair", "give_up", "plan_gate", "implement"],
    )
    graph.add_conditional_edges(
        "plan_gate", route_gate(PLAN_GATE, "implement"), ["plan", "implement"]
    )
    graph.add_conditional_edges(
        "repair",
        lambda s: str((s.get("repair") or {}).get("validator", "validate_spec")),
        ["validate_spec", "validate_research", "validate_plan"],
    )
    graph.add_conditional_edges("give_up", _route, ["requirements", "research", "plan"])
    graph.add_edge("implement", "tests")
    graph.add_edge("revise", "tests")
    _tail(graph, kit, merge_gate)
    return graph


def _build_fast(kit: NodeKit) -> Any:
    from langgraph.graph import START, StateGraph

    graph: StateGraph[Any, Any, Any, Any] = StateGraph(FeatureState)
    for step in (SETUP, FAST):
        add_step(graph, kit, step)
    graph.add_edge(START, "setup")
    graph.add_edge("setup", "fast")
    graph.add_edge("fast", "tests")
    _tail(graph, kit, _merge_gate("fast"))
    return graph


FULL_STEPS = (*_FULL_HEAD, TESTS, _merge_gate("revise"), MERGE, CONFLICT, RESOLVE)
FAST_STEPS = (SETUP, FAST, TESTS, _merge_gate("fast"), MERGE, CONFLICT, RESOLVE)
#: The inputs `shep feat new` records (see ``shep.features.start``).
INPUTS: Mapping[str, str] = {
    "description": "what the feature is, in a sentence or more",
    "source_repo": "the user's repository",
    "base": "the branch the feature starts from and merges into",
    "base_sha": "the base's commit when the feature started",
    "branch": "the feature's branch",
    "spec_dir": "specs/NNN-slug, in the worktree",
    "allow_prd": "skip the requirements gate when set",
    "allow_plan": "skip the plan gate when set",
    "allow_merge": "skip the merge gate when set",
    "push": "push the branch when set",
    "pr": "push and open a pull request instead of merging locally when set",
}

#: The phase of each node that is not one itself (progress, `shep feat show`).
PHASE_OF: Mapping[str, str] = {
    "validate_spec": "requirements",
    "clarify": "requirements",
    "prd": "requirements",
    "validate_research": "research",
    "validate_plan": "plan",
    "plan_gate": "plan",
    "revise": "implement",
    "merge_gate": "merge",
    "conflict": "merge",
    "resolve": "merge",
}
_FAST_PHASE_OF: Mapping[str, str] = {**PHASE_OF, "revise": "fast"}

FEATURE_WORKFLOW = Workflow(
    name=FEATURE,
    description="A feature from a description to a merged commit: requirements, research, "
    "plan, tasks, tests, merge (use `shep feat new`).",
    steps=FULL_STEPS,
    build=_build_full,
    inputs=INPUTS,
    phases=("setup", "analyze", "requirements", "research", "plan", "implement", "tests", "merge"),
    phase_of=PHASE_OF,
)
FEATURE_FAST_WORKFLOW = Workflow(
    name=FEATURE_FAST,
    description="A feature implemented straight from its description, then the merge gate "
    "(`shep feat new --fast`).",
    steps=FAST_STEPS,
    build=_build_fast,
    inputs=INPUTS,
    phases=("setup", "fast", "tests", "merge"),
    phase_of=_FAST_PHASE_OF,
)
FEATURE_WORKFLOWS: Sequence[Workflow] = (FEATURE_WORKFLOW, FEATURE_FAST_WORKFLOW)
