"""The node kinds that ask people: a question, an approval gate.

Each is a LangGraph ``interrupt()``: the graph stops there, the runner records
the inbox item and suspends the run, and the worker exits. A decision
resumes the run with ``Command(resume={interrupt_id: value})``; the node runs
again from its start, ``interrupt()`` returns the value, and the node
completes with the step's checkpoint.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from typing import Any

from events.errors import UnsafePathError
from events.inbox_status import ItemStatus
from shep.git.worktree import read_inside
from shep.nodes.context import RunContext, iteration_of
from shep.workflows.base import ApprovalGate, NodeFn, QuestionStep


def question_node(ctx: RunContext, step: QuestionStep) -> NodeFn:
    """Ask ``step.ask(state)``; the answer's text lands in ``answers[step.name]``."""

    def run(state: Mapping[str, Any]) -> dict[str, Any]:
        from langgraph.types import interrupt

        iteration = iteration_of(state, step.name)
        question = step.ask(state)
        value = interrupt(
            {
                "kind": "question",
                "node": step.name,
                "iteration": iteration,
                "question": question.text,
                "options": [
                    {
                        "id": o.id,
                        "label": o.label,
                        "description": o.description,
                        "recommended": o.recommended,
                    }
                    for o in question.options
                ],
                "context": question.context,
                "default_after": question.default_after,
            }
        )
        ctx.show_node(step.name, iteration)
        ctx.complete_node(step.name, started=time.monotonic(), waited_ms=value.get("waited_ms"))
        answer = str(value["answer"])
        option = value.get("option_id")
        extra = step.record(state, answer, str(option) if option else None) if step.record else {}
        return {**extra, "answers": {step.name: answer}, "iterations": {step.name: iteration}}

    run.__name__ = step.name.replace("-", "_")
    return run


def gate_node(ctx: RunContext, step: ApprovalGate) -> NodeFn:
    """Ask for approval of what ``step.phase`` produced (the files with their sha256, and
    what the step hashed itself: see ``Approval``)."""

    def run(state: Mapping[str, Any]) -> dict[str, Any]:
        from langgraph.types import interrupt

        iteration = iteration_of(state, step.name)
        approval = step.approval(state)
        artifacts = []
        for relative in approval.artifacts:
            try:
                # Not through a symbolic link: a file outside the worktree is no artifact.
                digest = hashlib.sha256(read_inside(ctx.plan.repo, relative)).hexdigest()
            except (OSError, UnsafePathError):
                digest = ""
            artifacts.append({"kind": "file", "path": relative, "sha256": digest})
        for kind, label, digest in approval.hashed:
            artifacts.append({"kind": kind, "path": label, "sha256": digest})
        value = interrupt(
            {
                "kind": "approval",
                "node": step.name,
                "iteration": iteration,
                "summary": approval.summary,
                "phase": step.phase,
                "artifacts": artifacts,
                "gate_kind": step.kind,
            }
        )
        ctx.show_node(step.name, iteration)
        ctx.complete_node(step.name, started=time.monotonic(), waited_ms=value.get("waited_ms"))
        approved = bool(value["approved"])
        return {
            "verdicts": {
                step.name: (ItemStatus.APPROVED if approved else ItemStatus.REJECTED).value
            },
            "feedback": {step.phase: "" if approved else str(value.get("reason") or "")},
            "iterations": {step.name: iteration},
        }

    run.__name__ = step.name.replace("-", "_")
    return run
