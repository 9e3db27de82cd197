"""The supervisor's evaluation of one inbox item: a small LangGraph workflow.

ingest (the item and its run) -> policy (the most specific enabled one) ->
guardrails (deterministic; a breach or a missing metric is final) ->
evaluate (the evaluator, with the versioned prompt; skipped when the
guardrails already decided) -> emit (the verdict, made to fit the autonomy).

The graph only reads; the caller records what ``emit`` produced, with its
tracking position, in one transaction (``commands.supervise``). An evaluator
that fails or times out gives an ``escalate`` with the reason: an item is
never left silently undecided.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypedDict
from uuid import UUID

import msgspec

from commands.inbox_state import ItemState, load_item
from commands.policies import Policy, item_kind, load_policies, policy_for, source_repo
from events.base import Event
from events.errors import UnsafePathError
from events.inbox import QuestionAsked
from events.inbox_status import ItemKind
from events.runs import RunCreated
from events.store import EventStore
from events.supervisor import DECIDING_VERDICTS, Autonomy, RuleResult, SupervisorVerdict
from shep.git.worktree import read_inside
from shep.supervisor import guardrails
from shep.supervisor.prompt import (
    PROMPT_VERSION,
    Reply,
    build_prompt,
    input_document,
    input_hash,
    read_reply,
)

#: The verdict of an item only the evaluator could decide, when none was given (what-if).
UNDECIDED = "undecided"
#: The evaluator recorded for a decision the guardrails made without it.
GUARDRAILS = "guardrails"
#: How much of each approved file the evaluator is shown.
ARTIFACT_CHARS = 20_000


class Evaluator(Protocol):
    """Something that reads a prompt and replies (an agent CLI through the executor port)."""

    name: str

    def __call__(self, prompt: str, *, model: str | None, timeout: float) -> str: ...


@dataclass(frozen=True)
class Decision:
    """What the supervisor decided on one item, with all its evidence."""

    item_id: UUID
    run_id: UUID
    kind: str
    policy: Policy
    autonomy: str
    verdict: str
    rationale: str
    input_hash: str
    evaluator: str
    model: str | None
    prompt_version: str = PROMPT_VERSION
    confidence: float | None = None
    advice: str | None = None
    answer: str | None = None
    option_id: str | None = None
    rules: list[RuleResult] = field(default_factory=list)
    consulted: bool = False

    @property
    def acts(self) -> bool:
        """Whether it decides the item by itself (cosign approvals need a user too)."""
        return self.autonomy == Autonomy.AUTONOMOUS and self.verdict in DECIDING_VERDICTS


class EvalState(TypedDict, total=False):
    item_id: UUID
    item: ItemState | None
    run_events: list[Event]
    kind: str
    policy: Policy | None
    metrics: guardrails.Metrics
    rules: list[RuleResult]
    outcome: str
    document: dict[str, Any]
    reply: Reply
    decision: Decision | None


@dataclass
class EvaluationGraph:
    """The compiled graph for one store and evaluator; ``policies`` replaces the stored ones
    (what-if)."""

    store: EventStore
    evaluator: Evaluator | None
    policies: dict[str, Policy] | None = None
    #: Called with the item just before the evaluator is consulted (tests use it).
    before_evaluate: Callable[[ItemState], None] | None = None

    def __post_init__(self) -> None:
        from langgraph.graph import END, START, StateGraph

        graph = StateGraph(EvalState)
        graph.add_node("ingest", self._ingest)
        graph.add_node("policy", self._policy)
        graph.add_node("guardrails", self._guardrails)
        graph.add_node("evaluate", self._evaluate)
        graph.add_node("emit", self._emit)
        graph.add_edge(START, "ingest")
        graph.add_conditional_edges("ingest", lambda s: "policy" if s.get("item") else END)
        graph.add_conditional_edges("policy", lambda s: "guardrails" if s.get("policy") else END)
        graph.add_conditional_edges("guardrails", self._route)
        graph.add_edge("evaluate", "emit")
        graph.add_edge("emit", END)
        self.graph = graph.compile()

    def decide(self, item_id: UUID) -> Decision | None:
        """The decision on ``item_id``; None when no policy covers it (or it is gone)."""
        final = self.graph.invoke({"item_id": item_id})
        return final.get("decision")

    # -- nodes --------------------------------------------------------------------------

    def _ingest(self, state: EvalState) -> EvalState:
        item = load_item(self.store, state["item_id"])
        if item is None:
            return {"item": None}
        events = self.store.load(item.asked.run_id)
        return {"item": item, "run_events": events, "kind": item_kind(item.asked)}

    def _policy(self, state: EvalState) -> EvalState:
        item = state["item"]
        assert item is not None
        created = _created(state["run_events"])
        policies = self.policies if self.policies is not None else load_policies(self.store)
        return {"policy": policy_for(policies, item.asked.run_id, source_repo(created))}

    def _guardrails(self, state: EvalState) -> EvalState:
        item, policy, kind = _parts(state)
        metrics = guardrails.measure(state["run_events"], item.asked.timestamp)
        rules = guardrails.check(policy.guardrails, metrics, kind)
        created = _created(state["run_events"])
        document = input_document(
            _item_document(item, created),
            {
                "id": item.asked.run_id.hex,
                "workflow": created.workflow if created else None,
                "repo": source_repo(created),
                "inputs": {
                    k: v for k, v in (created.inputs if created else {}).items() if k != "token"
                },
            },
            metrics.as_dict(),
            [msgspec.to_builtins(r) for r in rules],
        )
        return {
            "metrics": metrics,
            "rules": rules,
            "outcome": guardrails.outcome(rules),
            "document": document,
        }

    def _route(self, state: EvalState) -> str:
        policy = state["policy"]
        assert policy is not None
        outcome = state["outcome"]
        if outcome in ("breach", "missing"):
            return "emit"
        if outcome == "pass" and policy.guardrails.auto_approve:
            return "emit"
        return "evaluate"

    def _evaluate(self, state: EvalState) -> EvalState:
        item, policy, kind = _parts(state)
        autonomy = policy.autonomy_for(kind)
        if self.evaluator is None:  # what-if without --with-llm: never recorded
            return {"reply": Reply(UNDECIDED, "the evaluator would decide (--with-llm)")}
        if self.before_evaluate is not None:
            self.before_evaluate(item)
        prompt = build_prompt(state["document"], autonomy, kind)
        try:
            text = self.evaluator(prompt, model=policy.model, timeout=policy.timeout)
        except Exception as e:  # an unreliable subprocess: any failure escalates
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            return {
                "reply": Reply(
                    SupervisorVerdict.ESCALATE, "", problem=f"the evaluator failed: {reason}"
                )
            }
        return {"reply": read_reply(text)}

    def _emit(self, state: EvalState) -> EvalState:
        item, policy, kind = _parts(state)
        autonomy = policy.autonomy_for(kind)
        rules = state["rules"]
        outcome = state["outcome"]
        reply = state.get("reply")
        fields: dict[str, Any]
        if outcome == "breach":
            broken = "; ".join(r.detail for r in rules if r.passed is False)
            fields = {
                "verdict": SupervisorVerdict.ESCALATE,
                "rationale": f"guardrail breached: {broken}",
            }
        elif outcome == "missing":
            missing = "; ".join(f"{r.rule}: {r.detail}" for r in rules if r.passed is None)
            fields = {
                "verdict": SupervisorVerdict.ESCALATE,
                "rationale": f"missing metrics (fail closed): {missing}",
            }
        elif reply is None:
            fields = {
                "verdict": SupervisorVerdict.APPROVE,
                "rationale": "every guardrail passed (auto-approve)",
            }
        elif reply.verdict == UNDECIDED:
            fields = {"verdict": UNDECIDED, "rationale": reply.rationale}
        else:
            fields = _from_reply(reply, item, kind)
        fields = _fit_autonomy(fields, autonomy)
        decision = Decision(
            item_id=item.item_id,
            run_id=item.asked.run_id,
            kind=kind,
            policy=policy,
            autonomy=autonomy,
            input_hash=input_hash(state["document"]),
            # The evidence names who decided: the guardrails alone consult no model.
            evaluator=_evaluator_name(self.evaluator) if reply is not None else GUARDRAILS,
            model=policy.model if reply is not None else None,
            rules=rules,
            consulted=reply is not None,
            **fields,
        )
        return {"decision": decision}


_ITEM_FIELDS = (
    "node", "iteration", "question", "options", "free_text", "context", "summary", "phase",
    "artifacts",
)  # fmt: skip


def _parts(state: EvalState) -> tuple[ItemState, Policy, str]:
    """The item, its policy and its kind, which every node after ``policy`` has."""
    item, policy = state["item"], state["policy"]
    if item is None or policy is None:
        raise AssertionError("the graph routes items without a policy to its end")
    return item, policy, state["kind"]


def _from_reply(reply: Reply, item: ItemState, kind: str) -> dict[str, Any]:
    """The evaluator's reply as a verdict this item can take; anything else escalates."""
    base: dict[str, Any] = {"confidence": reply.confidence}
    if reply.problem:
        return {**base, "verdict": SupervisorVerdict.ESCALATE, "rationale": reply.problem}
    if not reply.rationale:
        return {
            **base,
            "verdict": SupervisorVerdict.ESCALATE,
            "rationale": "the evaluator gave no rationale",
        }
    verdict = reply.verdict
    if kind == ItemKind.QUESTION:
        if (
            verdict
            in (SupervisorVerdict.ANSWER, SupervisorVerdict.APPROVE, SupervisorVerdict.ADVISE)
            and reply.answer
        ):
            asked = item.asked
            assert isinstance(asked, QuestionAsked)
            option = asked.option_named(reply.answer)
            if option is None and not asked.free_text:
                return {
                    **base,
                    "verdict": SupervisorVerdict.ESCALATE,
                    "rationale": f"the evaluator's answer {reply.answer!r} is not one of the "
                    f"options ({reply.rationale})",
                }
            answer = option.label if option else reply.answer
            return {
                **base,
                "verdict": (
                    SupervisorVerdict.ADVISE
                    if verdict == SupervisorVerdict.ADVISE
                    else SupervisorVerdict.ANSWER
                ),
                "rationale": reply.rationale,
                "answer": answer,
                "option_id": option.id if option else None,
            }
        if verdict in (SupervisorVerdict.ESCALATE, SupervisorVerdict.ADVISE):
            return {**base, "verdict": verdict, "rationale": reply.rationale}
        return {
            **base,
            "verdict": SupervisorVerdict.ESCALATE,
            "rationale": f"the evaluator answered {verdict or 'nothing'!r} without an answer: "
            f"{reply.rationale}",
        }
    if verdict in (
        SupervisorVerdict.APPROVE,
        SupervisorVerdict.REJECT,
        SupervisorVerdict.ESCALATE,
        SupervisorVerdict.ADVISE,
    ):
        return {**base, "verdict": verdict, "rationale": reply.rationale}
    return {
        **base,
        "verdict": SupervisorVerdict.ESCALATE,
        "rationale": f"the evaluator's verdict {verdict!r} is not approve, reject or escalate: "
        f"{reply.rationale}",
    }


