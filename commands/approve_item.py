"""Approve an approval gate."""

from __future__ import annotations

from uuid import UUID

from commands.inbox_state import ItemState, append_decision
from events.inbox import ApprovalGranted
from events.store import EventStore


def approve_item(
    store: EventStore, item_id: UUID, *, actor: str, comment: str = "", policy: str | None = None
) -> ItemState:
    """Record the approval; the first decision wins."""
    state, _ = append_decision(
        store, item_id, ApprovalGranted, "approval", actor=actor, rationale=comment, policy=policy
    )
    return state
