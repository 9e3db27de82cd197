"""The deterministic step node kind: plain Python on the state and the repository."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from commands.record_node import record_node_failed
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
            record_node_failed(
                ctx.store,
                ctx.run_id,
                step.name,
                duration_ms=int((time.monotonic() - started) * 1000),
                error_type=type(e).__name__,
                message=str(e),
                epoch=ctx.epoch,
            )
            ctx.progress.node_finished(step.name, False, str(e))
            raise
        ctx.complete_node(step.name, started=started)
        iterations = {**(update.get("iterations") or {}), step.name: iteration}
        return {**update, "iterations": iterations}

    run.__name__ = step.name.replace("-", "_")
    return run
