"""Mark a run whose worker is gone as interrupted (resumable)."""

from __future__ import annotations

from uuid import UUID

from commands.run_state import RunState, append_to_run
from events.runs import RunInterrupted
from events.store import EventStore


def mark_interrupted(
    store: EventStore,
    run_id: UUID,
    *,
    reason: str,
    detected_by_pid: int | None = None,
    detected_by_host: str | None = None,
    epoch: int | None = None,
) -> RunState:
    """Record the interruption; only a running (or never started) run can be interrupted.

    ``epoch`` is the owner found gone (0: the run never started). The append
    is compare-and-set on it: if the run was resumed meanwhile (a new owner),
    ``WorkerFencedError`` is raised and nothing is recorded, so a fresh worker
    is never marked interrupted on a decision made about its predecessor.
    """
    state, _ = append_to_run(
        store,
        run_id,
        [
            (
                RunInterrupted,
                {
                    "reason": reason,
                    "detected_by_pid": detected_by_pid,
                    "detected_by_host": detected_by_host,
                    "epoch": epoch,
                },
            )
        ],
        epoch=epoch,
    )
    return state
