"""Resume an interrupted (or approved, waiting) run in a worker (status: running)."""

from __future__ import annotations

from uuid import UUID

from commands.run_state import RunState, append_to_run
from events.runs import RunResumed
from events.store import EventStore


def resume_run(
    store: EventStore,
    run_id: UUID,
    *,
    pid: int,
    host: str,
    background: bool = False,
    log_path: str | None = None,
    process_start: str | None = None,
    from_checkpoint_id: str | None = None,
) -> RunState:
    """Record that a worker continues the run from its last checkpoint: a new owner.

    Every earlier owner is fenced off from here on. ``state.epoch`` of the
    result is the worker's epoch, to pass with its appends.
    """
    state, _ = append_to_run(
        store,
        run_id,
        [
            (
                RunResumed,
                {
                    "pid": pid,
                    "host": host,
                    "background": background,
                    "log_path": log_path,
                    "from_checkpoint_id": from_checkpoint_id,
                    "process_start": process_start,
                },
            )
        ],
    )
    return state
