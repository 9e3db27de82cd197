"""Cancelling a run: record it, then stop its worker (TERM, then KILL) and its agents."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from uuid import UUID

    from events.store import EventStore


@dataclass(frozen=True)
class Cancelled:
    """A cancelled run: what was stopped here, and the host whose worker stops on its own."""

    run_id: UUID
    #: One line per process stopped on this host (the worker, the agent's groups).
    stopped: list[str]
    #: The run ran on another host: its worker stops, with its agent, at its next heartbeat.
    remote_host: str | None


def cancel(
    store: EventStore, run_id: UUID, *, actor: str, grace: float, reason: str = ""
) -> Cancelled:
    """Record the cancel, then stop the run's own worker and its agents.

    Only the run's own worker is signalled: a process that merely has its pid now
    (the worker died and the pid was reused) is left alone, and a run with no worker
    (waiting, interrupted) gets no signal. ``InvalidTransitionError`` when the run
    has already ended.
    """
    from commands.cancel_run import cancel_run
    from commands.run_state import load_run
    from events.runs import RunStatus
    from shep.runs.workers import local_worker, stop_worker

    before = load_run(store, run_id)
    cancel_run(store, run_id, cancelled_by=actor, reason=reason)
    running = before.status is RunStatus.RUNNING
    pid, started = local_worker(before) if running else (None, None)
    stopped = stop_worker(pid, started, run_id, grace=grace)
    remote = before.host if running and pid is None and before.host else None
    return Cancelled(run_id, stopped, remote)
