"""Complete a run (final)."""

from __future__ import annotations

from uuid import UUID

from commands.run_state import RunState, append_to_run
from events.runs import RunCompleted
from events.store import EventStore


def complete_run(
    store: EventStore, run_id: UUID, *, duration_ms: int, epoch: int | None = None
) -> RunState:
    """Record that the run finished; it must be running (and owned by ``epoch``, if given)."""
    state, _ = append_to_run(
        store, run_id, [(RunCompleted, {"duration_ms": duration_ms})], epoch=epoch
    )
    return state
