"""Cancel a run (final)."""

from __future__ import annotations

from uuid import UUID

from commands.run_state import RunState, append_to_run
from events.runs import RunCancelled
from events.store import EventStore


def cancel_run(store: EventStore, run_id: UUID, *, cancelled_by: str, reason: str = "") -> RunState:
    """Record the cancellation; a finished run cannot be cancelled."""
    state, _ = append_to_run(
        store, run_id, [(RunCancelled, {"cancelled_by": cancelled_by, "reason": reason})]
    )
    return state
