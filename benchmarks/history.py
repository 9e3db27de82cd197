"""Synthetic, realistic histories for benchmarks, appended in large batches."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import timedelta
from uuid import UUID, uuid4

from events.base import Event, utc_now
from events.runs import (
    AgentOutputRecorded,
    HeartbeatRecorded,
    NodeCompleted,
    NodeStarted,
    RunCompleted,
    RunCreated,
    RunInterrupted,
    RunStarted,
    Usage,
)
from events.store import EventStore

NODES = ["scan", "dependencies", "patterns", "report"]


def run_events(
    run_id: UUID, events_per_run: int, rng: random.Random, *, finish: bool
) -> Iterator[Event]:
    """One run's stream: created, started, nodes with agent output and heartbeats, completed.

    Timestamps move as they do in a real run: each command gets its own moment,
    and agent output shares one per batch of up to ten lines.
    """
    start = utc_now()
    version = 0
    tick = 0

    def nxt(cls: type[Event], **fields: object) -> Event:
        nonlocal version, tick
        version += 1
        if cls is not AgentOutputRecorded or version % 10 == 0:
            tick += 1
        moment = start + timedelta(milliseconds=tick)
        return cls(originator_id=run_id, originator_version=version, timestamp=moment, **fields)

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


def write_history(
    store: EventStore,
    runs: int,
    events_per_run: int,
    *,
    seed: int = 1,
    batch: int = 2000,
    active_every: int = 50,
) -> int:
    """Append ``runs`` runs of about ``events_per_run`` events each; return the event count."""
    rng = random.Random(seed)
    pending: list[Event] = []
    total = 0
    for i in range(runs):
        pending.extend(run_events(uuid4(), events_per_run, rng, finish=i % active_every != 0))
        if len(pending) >= batch:
            store.append(pending)
            total += len(pending)
            pending = []
    store.append(pending)
    return total + len(pending)
