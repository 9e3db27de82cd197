"""Suspend a run on its questions and approval gates: the worker records them and exits.

The inbox items (one stream each, id derived from the run and the LangGraph
interrupt) and the run's ``RunSuspended`` go in one transaction, fenced with
the worker's epoch. Asking again after a crash (the node in flight re-runs and
interrupts again with the same id) finds the item's stream and does not ask
twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any
from uuid import UUID

import msgspec

from commands.inbox_state import load_item
from commands.run_state import CONFLICT_RETRIES, RunState, load_run, next_events
from events.base import Event, utc_now
from events.errors import ConcurrencyError
from events.inbox import (
    GATE,
    ApprovalRequested,
    ArtifactRef,
    QuestionAsked,
    QuestionOption,
    item_stream_id,
)
from events.inbox_status import ItemKind
from events.runs import NodeStarted, RunSuspended
from events.store import EventStore


class Ask(msgspec.Struct, frozen=True, kw_only=True):
    """One question or approval a graph interrupt asks (``kind``: question or approval)."""

    interrupt_id: str
    kind: str
    node: str
    iteration: int = 1
    question: str = ""
    options: list[QuestionOption] = []
    context: str = ""
    default_after: float | None = None
    summary: str = ""
    phase: str = ""
    artifacts: list[ArtifactRef] = []
    #: Why the origin's decision was (not) reapplied, in a fork with --reapply-answers.
    reapply: str | None = None
    #: A gate's kind, as its workflow says it (``ApprovalRequested.gate_kind``).
    gate_kind: str = GATE


def item_event(run_id: UUID, item_id: UUID, ask: Ask) -> Event:
    now = utc_now()
    if ask.kind == ItemKind.QUESTION:
        deadline = (
            (now + timedelta(seconds=ask.default_after)).isoformat()
            if ask.default_after is not None
            else None
        )
        return QuestionAsked(
            originator_id=item_id,
            originator_version=1,
            timestamp=now,
            run_id=run_id,
            node=ask.node,
            question=ask.question,
            options=list(ask.options),
            context=ask.context,
            iteration=ask.iteration,
            interrupt_id=ask.interrupt_id,
            deadline=deadline,
            reapply=ask.reapply,
        )
    return ApprovalRequested(
        originator_id=item_id,
        originator_version=1,
        timestamp=now,
        run_id=run_id,
        node=ask.node,
        summary=ask.summary,
        phase=ask.phase,
        artifacts=list(ask.artifacts),
        iteration=ask.iteration,
        interrupt_id=ask.interrupt_id,
        reapply=ask.reapply,
        gate_kind=ask.gate_kind,
    )


def asked_node(ask: Ask) -> tuple[type[Any], dict[str, Any]]:
    """The run's ``NodeStarted`` for the question or gate ``ask`` (it starts when asked)."""
    return (NodeStarted, {"node": ask.node, "iteration": ask.iteration, "kind": ask.kind})


def suspend_run(
    store: EventStore, run_id: UUID, asks: Sequence[Ask], *, epoch: int
) -> tuple[RunState, list[UUID]]:
    """Record the items not asked yet and suspend the run on all of them, atomically.

    Returns the run's state and the ids of the items asked now (not those that
    already existed). Retries on conflicts like every run command.
    """
    for attempt in range(CONFLICT_RETRIES):
        state = load_run(store, run_id)
        item_events: list[Event] = []
        run_items: list[tuple[type[Any], dict[str, Any]]] = []
        item_ids: list[UUID] = []
        for ask in asks:
            item_id = item_stream_id(run_id, ask.interrupt_id)
            item_ids.append(item_id)
            if load_item(store, item_id) is None:
                item_events.append(item_event(run_id, item_id, ask))
                run_items.append(asked_node(ask))
        approval = any(ask.kind == ItemKind.APPROVAL for ask in asks)
        run_items.append((RunSuspended, {"item_ids": item_ids, "approval": approval}))
        events = next_events(state, run_items, epoch=epoch)
        try:
            store.append([*item_events, *events])
        except ConcurrencyError:
            if attempt == CONFLICT_RETRIES - 1:
                raise
            continue
        for event in events:
            state.apply(event)
        return state, [e.originator_id for e in item_events]
    raise AssertionError("unreachable")
