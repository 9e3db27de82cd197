"""A scripted evaluator, and inbox items on real runs made with the real commands.

``ScriptedEvaluator`` stands where the agent CLI would: it replies from a
script (a reply per call, the last one repeated), raises what it is told to,
and keeps every prompt, model and timeout it was given, so a test can say
whether it was consulted and what it saw.

``ask`` makes a run (``create_run``, ``start_run``, optionally some events of
its own such as a worktree and a snapshot, then ``suspend_run``) owned by this
live test process, suspended on the given questions and gates; nothing runs a
worker.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

from commands.configure_agent import change_setting
from commands.create_run import create_run
from commands.policies import Policy, configure_policy
from commands.run_state import append_to_run
from commands.start_run import start_run
from commands.supervise import SUPERVISOR, supervisor_decisions
from commands.suspend_run import Ask, suspend_run
from events.base import Event
from events.inbox import (
    ApprovalRequested,
    ApprovalVoted,
    QuestionAsked,
    QuestionOption,
    item_stream_id,
)
from events.store import EventStore
from events.supervisor import Guardrails, SupervisorDecisionMade, SupervisorDecisionRefused
from shep.home.identity import host_name
from shep.home.procs import process_start
from tests.shep.workflows.conftest import git

Reply = str | BaseException | Callable[[str], str]

#: The node of each feature gate kind.
GATE_NODES = {"prd": "prd", "plan": "plan_gate", "merge": "merge_gate"}
OPTIONS = [
    QuestionOption(id="small", label="Small: one module", recommended=True),
    QuestionOption(id="large", label="Large: the whole package"),
]


def reply(verdict: str, rationale: str = "the change is small and tested", **more: Any) -> str:
    """An evaluator reply as the prompt asks for it: one JSON object."""
    return json.dumps({"verdict": verdict, "rationale": rationale, "confidence": 0.9, **more})


@dataclass
class ScriptedEvaluator:
    """Replies from ``replies`` in order (the last one again when they run out)."""

    replies: Sequence[Reply] = (reply("approve"),)
    name: str = "scripted"
    prompts: list[str] = field(default_factory=list)
    calls: list[tuple[str | None, float]] = field(default_factory=list)

    def __call__(self, prompt: str, *, model: str | None, timeout: float) -> str:
        self.prompts.append(prompt)
        self.calls.append((model, timeout))
        script = self.replies[min(len(self.prompts), len(self.replies)) - 1]
        if isinstance(script, BaseException):
            raise script
        if callable(script):
            return script(prompt)
        return script


# --- the store ----------------------------------------------------------------------------


def collaboration(store: EventStore, on: bool = True) -> None:
    change_setting(store, key="collaboration", value="on" if on else "off", changed_by="test")


def policy(
    store: EventStore,
    scope: str = "global",
    autonomy: str = "autonomous",
    *,
    overrides: dict[str, str] | None = None,
    guardrails: Guardrails | None = None,
    model: str | None = None,
    timeout: float = 60.0,
) -> Policy:
    return configure_policy(
        store,
        scope,
        autonomy=autonomy,
        overrides=overrides or {},
        guardrails=guardrails or Guardrails(),
        model=model,
        timeout=timeout,
        actor="test",
    )


def feature_gate(kind: str, summary: str = "Ready for review", interrupt_id: str = "") -> Ask:
    """The feature workflow's ``kind`` gate (prd, plan, merge)."""
    return Ask(
        interrupt_id=interrupt_id or f"{kind}-gate",
        kind="approval",
        node=GATE_NODES[kind],
        summary=summary,
        phase=kind,
        gate_kind=kind,
    )


def question(interrupt_id: str = "scope", text: str = "How large should the change be?") -> Ask:
    return Ask(
        interrupt_id=interrupt_id, kind="question", node="scope", question=text, options=OPTIONS
    )


def item_ask(kind: str) -> Ask:
    """An item of a policy's item kind: a feature gate, or a question."""
    return question() if kind == "question" else feature_gate(kind)


def ask(
    store: EventStore,
    repo: Path,
    asks: Sequence[Ask],
    *,
    before: Sequence[tuple[type[Event], dict[str, Any]]] = (),
    run_id: UUID | None = None,
) -> tuple[UUID, list[UUID]]:
    """A run suspended on ``asks`` after ``before`` (its own events); its id and item ids."""
    me, host, started = os.getpid(), host_name(), process_start(os.getpid())
    run = create_run(
        store,
        workflow="feature",
        agent_type="claude-code",
        repo=str(repo),
        node_names=["prd", "plan_gate", "implement", "merge_gate"],
        created_by="test",
        run_id=run_id,
        pid=me,
        host=host,
        process_start=started,
    )
    state = start_run(store, run, pid=me, host=host, process_start=started)
    if before:
        append_to_run(store, run, list(before), epoch=state.epoch)
    suspend_run(store, run, list(asks), epoch=state.epoch)
    return run, [item_stream_id(run, a.interrupt_id) for a in asks]


def decisions(store: EventStore, run_id: UUID) -> list[SupervisorDecisionMade]:
    return [e for e in supervisor_decisions(store, run_id) if isinstance(e, SupervisorDecisionMade)]


def refusals(store: EventStore, run_id: UUID) -> list[SupervisorDecisionRefused]:
    return [
        e for e in supervisor_decisions(store, run_id) if isinstance(e, SupervisorDecisionRefused)
    ]


def last_followed(store: EventStore) -> int:
    """The position of the newest event the supervisor follows (what it must track to)."""
    followed = store.positions_of([QuestionAsked, ApprovalRequested, ApprovalVoted], after=0)
    return followed[-1][0]


def tracked(store: EventStore) -> int:
    return store.tracked_position(SUPERVISOR)


# --- git ----------------------------------------------------------------------------------


def commit(repo: Path, files: dict[str, str], message: str = "change") -> str:
    """Write ``files`` (path: content), commit them; the commit's sha."""
    for path, content in files.items():
        target = repo / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")