def _evaluator_name(evaluator: Evaluator | None) -> str:
    return evaluator.name if evaluator is not None else "none"


def _fit_autonomy(fields: dict[str, Any], autonomy: str) -> dict[str, Any]:
    """Advisory acts on nothing: approve, reject and answer become advice."""
    if autonomy == Autonomy.ADVISORY and fields["verdict"] in DECIDING_VERDICTS:
        return {**fields, "verdict": SupervisorVerdict.ADVISE.value, "advice": fields["verdict"]}
    return fields


def _created(events: list[Event]) -> RunCreated | None:
    return next((e for e in events if isinstance(e, RunCreated)), None)


def _item_document(item: ItemState, created: RunCreated | None) -> dict[str, Any]:
    """The item as the evaluator sees it; an approved file's content if it is unchanged."""
    data = msgspec.to_builtins(item.asked)
    document: dict[str, Any] = {key: data[key] for key in _ITEM_FIELDS if key in data}
    document["id"] = item.item_id.hex
    document["kind"] = item.kind
    files = []
    for artifact in document.get("artifacts", []):
        if artifact.get("kind", "file") != "file":
            continue  # the diff and the test result: their hashes are in "artifacts"
        content = None
        with contextlib.suppress(OSError, ValueError, UnsafePathError):
            if created is not None:
                # Never through a symbolic link: the evaluator sees no file outside the
                # worktree (see shep.git.worktree).
                raw = read_inside(created.repo, artifact["path"])
                if hashlib.sha256(raw).hexdigest() == artifact["sha256"]:
                    content = raw.decode("utf-8", "replace")[:ARTIFACT_CHARS]
        files.append(
            {
                "path": artifact["path"],
                "content": content if content is not None else "(changed since it was asked)",
            }
        )
    if files:
        document["files"] = files
    return document
