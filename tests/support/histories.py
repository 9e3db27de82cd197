"""Random but valid histories, written through the real commands."""

from __future__ import annotations

import random
from uuid import UUID, uuid4

from commands.cancel_run import cancel_run
from commands.complete_run import complete_run
from commands.create_run import create_run
from commands.fail_run import fail_run
from commands.mark_interrupted import mark_interrupted
from commands.record_agent_output import OutputItem, record_agent_output
from commands.record_heartbeat import record_heartbeat
from commands.record_node import (
    record_agent_session,
    record_node_completed,
    record_node_failed,
    record_node_started,
)
from commands.resume_run import resume_run
from commands.start_run import start_run
from events.base import utc_now
from events.inbox import ApprovalGranted, ApprovalRejected, ApprovalRequested
from events.runs import Usage
from events.store import EventStore
from events.supervisor import SupervisorDecisionMade, supervisor_stream_id

NODES = ["scan", "dependencies", "patterns", "report"]


def random_run(store: EventStore, rng: random.Random) -> UUID:
    """One run taken through a random, valid sequence of commands."""
    run_id = create_run(
        store,
        workflow=rng.choice(["analyze-repository", "feature"]),
        agent_type=rng.choice(["claude-code", "codex", "demo"]),
        repo=f"/repo/{rng.randrange(5)}",
        node_names=NODES,
        created_by="tester@host",
        model=rng.choice([None, "m1"]),
    )
    if rng.random() < 0.1:
        return run_id
    start_run(store, run_id, pid=rng.randrange(1, 99999), host="host")
    for node in NODES:
        record_node_started(store, run_id, node)
        if rng.random() < 0.5:
            record_agent_session(store, run_id, node, f"sess-{rng.randrange(1000)}")
        items = [
            OutputItem(
                kind=rng.choice(["text", "tool_use", "tool_result"]),
                text=f"line {i}",
                tool_name=rng.choice([None, "Read"]),
            )
            for i in range(rng.randrange(0, 8))
        ]
        record_agent_output(store, run_id, node, items)
        if rng.random() < 0.3:
            record_heartbeat(store, run_id, pid=1, host="host", node=node, tokens_so_far=5)
        roll = rng.random()
        if roll < 0.08:
            record_node_failed(
                store,
                run_id,
                node,
                duration_ms=5,
                error_type="AgentExitError",
                message="boom",
                retryable=False,
            )
            fail_run(store, run_id, error_type="AgentExitError", message="boom", node=node)
            return run_id
        if roll < 0.14:
            mark_interrupted(store, run_id, reason="worker gone")
            if rng.random() < 0.5:
                cancel_run(store, run_id, cancelled_by="tester")
                return run_id
            resume_run(store, run_id, pid=2, host="host")
            record_node_started(store, run_id, node, attempt=2)
        record_node_completed(
            store,
            run_id,
            node,
            duration_ms=rng.randrange(1, 5000),
            usage=Usage(
                input_tokens=rng.randrange(100),
                output_tokens=rng.randrange(100),
                cost_usd=rng.choice([None, 0.01]),
            ),
        )
    complete_run(store, run_id, duration_ms=1234)
    return run_id


def random_decisions(store: EventStore, run_id: UUID, rng: random.Random) -> None:
    """An approval gate answered by a user or rejected, and a supervisor decision."""
    approval = uuid4()
    now = utc_now()
    store.append(
        [
            ApprovalRequested(
                originator_id=approval,
                originator_version=1,
                timestamp=now,
                run_id=run_id,
                node="plan",
                summary="ok?",
                prompt_version="p1",
            )
        ]
    )
    decided = ApprovalGranted if rng.random() < 0.5 else ApprovalRejected
    store.append(
        [
            decided(
                originator_id=approval,
                originator_version=2,
                timestamp=now,
                actor="user:tester",
                rationale="looks fine",
                policy="manual",
            )
        ]
    )
    if rng.random() < 0.5:
        store.append(
            [
                SupervisorDecisionMade(
                    originator_id=supervisor_stream_id(run_id),
                    originator_version=1,
                    timestamp=now,
                    run_id=run_id,
                    subject_id=approval,
                    decision="approve",
                    rationale="policy says so",
                    policy="default",
                    policy_version="1",
                    prompt_version="sup-1",
                    evaluator_agent="demo",
                )
            ]
        )
