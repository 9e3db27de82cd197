"""Start a pending run in a worker process (status: running)."""

from __future__ import annotations

from uuid import UUID

from commands.run_state import RunState, append_to_run
from events.runs import RunStarted
from events.store import EventStore


def start_run(
    store: EventStore,
    run_id: UUID,
    *,
    pid: int,
    host: str,
    background: bool = False,
    log_path: str | None = None,
    process_start: str | None = None,
) -> RunState:
    """Record that a worker took the run: its first owner. Only a pending run can start.

    ``state.epoch`` of the result is the worker's epoch, to pass with its appends.
    """
    state, _ = append_to_run(
        store,
        run_id,
        [
            (
                RunStarted,
                {
                    "pid": pid,
                    "host": host,
                    "background": background,
                    "log_path": log_path,
                    "process_start": process_start,
                },
            )
        ],
    )
    return state
