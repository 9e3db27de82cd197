"""Reject an approval gate, with the reason the phase is re-run with."""

from __future__ import annotations

from uuid import UUID

from commands.inbox_state import ItemState, append_decision
from events.errors import ReasonRequiredError
from events.inbox import ApprovalRejected
from events.store import EventStore


def reject_item(
    store: EventStore, item_id: UUID, *, actor: str, reason: str, policy: str | None = None
) -> ItemState:
    """Record the rejection; the reason goes to the agent when the phase re-runs."""
    if not reason.strip():
        raise ReasonRequiredError("A rejection needs a reason (--reason TEXT): the agent gets it.")
    state, _ = append_decision(
        store,
        item_id,
        ApprovalRejected,
        "approval",
        actor=actor,
        rationale=reason.strip(),
        policy=policy,
    )
    return state
