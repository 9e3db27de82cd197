"""Record that a worker is alive, with what it is doing."""

from __future__ import annotations

from uuid import UUID

from commands.run_state import RunState, append_to_run
from events.runs import HeartbeatRecorded
from events.store import EventStore


def record_heartbeat(
    store: EventStore,
    run_id: UUID,
    *,
    pid: int,
    host: str,
    node: str | None = None,
    last_activity: str | None = None,
    tokens_so_far: int = 0,
    epoch: int | None = None,
) -> RunState:
    """Append a heartbeat (the run must be running, and owned by ``epoch`` if given)."""
    state, _ = append_to_run(
        store,
        run_id,
        [
            (
                HeartbeatRecorded,
                {
                    "pid": pid,
                    "host": host,
                    "node": node,
                    "last_activity": last_activity,
                    "tokens_so_far": tokens_so_far,
                },
            )
        ],
        epoch=epoch,
    )
    return state
