"""The write side: transitions are checked on the stream, conflicts are never lost updates."""

from __future__ import annotations

from uuid import uuid4

import pytest

from commands.cancel_run import cancel_run
from commands.complete_run import complete_run
from commands.create_run import create_run
from commands.mark_interrupted import mark_interrupted
from commands.record_agent_output import AgentOutputBuffer, OutputItem
from commands.record_node import record_node_completed, record_node_started
from commands.resume_run import resume_run
from commands.run_state import load_run, next_events
from commands.start_run import start_run
from events.errors import ConcurrencyError, InvalidTransitionError, RunNotFoundError
from events.runs import AgentOutputRecorded, HeartbeatRecorded, NodeStarted, RunStatus
from events.store import EventStore


def new_run(store: EventStore) -> object:
    return create_run(
        store, workflow="wf", agent_type="demo", repo="/r", node_names=["a", "b"], created_by="me"
    )


def test_lifecycle_pending_running_completed(store: EventStore) -> None:
    """A run goes pending -> running -> completed and the fold follows it."""
    run_id = create_run(
        store, workflow="wf", agent_type="demo", repo="/r", node_names=["a"], created_by="me"
    )
    assert load_run(store, run_id).status is RunStatus.PENDING
    start_run(store, run_id, pid=1, host="h")
    record_node_started(store, run_id, "a")
    state = record_node_completed(store, run_id, "a", duration_ms=3)
    assert state.completed_nodes == ["a"]
    assert complete_run(store, run_id, duration_ms=5).status is RunStatus.COMPLETED
    assert [type(e).__name__ for e in store.load(run_id)] == [
        "RunCreated",
        "RunStarted",
        "NodeStarted",
        "NodeCompleted",
        "RunCompleted",
    ]


def test_interrupted_run_resumes_and_final_states_refuse(store: EventStore) -> None:
    """interrupted -> running on resume; cancelled is final and says so."""
    run_id = create_run(
        store, workflow="wf", agent_type="demo", repo="/r", node_names=["a"], created_by="me"
    )
    start_run(store, run_id, pid=1, host="h")
    mark_interrupted(store, run_id, reason="pid 1 is gone")
    assert resume_run(store, run_id, pid=2, host="h").status is RunStatus.RUNNING
    cancel_run(store, run_id, cancelled_by="me")
    with pytest.raises(InvalidTransitionError, match=r"is cancelled; cannot resume it"):
        resume_run(store, run_id, pid=3, host="h")
    with pytest.raises(InvalidTransitionError, match=r"cannot record NodeStarted"):
        record_node_started(store, run_id, "a")


def test_cannot_start_twice_or_complete_pending(store: EventStore) -> None:
    """Only a pending run starts; only a running run completes."""
    run_id = create_run(
        store, workflow="wf", agent_type="demo", repo="/r", node_names=["a"], created_by="me"
    )
    with pytest.raises(InvalidTransitionError, match="is pending; cannot complete it"):
        complete_run(store, run_id, duration_ms=1)
    start_run(store, run_id, pid=1, host="h")
    with pytest.raises(InvalidTransitionError, match="is running; cannot start it"):
        start_run(store, run_id, pid=1, host="h")


def test_unknown_run_is_named_error(store: EventStore) -> None:
    """Commands on a run with no stream raise RunNotFoundError."""
    missing = uuid4()
    with pytest.raises(RunNotFoundError, match=str(missing)):
        start_run(store, missing, pid=1, host="h")


def test_stale_writer_gets_concurrency_error_not_lost_update(store: EventStore) -> None:
    """Two writers decide on the same version: the second gets ConcurrencyError, nothing lost."""
    run_id = create_run(
        store, workflow="wf", agent_type="demo", repo="/r", node_names=["a"], created_by="me"
    )
    start_run(store, run_id, pid=1, host="h")
    state = load_run(store, run_id)
    first = next_events(state, [(HeartbeatRecorded, {"pid": 1, "host": "h"})])
    second = next_events(state, [(NodeStarted, {"node": "a"})])
    store.append(first)
    with pytest.raises(ConcurrencyError, match="changed while this command ran"):
        store.append(second)
    assert [type(e) for e in store.load(run_id)][-1] is HeartbeatRecorded
    assert load_run(store, run_id).version == 3


def test_output_buffer_batches_into_few_transactions(store: EventStore) -> None:
    """250 output items with max_items=100 become 3 appends, in order, each item once."""
    run_id = create_run(
        store, workflow="wf", agent_type="demo", repo="/r", node_names=["a"], created_by="me"
    )
    start_run(store, run_id, pid=1, host="h")
    clock = iter(float(i) * 0.0 for i in range(1000))
    buffer = AgentOutputBuffer(
        store, run_id, max_items=100, max_delay=60, clock=lambda: next(clock)
    )
    before = store.max_position()
    for i in range(250):
        buffer.add("a", OutputItem(kind="text", text=str(i)))
    assert store.max_position() - before == 200  # two full batches so far
    buffer.flush()
    outputs = [e for e in store.load(run_id) if isinstance(e, AgentOutputRecorded)]
    assert [e.text for e in outputs] == [str(i) for i in range(250)]


def test_save_checkpoint_refuses_a_batch_that_is_not_contiguous(store: EventStore) -> None:
    """A step's batch must be one stream's next versions; a gap is refused before writing."""
    from commands.save_checkpoint import save_checkpoint
    from events.base import utc_now

    run_id = create_run(
        store, workflow="wf", agent_type="demo", repo="/r", node_names=["a"], created_by="me"
    )
    start_run(store, run_id, pid=1, host="h")
    now = utc_now()
    gap = [
        HeartbeatRecorded(
            originator_id=run_id, originator_version=v, timestamp=now, pid=1, host="h"
        )
        for v in (3, 5)
    ]
    before = store.max_position()
    with pytest.raises(ValueError, match="contiguous versions of one stream"):
        save_checkpoint(store, gap)
    assert store.max_position() == before
    save_checkpoint(
        store,
        [
            HeartbeatRecorded(
                originator_id=run_id, originator_version=3, timestamp=now, pid=1, host="h"
            )
        ],
    )
    assert store.max_position() == before + 1
