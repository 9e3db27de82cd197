"""Fail a run (final)."""

from __future__ import annotations

from uuid import UUID

from commands.run_state import RunState, append_to_run
from events.runs import RunFailed
from events.store import EventStore


def fail_run(
    store: EventStore,
    run_id: UUID,
    *,
    error_type: str,
    message: str,
    node: str | None = None,
    epoch: int | None = None,
) -> RunState:
    """Record the error that ended the run (a worker passes its ``epoch``: see fencing)."""
    state, _ = append_to_run(
        store,
        run_id,
        [(RunFailed, {"error_type": error_type, "message": message, "node": node})],
        epoch=epoch,
    )
    return state
