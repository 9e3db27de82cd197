"""``shep supervisor why``: every decision on a run's items, or on one item, from the log.

The supervisor's decisions (with the rules that fired, the rationale and the
versions), its refusals (the user decided first), users' cosign votes and
every decision that took effect, in the order they were recorded.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import msgspec

from events.base import Event
from events.errors import AmbiguousRunIdError, ItemRefError, RunNotFoundError
from events.inbox import (
    ApprovalGranted,
    ApprovalRejected,
    ApprovalRequested,
    ApprovalVoted,
    QuestionAnswered,
    QuestionAsked,
)
from events.supervisor import (
    SupervisorDecisionMade,
    SupervisorDecisionRefused,
    SupervisorVerdict,
    supervisor_stream_id,
)
from shep.home.runtime import Runtime


def _resolve(runtime: Runtime, ref: str) -> tuple[str, str | None]:
    """``(run hex, item hex or None)`` for a run or item id (or a unique prefix)."""
    from projections.queries import ids_with_prefix, resolve_run_id

    if not runtime.has_store():
        raise RunNotFoundError(ref)
    conn = runtime.read_db()
    try:
        return resolve_run_id(conn, ref), None
    except RunNotFoundError:
        pass
    items = ids_with_prefix(conn, "decision_subjects", "subject_id", ref)
    if len(items) > 1:
        raise AmbiguousRunIdError(f"Item id {ref!r} matches several items; type more of it.")
    if not items:
        raise ItemRefError(f"No run or inbox item has an id starting with {ref!r}.")
    rows = conn.execute(
        "SELECT run_id FROM decision_subjects WHERE subject_id=?", (items[0],)
    ).fetchall()
    return str(rows[0][0]), items[0]


def decisions_for(runtime: Runtime, ref: str) -> list[dict[str, Any]]:
    """The decisions on ``ref`` (a run or an item), oldest first, as plain rows."""
    run_hex, only = _resolve(runtime, ref)
    store = runtime.store()
    run_id = UUID(run_hex)
    conn = runtime.read_db()
    items = (
        [only]
        if only
        else [
            str(r[0])
            for r in conn.execute(
                "SELECT subject_id FROM decision_subjects WHERE run_id=?", (run_hex,)
            )
        ]
    )
    rows: list[dict[str, Any]] = []
    asked: dict[str, QuestionAsked | ApprovalRequested] = {}
    for item in items:
        for event in store.load(UUID(item)):
            if isinstance(event, QuestionAsked | ApprovalRequested):
                asked[item] = event
            row = _item_row(item, event)
            if row is not None:
                rows.append(row)
    evidence: set[str] = set()
    for event in store.load(supervisor_stream_id(run_id)):
        row = _supervisor_row(event)
        if row is not None and (only is None or row["item"] == only):
            rows.append(row)
            if row["took_effect"]:
                evidence.add(row["item"])
    # A decision the supervisor made is shown once: its evidence row says it took effect.
    rows = [
        r
        for r in rows
        if not (
            r.get("from_item") and r["actor"].startswith("supervisor:") and r["item"] in evidence
        )
    ]
    for row in rows:
        row.pop("from_item", None)
    for row in rows:
        question = asked.get(row["item"])
        row["run"] = run_hex
        row["node"] = question.node if question else None
        row["iteration"] = question.iteration if question else None
    rows.sort(key=lambda r: r["at"])
    return rows


def _item_row(item: str, event: Event) -> dict[str, Any] | None:
    if isinstance(event, ApprovalVoted):
        return {
            "at": event.timestamp.isoformat(),
            "item": item,
            "actor": event.actor,
            "verdict": "approve (vote, waiting for the supervisor's co-signature)",
            "rationale": event.rationale,
            "policy_version": event.policy,
            "took_effect": False,
        }
    if not isinstance(event, QuestionAnswered | ApprovalGranted | ApprovalRejected):
        return None
    if isinstance(event, QuestionAnswered):
        verdict, rationale = f"answer {event.answer!r}", ""
    else:
        verdict = (
            SupervisorVerdict.APPROVE
            if isinstance(event, ApprovalGranted)
            else SupervisorVerdict.REJECT
        )
        rationale = event.rationale
    row: dict[str, Any] = {
        "at": event.timestamp.isoformat(),
        "item": item,
        "actor": event.actor,
        "verdict": verdict,
        "rationale": rationale,
        "policy_version": getattr(event, "policy", None),
        "took_effect": True,
        "from_item": True,
    }
    if event.overrides:
        row["overrides"] = event.overrides
    cosigned = getattr(event, "cosigned_by", None)
    if cosigned:
        row["cosigned_by"] = cosigned
    return row


def _supervisor_row(event: Event) -> dict[str, Any] | None:
    if isinstance(event, SupervisorDecisionRefused):
        return {
            "at": event.timestamp.isoformat(),
            "item": event.subject_id.hex,
            "actor": f"supervisor:{event.policy_version}",
            "verdict": f"{event.decision} (refused: {event.decided_by} decided first)",
            "rationale": event.reason,
            "policy_version": event.policy_version,
            "took_effect": False,
        }
    if not isinstance(event, SupervisorDecisionMade) or event.subject_id is None:
        return None
    verdict = event.decision
    if event.answer:
        verdict += f" {event.answer!r}"
    if event.advice:
        verdict += f" (advice: {event.advice})"
    if event.cosign_pending:
        verdict += " (co-signature, waiting for a user's)"
    return {
        "at": event.timestamp.isoformat(),
        "item": event.subject_id.hex,
        "actor": f"supervisor:{event.policy_version}",
        "verdict": verdict,
        "rationale": event.rationale,
        "autonomy": event.autonomy,
        "kind": event.item_kind,
        "rules": [msgspec.to_builtins(r) for r in event.rules],
        "policy_version": event.policy_version,
        "prompt_version": event.prompt_version,
        "evaluator": event.evaluator_agent,
        "model": event.model,
        "confidence": event.confidence,
        "input_hash": event.input_hash,
        "took_effect": event.acted,
    }


def render_decision(row: dict[str, Any]) -> str:
    """A decision as a few lines of text, people's and agents' words shown escaped."""
    from events.display import printable

    where = f"{row['node']}" + (f" #{row['iteration']}" if (row.get("iteration") or 1) > 1 else "")
    effect = "" if row["took_effect"] else "  (did not decide the item)"
    lines = [
        f"{row['at'][:19]}  {row['item'][:8]}  {where}  {row['actor']}: {row['verdict']}{effect}"
    ]
    if row.get("overrides"):
        lines.append(f"    overrides {row['overrides']}")
    if row.get("cosigned_by"):
        lines.append(f"    co-signed by {row['cosigned_by']}")
    for rule in row.get("rules", []):
        state = {True: "pass", False: "BREACH", None: "missing"}[rule["passed"]]
        lines.append(f"    rule {rule['rule']}: {state} ({rule['detail']})")
    if row["rationale"]:
        lines.append(f"    why: {row['rationale']}")
    if row.get("prompt_version"):
        confidence = row.get("confidence")
        level = f", confidence {confidence:.2f}" if confidence is not None else ""
        model = row.get("model") or "default model"
        lines.append(
            f"    policy {row['policy_version']}, prompt {row['prompt_version']}, "
            f"{row['evaluator']} ({model}){level}, input sha256 {row['input_hash'][:16]}"
        )
    return printable("\n".join(lines))
