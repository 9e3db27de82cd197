"""A small linear workflow and run-event builders shared by the checkpointer tests."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Annotated, Any, TypedDict
from uuid import UUID

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from commands.run_state import RunState, next_events
from events.base import Event
from events.runs import NodeCompleted, RunStatus
from shep.runs.checkpoints import OutboxBuilder

NODES = ("scan", "plan", "implement", "report")

Hook = Callable[[str], None]


class State(TypedDict):
    log: Annotated[list[str], operator.add]


class _Node:
    """A node that records its call, runs the hooks, and appends its name to the log."""

    def __init__(self, name: str, calls: list[str], on_start: Hook | None, on_done: Hook | None):
        self.name, self.calls, self.on_start, self.on_done = name, calls, on_start, on_done

    def __call__(self, state: State) -> dict[str, list[str]]:
        self.calls.append(self.name)
        if self.on_start is not None:
            self.on_start(self.name)
        if self.on_done is not None:
            self.on_done(self.name)
        return {"log": [self.name]}


def linear_graph(
    saver: BaseCheckpointSaver[Any],
    calls: list[str],
    *,
    on_start: Hook | None = None,
    on_done: Hook | None = None,
) -> CompiledStateGraph[State, None, State, State]:
    """scan -> plan -> implement -> report; each node logs its name and records the call."""

    builder = StateGraph(State)
    previous = START
    for name in NODES:
        builder.add_node(name, _Node(name, calls, on_start, on_done))
        builder.add_edge(previous, name)
        previous = name
    builder.add_edge(previous, END)
    return builder.compile(checkpointer=saver)


def node_completed(run_id: UUID, node: str) -> OutboxBuilder:
    """The outbox builder a runner would enqueue when ``node`` returns."""

    def build(after: int) -> list[Event]:
        state = RunState(run_id=run_id, version=after, status=RunStatus.RUNNING)
        return list(next_events(state, [(NodeCompleted, {"node": node, "duration_ms": 1})]))

    return build
