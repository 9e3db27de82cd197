"""``shep supervisor what-if``: past items re-evaluated under another policy; nothing written.

Each item asked (since a date) goes through the same evaluation graph as the
supervisor's, with the file's policy covering every run. Its effect (approve,
reject, answer, or left to a person) is compared with what actually happened
to the item.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import msgspec

from commands.inbox_state import ItemState, load_item
from commands.policies import Policy, check_policy
from events.inbox import ApprovalGranted, ApprovalRequested, QuestionAnswered, QuestionAsked
from events.store import EventStore
from events.supervisor import Autonomy, Guardrails, SupervisorVerdict
from shep.supervisor.evaluate import UNDECIDED, Decision, EvaluationGraph, Evaluator

if TYPE_CHECKING:
    from shep.supervisor.policy_file import PolicyFile

#: How a what-if policy is named in its decisions.
WHAT_IF_SCOPE = "what-if"


def what_if_policy(read: PolicyFile) -> Policy:
    rules = msgspec.convert(read.guardrails, Guardrails)
    check_policy(read.autonomy, dict(read.overrides), rules)
    return Policy(
        scope=WHAT_IF_SCOPE,
        version=0,
        autonomy=read.autonomy,
        overrides=dict(read.overrides),
        guardrails=rules,
        model=read.model,
        timeout=read.timeout,
    )


def what_if_rows(
    store: EventStore,
    read: PolicyFile,
    *,
    since: datetime | None,
    evaluator: Evaluator | None,
) -> list[dict[str, Any]]:
    """One row per item asked since ``since``: what happened, what would, and whether it differs."""
    policy = what_if_policy(read)
    graph = EvaluationGraph(store, evaluator, policies={"global": policy})
    since_utc = since.replace(tzinfo=UTC) if since and since.tzinfo is None else since
    rows: list[dict[str, Any]] = []
    after = 0
    while True:
        batch = store.positions_of([QuestionAsked, ApprovalRequested], after=after, limit=500)
        if not batch:
            return rows
        for position, event in batch:
            after = position
            if since_utc is not None and event.timestamp < since_utc:
                continue
            item = load_item(store, event.originator_id)
            decision = graph.decide(event.originator_id)
            if item is None or decision is None:
                continue
            rows.append(_row(item, decision))


def _actual(item: ItemState) -> tuple[str, str]:
    """``(effect, in words)`` of what happened to the item."""
    decision = item.decision
    if decision is None:
        return "none", "undecided"
    if isinstance(decision, QuestionAnswered):
        return f"answer:{decision.answer}", f"answered {decision.answer!r} by {decision.actor}"
    if isinstance(decision, ApprovalGranted):
        return SupervisorVerdict.APPROVE, f"approved by {decision.actor}"
    return SupervisorVerdict.REJECT, f"rejected by {decision.actor}"


def _would(decision: Decision) -> tuple[str, str]:
    verdict = decision.verdict
    if verdict == UNDECIDED:
        return "?", "up to the evaluator (--with-llm)"
    if verdict == SupervisorVerdict.ANSWER and decision.autonomy == Autonomy.AUTONOMOUS:
        return f"answer:{decision.answer}", f"supervisor answers {decision.answer!r}"
    deciding = (SupervisorVerdict.APPROVE, SupervisorVerdict.REJECT)
    if verdict in deciding and decision.autonomy == Autonomy.AUTONOMOUS:
        return verdict, f"supervisor {verdict}s"
    if verdict == SupervisorVerdict.APPROVE and decision.autonomy == Autonomy.COSIGN:
        return Autonomy.COSIGN, "supervisor co-signs (a user approves too)"
    words = f"{verdict}" + (f" (would {decision.advice})" if decision.advice else "")
    return "person", f"left to a person: {words}"


def _row(item: ItemState, decision: Decision) -> dict[str, Any]:
    actual, was = _actual(item)
    effect, would = _would(decision)
    by_supervisor = item.decision is not None and item.decision.actor.startswith("supervisor:")
    if effect == "?":
        changed = False
    elif effect == "person":
        changed = by_supervisor
    elif effect == Autonomy.COSIGN:
        changed = actual != SupervisorVerdict.APPROVE
    else:
        changed = effect != actual
    return {
        "item": item.item_id.hex,
        "run": item.asked.run_id.hex,
        "node": item.asked.node,
        "kind": decision.kind,
        "asked_at": item.asked.timestamp.isoformat(),
        "was": was,
        "would": would,
        "verdict": decision.verdict,
        "rationale": decision.rationale,
        "rules": [msgspec.to_builtins(r) for r in decision.rules],
        "changed": changed,
    }
