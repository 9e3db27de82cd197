"""An inbox item's state, folded from its own stream: what was asked, and its decision.

Commands decide on this fold. The item is version 1 of its stream; a decision
is appended at the stream's next version, so the store's compare-and-set lets
exactly one decision take effect. A user's decision may follow a supervisor's
while the run still waits on the item (it ``overrides`` it: the user always
wins); a user's approval under a cosign policy may come first as a vote
(``ApprovalVoted``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from events.base import Event
from events.errors import (
    AlreadyDecidedError,
    ItemNotFoundError,
    RunNotWaitingError,
    WrongItemKindError,
)
from events.inbox import (
    ApprovalGranted,
    ApprovalRejected,
    ApprovalRequested,
    ApprovalVoted,
    QuestionAnswered,
    QuestionAsked,
    already_decided,
)
from events.inbox_status import ItemKind
from events.store import EventStore

Decision = QuestionAnswered | ApprovalGranted | ApprovalRejected
Asked = QuestionAsked | ApprovalRequested


@dataclass
class ItemState:
    """What an item's stream says."""

    item_id: UUID
    asked: Asked
    decision: Decision | None = None
    version: int = 1
    #: Users' approvals waiting for the supervisor's co-signature (cosign policies).
    votes: list[ApprovalVoted] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return "question" if isinstance(self.asked, QuestionAsked) else "approval"


def _already(item_id: UUID, decision: Decision) -> AlreadyDecidedError:
    return AlreadyDecidedError(
        already_decided(item_id.hex, describe(decision), decision.actor, decision.timestamp),
        actor=decision.actor,
    )


def describe(decision: Decision) -> str:
    """A decision in words: answered "x", approved, rejected."""
    if isinstance(decision, QuestionAnswered):
        return f"answered {decision.answer!r}"
    return "approved" if isinstance(decision, ApprovalGranted) else "rejected"


def load_item(store: EventStore, item_id: UUID) -> ItemState | None:
    """The item's state, or None if its stream is empty."""
    events: list[Event] = store.load(item_id)
    if not events or not isinstance(events[0], QuestionAsked | ApprovalRequested):
        return None
    state = ItemState(item_id, events[0], version=events[-1].originator_version)
    for event in events[1:]:
        if isinstance(event, QuestionAnswered | ApprovalGranted | ApprovalRejected):
            if state.decision is None or event.overrides is not None:
                state.decision = event
        elif isinstance(event, ApprovalVoted):
            state.votes.append(event)
    return state


def is_supervisor(actor: str) -> bool:
    return actor.startswith("supervisor:")


def is_person(actor: str) -> bool:
    """A user's decision (not the supervisor's, nor ``system:deadline``'s)."""
    return not (is_supervisor(actor) or actor.startswith("system:"))


def resume_value(decision: Decision) -> dict[str, object]:
    """What the interrupted node receives when the run resumes with this decision."""
    if isinstance(decision, QuestionAnswered):
        return {"answer": decision.answer, "option_id": decision.option_id, "actor": decision.actor}
    return {
        "approved": isinstance(decision, ApprovalGranted),
        "reason": decision.rationale,
        "actor": decision.actor,
    }


def append_decision(
    store: EventStore,
    item_id: UUID,
    decision: type[Decision],
    kind: str,
    *,
    also: Sequence[Event] = (),
    tracking: Any = None,
    **fields: Any,
) -> tuple[ItemState, Decision]:
    """Append the item's decision at its stream's next version: the first decision wins.

    A second decider (another terminal, the supervisor, the deadline) gets
    ``AlreadyDecidedError`` naming who decided first and when; nothing of
    theirs is stored. A user's decision after the supervisor's replaces it
    while the run still waits on the item (``overrides``). A run that has
    ended refuses decisions. ``also`` (and ``tracking``) commit with it.
    """
    from commands.run_state import load_run
    from events.base import utc_now
    from events.errors import ConcurrencyError
    from events.runs import FINAL_STATUSES, WAITING_STATUSES

    state = load_item(store, item_id)
    if state is None:
        raise ItemNotFoundError(item_id.hex)
    if state.kind != kind:
        verb = (
            "`shep approve` or `shep reject`"
            if state.kind == ItemKind.APPROVAL
            else "`shep answer`"
        )
        raise WrongItemKindError(f"Item {item_id.hex[:8]} is {_article(state.kind)}; use {verb}.")
    run = load_run(store, state.asked.run_id)
    overrides = None
    if state.decision is not None:
        first = state.decision
        waiting = run.status in WAITING_STATUSES and item_id in run.waiting_for
        if not (is_supervisor(first.actor) and is_person(fields["actor"]) and waiting):
            error = _already(item_id, first)
            if is_supervisor(first.actor) and is_person(fields["actor"]):
                error = AlreadyDecidedError(
                    f"{error} Run {run.run_id.hex[:8]} already went on with it; to take it back "
                    f"fork the run from before it: `shep replay {run.run_id.hex[:8]}` shows "
                    "the checkpoints, `shep fork` makes the run.",
                    actor=first.actor,
                )
            raise error
        overrides = first.actor
    if run.status in FINAL_STATUSES:
        raise RunNotWaitingError(
            f"Run {run.run_id.hex[:8]} is {run.status.value}; item {item_id.hex[:8]} can no "
            "longer be decided."
        )
    event = decision(
        originator_id=item_id,
        originator_version=state.version + 1,
        timestamp=utc_now(),
        run_id=state.asked.run_id,
        node=state.asked.node,
        overrides=overrides,
        **fields,
    )
    try:
        store.append([event, *also], tracking=tracking)
    except ConcurrencyError:
        again = load_item(store, item_id)
        if again is not None and again.decision is not None:
            raise _already(item_id, again.decision) from None
        raise
    state.decision, state.version = event, state.version + 1
    return state, event


def append_vote(
    store: EventStore, item_id: UUID, *, actor: str, rationale: str, policy: str
) -> ItemState:
    """Record a user's approval that waits for the supervisor's co-signature."""
    from events.base import utc_now

    state = load_item(store, item_id)
    if state is None:
        raise ItemNotFoundError(item_id.hex)
    if state.decision is not None:
        raise _already(item_id, state.decision)
    vote = ApprovalVoted(
        originator_id=item_id,
        originator_version=state.version + 1,
        timestamp=utc_now(),
        actor=actor,
        rationale=rationale,
        policy=policy,
        run_id=state.asked.run_id,
        node=state.asked.node,
    )
    store.append([vote])
    state.votes.append(vote)
    state.version += 1
    return state


def _article(kind: str) -> str:
    return "an approval gate" if kind == ItemKind.APPROVAL else "a question"
