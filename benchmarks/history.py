"""Synthetic, realistic histories for benchmarks, appended in large batches.

Most runs completed; one in ``active_every`` was interrupted; with
``waiting_every``, one in that many waits for a person: a question or an
approval gate (alternately), recorded as ``commands.suspend_run`` records it.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import datetime, timedelta
from uuid import UUID, uuid4

from events.base import Event, utc_now
from events.inbox import (
    ApprovalRequested,
    ArtifactRef,
    QuestionAsked,
    QuestionOption,
    item_stream_id,
)
from events.runs import (
    AgentOutputRecorded,
    HeartbeatRecorded,
    NodeCompleted,
    NodeStarted,
    RunCompleted,
    RunCreated,
    RunInterrupted,
    RunStarted,
    RunSuspended,
    Usage,
)
from events.store import EventStore

NODES = ["scan", "dependencies", "patterns", "report"]
#: A gated workflow's nodes: a waiting run completed ``draft`` and waits at ``review``.
GATED_NODES = ["draft", "review", "finish"]


class _Stamps:
    """Numbers one run's events and stamps them as a real run does: each command gets its
    own moment, and agent output shares one per batch of up to ten lines.
    """

    def __init__(self, run_id: UUID) -> None:
        self.run_id, self.start, self.version, self.tick = run_id, utc_now(), 0, 0

    def moment(self) -> datetime:
        """A new moment, for an event of another stream."""
        self.tick += 1
        return self.start + timedelta(milliseconds=self.tick)

    def __call__(self, cls: type[Event], **fields: object) -> Event:
        self.version += 1
        if cls is not AgentOutputRecorded or self.version % 10 == 0:
            self.tick += 1
        moment = self.start + timedelta(milliseconds=self.tick)
        return cls(
            originator_id=self.run_id, originator_version=self.version, timestamp=moment, **fields
        )


def run_events(
    run_id: UUID, events_per_run: int, rng: random.Random, *, finish: bool
) -> Iterator[Event]:
    """One run's stream: created, started, nodes with agent output and heartbeats, completed.

    Timestamps move as they do in a real run: each command gets its own moment,
    and agent output shares one per batch of up to ten lines.
    """
    nxt = _Stamps(run_id)

    yield nxt(
        RunCreated,
        workflow="analyze-repository",
        agent_type="claude-code",
        repo="/repo",
        node_names=NODES,
        created_by="bench@host",
    )
    yield nxt(RunStarted, pid=rng.randrange(1000, 60000), host="host")
    per_node = max(0, (events_per_run - 3) // len(NODES) - 2)
    for node in NODES:
        yield nxt(NodeStarted, node=node)
        for i in range(per_node):
            if i % 25 == 24:
                yield nxt(HeartbeatRecorded, pid=1, host="host", node=node, tokens_so_far=i)
            else:
                yield nxt(
                    AgentOutputRecorded,
                    node=node,
                    kind="text",
                    text=f"Reading module {i} of the repository and noting its imports.",
                )
        yield nxt(
            NodeCompleted,
            node=node,
            duration_ms=rng.randrange(100, 90000),
            usage=Usage(input_tokens=1000, output_tokens=500, cost_usd=0.01),
        )
    if finish:
        yield nxt(RunCompleted, duration_ms=1000)
    else:
        # Unfinished runs of the past were interrupted (a live worker would be ours to see).
        yield nxt(RunInterrupted, reason="worker gone")


def waiting_run_events(
    run_id: UUID, events_per_run: int, rng: random.Random, *, approval: bool
) -> Iterator[Event]:
    """A run that did its agent step and now waits at a question or an approval gate.

    Created, started (epoch 1), ``draft`` with agent output and heartbeats,
    then what ``suspend_run`` appends in one transaction: the item (version 1
    of its own stream, id from the run and the interrupt), ``NodeStarted`` of
    the asking node with its kind, and ``RunSuspended`` on the item.
    """
    nxt = _Stamps(run_id)

    yield nxt(
        RunCreated,
        workflow="gated-review",
        agent_type="claude-code",
        repo=f"/repos/{rng.randrange(20)}",
        node_names=GATED_NODES,
        created_by="bench@host",
    )
    yield nxt(RunStarted, pid=rng.randrange(1000, 60000), host="host", epoch=1)
    yield nxt(NodeStarted, node="draft")
    for i in range(max(0, events_per_run - 7)):
        if i % 25 == 24:
            yield nxt(HeartbeatRecorded, pid=1, host="host", node="draft", tokens_so_far=i)
        else:
            yield nxt(
                AgentOutputRecorded,
                node="draft",
                kind="text",
                text=f"Drafting change {i}: which modules it touches and why.",
            )
    yield nxt(
        NodeCompleted,
        node="draft",
        duration_ms=rng.randrange(100, 90000),
        usage=Usage(input_tokens=1000, output_tokens=500, cost_usd=0.01),
    )
    interrupt_id = f"{rng.getrandbits(128):032x}"
    item_id = item_stream_id(run_id, interrupt_id)
    asked = nxt.moment()
    if approval:
        yield ApprovalRequested(
            originator_id=item_id,
            originator_version=1,
            timestamp=asked,
            run_id=run_id,
            node="review",
            summary="Draft ready: a change plan for the storage layer",
            phase="draft",
            artifacts=[ArtifactRef(path="shep-review.md", sha256=f"{rng.getrandbits(256):064x}")],
            interrupt_id=interrupt_id,
        )
    else:
        yield QuestionAsked(
            originator_id=item_id,
            originator_version=1,
            timestamp=asked,
            run_id=run_id,
            node="review",
            question="How large should the change be?",
            options=[
                QuestionOption(id="small", label="Small: one module", recommended=True),
                QuestionOption(id="large", label="Large: the whole package"),
            ],
            context="The draft is ready; the scope decides what finish touches.",
            interrupt_id=interrupt_id,
        )
    kind = "approval" if approval else "question"
    yield nxt(NodeStarted, node="review", kind=kind)
    yield nxt(RunSuspended, item_ids=[item_id], approval=approval)


def write_history(
    store: EventStore,
    runs: int,
    events_per_run: int,
    *,
    seed: int = 1,
    batch: int = 2000,
    active_every: int = 50,
    waiting_every: int = 0,
) -> int:
    """Append ``runs`` runs of about ``events_per_run`` events each; return the event count.

    With ``waiting_every``, every ``waiting_every``-th run waits for a person
    (questions and approvals alternate) instead of being finished or interrupted.
    """
    rng = random.Random(seed)
    pending: list[Event] = []
    total = 0
    waiting = 0
    for i in range(runs):
        if waiting_every and i % waiting_every == waiting_every - 1:
            events = waiting_run_events(uuid4(), events_per_run, rng, approval=waiting % 2 == 1)
            waiting += 1
        else:
            events = run_events(uuid4(), events_per_run, rng, finish=i % active_every != 0)
        pending.extend(events)
        if len(pending) >= batch:
            store.append(pending)
            total += len(pending)
            pending = []
    store.append(pending)
    return total + len(pending)
