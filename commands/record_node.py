"""Record a workflow node's life: started, agent session known, completed, failed.

The worker passes its ``epoch`` with each: once the run has a newer owner,
the append is refused (``WorkerFencedError``). ``None`` is for tools and tests
that are no worker.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from uuid import UUID

from commands.run_state import (
    RunState,
    append_to_run,
    check_owner,
    check_transition,
    load_run,
    next_events,
    remember,
)
from events.runs import (
    AgentSessionRecorded,
    AgentStarted,
    NodeCompleted,
    NodeFailed,
    NodeStarted,
    Usage,
)
from events.store import EventStore


def record_node_started(
    store: EventStore,
    run_id: UUID,
    node: str,
    *,
    attempt: int = 1,
    iteration: int = 1,
    kind: str = "agent",
    epoch: int | None = None,
) -> RunState:
    """A node began executing (the run must be running)."""
    state, _ = append_to_run(
        store,
        run_id,
        [(NodeStarted, {"node": node, "attempt": attempt, "iteration": iteration, "kind": kind})],
        epoch=epoch,
    )
    return state


def start_agent(
    store: EventStore,
    run_id: UUID,
    node: str,
    agent: str,
    popen: Callable[[], subprocess.Popen[bytes]],
    *,
    epoch: int | None = None,
) -> subprocess.Popen[bytes]:
    """Start an agent's process (``popen``) only while ``epoch`` owns the running run.

    The check, the start and ``AgentStarted`` happen under the store's write lock,
    so nobody can take the run over in between: a worker fenced off while it was
    stopped or slow starts no agent when it goes on (``WorkerFencedError``). If the
    record fails after ``popen`` started the process, the caller kills it (see
    ``shep.nodes.agent``); ``popen``'s own errors pass through.
    """
    with store.exclusive():
        state = load_run(store, run_id)
        check_owner(state, epoch)
        check_transition(state, AgentStarted)
        process = popen()
        fields = {"node": node, "agent": agent, "pid": process.pid}
        events = next_events(state, [(AgentStarted, fields)], epoch=epoch)
        store.append(events)
        for event in events:
            state.apply(event)
    remember(store, state)  # the worker's next append decides on it without reading
    return process


def record_agent_session(
    store: EventStore, run_id: UUID, node: str, session_id: str, *, epoch: int | None = None
) -> RunState:
    """The agent's native session id is known: record it at once, for resume and audit."""
    state, _ = append_to_run(
        store,
        run_id,
        [(AgentSessionRecorded, {"node": node, "agent_session_id": session_id})],
        epoch=epoch,
    )
    return state


def record_node_completed(
    store: EventStore,
    run_id: UUID,
    node: str,
    *,
    duration_ms: int,
    agent_session_id: str | None = None,
    usage: Usage | None = None,
    turns: int | None = None,
    epoch: int | None = None,
) -> RunState:
    """A node finished; its duration, session, usage and cost are kept."""
    state, _ = append_to_run(
        store,
        run_id,
        [
            (
                NodeCompleted,
                {
                    "node": node,
                    "duration_ms": duration_ms,
                    "agent_session_id": agent_session_id,
                    "usage": usage or Usage(),
                    "turns": turns,
                },
            )
        ],
        epoch=epoch,
    )
    return state


def record_node_failed(
    store: EventStore,
    run_id: UUID,
    node: str,
    *,
    duration_ms: int,
    error_type: str,
    message: str,
    retryable: bool = False,
    epoch: int | None = None,
) -> RunState:
    """A node raised; the error's type, message and retryability are kept."""
    state, _ = append_to_run(
        store,
        run_id,
        [
            (
                NodeFailed,
                {
                    "node": node,
                    "duration_ms": duration_ms,
                    "error_type": error_type,
                    "message": message,
                    "retryable": retryable,
                },
            )
        ],
        epoch=epoch,
    )
    return state
