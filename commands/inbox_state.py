"""An inbox item's state, folded from its own stream: what was asked, and its decision.

Commands decide on this fold. The item is version 1 of its stream and the
decision version 2, so the store's compare-and-set lets exactly one decision
take effect.
"""

from __future__ import annotations

from dataclasses import dataclass
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
    QuestionAnswered,
    QuestionAsked,
)
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

    @property
    def kind(self) -> str:
        return "question" if isinstance(self.asked, QuestionAsked) else "approval"


def _already(item_id: UUID, decision: Decision) -> AlreadyDecidedError:
    when = decision.timestamp.strftime("%Y-%m-%d %H:%M:%S UTC")
    return AlreadyDecidedError(
        f"Item {item_id.hex[:8]} was already {describe(decision)} by {decision.actor} at {when}.",
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
            state.decision = state.decision or event
    return state


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
    store: EventStore, item_id: UUID, decision: type[Decision], kind: str, **fields: Any
) -> tuple[ItemState, Decision]:
    """Append the item's decision as version 2 of its stream: the first decision wins.

    A second decider (another terminal, the supervisor, the deadline) gets
    ``AlreadyDecidedError`` naming who decided first and when; nothing of
    theirs is stored. A run that has ended refuses decisions.
    """
    from commands.run_state import load_run
    from events.base import utc_now
    from events.errors import ConcurrencyError
    from events.runs import FINAL_STATUSES

    state = load_item(store, item_id)
    if state is None:
        raise ItemNotFoundError(item_id.hex)
    if state.kind != kind:
        verb = "`shep approve` or `shep reject`" if state.kind == "approval" else "`shep answer`"
        raise WrongItemKindError(f"Item {item_id.hex[:8]} is {_article(state.kind)}; use {verb}.")
    if state.decision is not None:
        raise _already(item_id, state.decision)
    run = load_run(store, state.asked.run_id)
    if run.status in FINAL_STATUSES:
        raise RunNotWaitingError(
            f"Run {run.run_id.hex[:8]} is {run.status.value}; item {item_id.hex[:8]} can no "
            "longer be decided."
        )
    event = decision(
        originator_id=item_id,
        originator_version=2,
        timestamp=utc_now(),
        run_id=state.asked.run_id,
        node=state.asked.node,
        **fields,
    )
    try:
        store.append([event])
    except ConcurrencyError:
        again = load_item(store, item_id)
        if again is not None and again.decision is not None:
            raise _already(item_id, again.decision) from None
        raise
    state.decision, state.version = event, 2
    return state, event


def _article(kind: str) -> str:
    return "an approval gate" if kind == "approval" else "a question"
