"""The deterministic step node kind: plain Python on the state and the repository."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from events.errors import StepFailedError
from shep.nodes.context import RunContext, iteration_of
from shep.workflows.base import DeterministicStep, NodeFn


def deterministic_node(ctx: RunContext, step: DeterministicStep) -> NodeFn:
    """A node that records its start, runs ``step.run`` and completes with the checkpoint."""

    def run(state: Mapping[str, Any]) -> dict[str, Any]:
        iteration = iteration_of(state, step.name)
        ctx.start_node(step.name, iteration, kind="deterministic")
        started = time.monotonic()
        try:
            update = step.run(state, ctx.plan.repo)
        except StepFailedError as e:
            ctx.fail_node(step.name, started=started, error=e)
            raise
        ctx.complete_node(step.name, started=started)
        iterations = {**(update.get("iterations") or {}), step.name: iteration}
        return {**update, "iterations": iterations}

    run.__name__ = step.name.replace("-", "_")
    return run
