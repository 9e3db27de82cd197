"""Record a supervisor decision, its effect on the item, and its tracking position: one commit.

The supervisor follows the log under the reader name ``SUPERVISOR``. Each item
it handles moves its tracking position in the same transaction as what it
recorded, so after a crash it neither decides an item twice nor skips one.

- The user always wins: an item a person decided meanwhile gets
  ``SupervisorDecisionRefused`` (naming who decided), and no decision.
- ``autonomous``: approve, reject or answer decide the item (actor
  ``supervisor:<policy@version>``), with ``SupervisorDecisionMade``.
- ``cosign``: an approval decides the gate only if a user already voted for it
  (``ApprovalVoted``); else it waits for the user's (``cosign_pending``).
- anything else (advice, escalation, a cosign rejection) only records the
  decision: the item stays in the inbox for a person.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from uuid import UUID

from commands.inbox_state import ItemState, append_decision, is_person, load_item
from events.base import Event, utc_now
from events.errors import AlreadyDecidedError, ConcurrencyError, RunNotWaitingError
from events.inbox import ApprovalGranted, ApprovalRejected, QuestionAnswered
from events.inbox_status import ItemKind
from events.store import EventStore
from events.supervisor import (
    Autonomy,
    RuleResult,
    SupervisorDecisionMade,
    SupervisorDecisionRefused,
    SupervisorVerdict,
    supervisor_stream_id,
)

#: The supervisor's reader name in the tracking table.
SUPERVISOR = "supervisor"


@dataclass(frozen=True)
class Verdict:
    """A decision to record (built by ``shep.supervisor.evaluate``)."""

    item_id: UUID
    run_id: UUID
    kind: str
    autonomy: str
    verdict: str
    rationale: str
    policy_scope: str
    policy_version: str
    prompt_version: str
    evaluator: str
    model: str | None
    input_hash: str
    confidence: float | None = None
    advice: str | None = None
    answer: str | None = None
    option_id: str | None = None
    rules: tuple[RuleResult, ...] = ()

    @property
    def actor(self) -> str:
        return f"supervisor:{self.policy_version}"


@dataclass(frozen=True)
class Recorded:
    """What recording did: ``acted`` (the item is decided: resume its run), ``refused_by``."""

    acted: bool = False
    cosign_pending: bool = False
    refused_by: str | None = None


def supervisor_decisions(store: EventStore, run_id: UUID) -> list[Event]:
    return store.load(supervisor_stream_id(run_id))


def _made(store: EventStore, v: Verdict, *, acted: bool, pending: bool) -> SupervisorDecisionMade:
    return SupervisorDecisionMade(
        originator_id=supervisor_stream_id(v.run_id),
        originator_version=store.stream_version(supervisor_stream_id(v.run_id)) + 1,
        timestamp=utc_now(),
        run_id=v.run_id,
        subject_id=v.item_id,
        decision=v.verdict,
        rationale=v.rationale,
        policy=v.policy_scope,
        policy_version=v.policy_version,
        prompt_version=v.prompt_version,
        evaluator_agent=v.evaluator,
        model=v.model,
        confidence=v.confidence,
        input_hash=v.input_hash,
        autonomy=v.autonomy,
        item_kind=v.kind,
        advice=v.advice,
        answer=v.answer,
        option_id=v.option_id,
        rules=list(v.rules),
        acted=acted,
        cosign_pending=pending,
    )


def _refused(store: EventStore, v: Verdict, decided_by: str, reason: str) -> Event:
    return SupervisorDecisionRefused(
        originator_id=supervisor_stream_id(v.run_id),
        originator_version=store.stream_version(supervisor_stream_id(v.run_id)) + 1,
        timestamp=utc_now(),
        run_id=v.run_id,
        subject_id=v.item_id,
        decision=v.verdict,
        decided_by=decided_by,
        policy_version=v.policy_version,
        reason=reason,
    )


def record_verdict(store: EventStore, v: Verdict, *, position: int) -> Recorded:
    """Record ``v`` for the item asked at log ``position``, with the tracking record."""
    tracking = (SUPERVISOR, position)
    item = load_item(store, v.item_id)
    assert item is not None
    if item.decision is not None:
        decided_by = item.decision.actor
        store.append(
            [_refused(store, v, decided_by, "the item was decided first")], tracking=tracking
        )
        return Recorded(refused_by=decided_by)
    effect = _effect(item, v)
    if effect is None:
        pending = (
            v.autonomy == Autonomy.COSIGN
            and v.verdict == SupervisorVerdict.APPROVE
            and v.kind != ItemKind.QUESTION
        )
        store.append([_made(store, v, acted=False, pending=pending)], tracking=tracking)
        return Recorded(cosign_pending=pending)
    cls, fields = effect
    made = _made(store, v, acted=True, pending=False)
    try:
        append_decision(store, v.item_id, cls, item.kind, also=[made], tracking=tracking, **fields)
    except (AlreadyDecidedError, RunNotWaitingError, ConcurrencyError):
        again = load_item(store, v.item_id)
        decided_by = again.decision.actor if again and again.decision else "system:run-ended"
        reason = "the item was decided first" if again and again.decision else "the run had ended"
        store.append([_refused(store, v, decided_by, reason)], tracking=tracking)
        return Recorded(refused_by=decided_by)
    return Recorded(acted=True)


def _effect(item: ItemState, v: Verdict) -> tuple[type[Any], dict[str, Any]] | None:
    """The item decision ``v`` makes, or None when it only advises or escalates."""
    common = {"actor": v.actor, "policy": v.policy_version}
    if v.autonomy == Autonomy.AUTONOMOUS:
        if v.verdict == SupervisorVerdict.APPROVE and item.kind == ItemKind.APPROVAL:
            return ApprovalGranted, {**common, "rationale": v.rationale}
        if v.verdict == SupervisorVerdict.REJECT and item.kind == ItemKind.APPROVAL:
            return ApprovalRejected, {**common, "rationale": v.rationale}
        if v.verdict == SupervisorVerdict.ANSWER and item.kind == ItemKind.QUESTION and v.answer:
            return QuestionAnswered, {
                "actor": v.actor,
                "answer": v.answer,
                "option_id": v.option_id,
            }
        return None
    votes = [vote for vote in item.votes if is_person(vote.actor)]
    if (
        v.autonomy == Autonomy.COSIGN
        and v.verdict == SupervisorVerdict.APPROVE
        and item.kind == ItemKind.APPROVAL
        and votes
    ):
        return ApprovalGranted, {
            **common,
            "rationale": v.rationale,
            "cosigned_by": votes[-1].actor,
        }
    return None


def close_cosigned(store: EventStore, item_id: UUID, *, position: int) -> bool:
    """A user's vote reached the supervisor after its own approval: close the gate now.

    True when the gate was approved here (resume the run); the tracking moves
    to ``position`` either way.
    """
    tracking = (SUPERVISOR, position)
    item = load_item(store, item_id)
    approval = _pending_cosign(store, item) if item is not None else None
    if item is None or item.decision is not None or approval is None or not item.votes:
        store.append([], tracking=tracking)
        return False
    try:
        append_decision(
            store,
            item_id,
            ApprovalGranted,
            "approval",
            tracking=tracking,
            actor=f"supervisor:{approval.policy_version}",
            policy=approval.policy_version,
            rationale=approval.rationale,
            cosigned_by=item.votes[-1].actor,
        )
    except (AlreadyDecidedError, RunNotWaitingError, ConcurrencyError):
        store.append([], tracking=tracking)
        return False
    return True


def latest_decision(store: EventStore, item: ItemState) -> SupervisorDecisionMade | None:
    """The supervisor's newest decision on ``item``, if it made one."""
    latest: SupervisorDecisionMade | None = None
    for event in supervisor_decisions(store, item.asked.run_id):
        if isinstance(event, SupervisorDecisionMade) and event.subject_id == item.item_id:
            latest = event
    return latest


def _pending_cosign(store: EventStore, item: ItemState) -> SupervisorDecisionMade | None:
    """The supervisor's cosign approval of ``item`` still waiting for a user, if any."""
    latest = latest_decision(store, item)
    return latest if latest is not None and latest.cosign_pending else None


class Cosign(StrEnum):
    """Where a cosign gate stands for a user's approval."""

    #: The supervisor approved: the user's approval decides.
    COSIGNED = "cosigned"
    #: It rejected or escalated: the user decides alone.
    DECLINED = "declined"
    #: It has not decided yet: the user's approval is a vote.
    WAITING = "waiting"


def cosign_state(store: EventStore, item: ItemState) -> Cosign:
    """Where a cosign gate stands for a user's approval (``Cosign``)."""
    latest = latest_decision(store, item)
    if latest is None:
        return Cosign.WAITING
    return Cosign.COSIGNED if latest.cosign_pending else Cosign.DECLINED


def skip(store: EventStore, position: int) -> None:
    """Nothing to decide at ``position``: only move the tracking past it."""
    store.append([], tracking=(SUPERVISOR, position))
