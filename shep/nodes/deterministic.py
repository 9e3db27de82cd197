"""The deterministic step node kind: plain Python on the state and the repository.

The step gets a ``StepIO`` (``shep.workflows.base``): the repository, events
to record with its completion or at once (fenced with the worker's epoch),
agent calls recorded under its node, snapshots, and the run's history.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from commands.run_state import append_to_run
from events.errors import StepFailedError
from shep.nodes.context import RunContext, iteration_of
from shep.workflows.base import DeterministicStep, NodeFn

if TYPE_CHECKING:
    from shep.agents import AgentResult
    from shep.nodes.agent import AgentNodes


class StepRun:
    """One execution of a deterministic step: what its ``run`` may do (``StepIO``)."""

    def __init__(
        self, ctx: RunContext, agents: AgentNodes, node: str, iteration: int, attempt: int
    ) -> None:
        self._ctx = ctx
        self._agents = agents
        self.node = node
        self.repo: Path = ctx.plan.repo
        self.run_id = ctx.run_id.hex
        self.inputs: Mapping[str, str] = ctx.plan.inputs
        self.iteration = iteration
        self.attempt = attempt
        self.recorded: list[tuple[type[Any], dict[str, Any]]] = []
        #: The newest snapshot the step took itself (recorded with its completion).
        self.last_snapshot: str | None = None

    def record(self, event_type: type[Any], **fields: Any) -> None:
        self.recorded.append((event_type, fields))

    def append(self, event_type: type[Any], **fields: Any) -> None:
        ctx = self._ctx
        append_to_run(ctx.store, ctx.run_id, [(event_type, fields)], epoch=ctx.epoch)

    def agent(self, prompt: str, *, writes: bool, label: str = "") -> AgentResult:
        if label:
            self.message(label)
        return self._agents.call(self.node, prompt, writes=writes)

    def snapshot(self, label: str) -> str | None:
        taken = self._ctx.snapshot(label)
        self.last_snapshot = taken or self.last_snapshot
        return taken

    def message(self, text: str) -> None:
        self._ctx.progress.message(text)

    def history(self, *types: type[Any]) -> list[Any]:
        return self._ctx.store.load(self._ctx.run_id, types=types or None)

    def setting(self, key: str) -> Any:
        settings = self._ctx.settings
        for kind in ("values", "flags", "texts", "counts"):
            found = getattr(settings, kind, {}) or {}
            if key in found:
                return found[key]
        raise KeyError(key)


def deterministic_node(ctx: RunContext, agents: AgentNodes, step: DeterministicStep) -> NodeFn:
    """A node that records its start, runs ``step.run`` and completes with the checkpoint."""

    def run(state: Mapping[str, Any]) -> dict[str, Any]:
        iteration = iteration_of(state, step.name)
        attempt = ctx.start_node(step.name, iteration, kind="deterministic")
        started = time.monotonic()
        io = StepRun(ctx, agents, step.name, iteration, attempt)
        try:
            update = step.run(state, io)
        except StepFailedError as e:
            ctx.fail_node(step.name, started=started, error=e)
            raise
        # A step that may write ends with a snapshot of its own; one that took a snapshot
        # for its own use has it recorded, so every ref is named by an event.
        snapshot = ctx.snapshot(step.name) if step.writes else io.last_snapshot
        ctx.complete_node(step.name, started=started, before=io.recorded, snapshot=snapshot)
        iterations = {**(update.get("iterations") or {}), step.name: iteration}
        return {**update, "iterations": iterations}

    run.__name__ = step.name.replace("-", "_")
    return run
