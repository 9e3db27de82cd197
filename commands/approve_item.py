"""Approve an approval gate."""

from __future__ import annotations

from uuid import UUID

from commands.inbox_state import ItemState, append_decision, append_vote, load_item
from events.errors import ItemNotFoundError
from events.inbox import ApprovalGranted
from events.store import EventStore


def approve_item(
    store: EventStore,
    item_id: UUID,
    *,
    actor: str,
    comment: str = "",
    policy: str | None = None,
    cosign: str | None = None,
) -> ItemState:
    """Record the approval; the first decision wins.

    ``cosign`` (the label of the cosign policy covering the gate): the gate needs
    the supervisor's approval too. Before the supervisor has decided, the
    user's approval is recorded as a vote and the gate stays open (the
    supervisor's approval then closes it); after it approved, this approval
    closes it; after it declined (rejected or escalated), the user decides alone.
    """
    cosigned_by = None
    if cosign is not None:
        from commands.supervise import Cosign, cosign_state, latest_decision

        item = load_item(store, item_id)
        if item is None:
            raise ItemNotFoundError(item_id.hex)
        if item.decision is None:
            where = cosign_state(store, item)
            if where == Cosign.WAITING:
                if any(vote.actor == actor for vote in item.votes):
                    return item
                return append_vote(store, item_id, actor=actor, rationale=comment, policy=cosign)
            latest = latest_decision(store, item)
            if where == Cosign.COSIGNED and latest is not None:
                cosigned_by = f"supervisor:{latest.policy_version}"
        policy = policy or cosign
    state, _ = append_decision(
        store,
        item_id,
        ApprovalGranted,
        "approval",
        actor=actor,
        rationale=comment,
        policy=policy,
        cosigned_by=cosigned_by,
    )
    return state
