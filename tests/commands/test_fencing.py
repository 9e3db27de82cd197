"""Fencing: each start or resume makes a new owner, and a stale owner's appends are refused."""

from __future__ import annotations

from uuid import UUID

import pytest

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
from commands.run_state import RunState, load_run, next_events
from commands.save_checkpoint import save_checkpoint
from commands.start_run import start_run
from events.base import utc_now
from events.errors import InvalidTransitionError, WorkerFencedError
from events.runs import HeartbeatRecorded, NodeCompleted, RunResumed, RunStarted, RunStatus
from events.store import EventStore


def _run(store: EventStore) -> UUID:
    return create_run(
        store, workflow="wf", agent_type="demo", repo="/r", node_names=["a"], created_by="me"
    )


def _taken_over(store: EventStore) -> UUID:
    """A run started by worker #1, interrupted, and resumed by worker #2."""
    run_id = _run(store)
    assert start_run(store, run_id, pid=10, host="h").epoch == 1
    mark_interrupted(store, run_id, reason="stale", epoch=1)
    assert resume_run(store, run_id, pid=20, host="h").epoch == 2
    return run_id


def test_each_start_and_resume_records_the_next_epoch(store: EventStore) -> None:
    """RunStarted/RunResumed carry epochs 1, 2, ... and the fold follows the newest owner."""
    run_id = _taken_over(store)
    owners = [e for e in store.load(run_id) if isinstance(e, RunStarted | RunResumed)]
    assert [(type(e).__name__, e.epoch, e.pid) for e in owners] == [
        ("RunStarted", 1, 10),
        ("RunResumed", 2, 20),
    ]
    state = load_run(store, run_id)
    assert (state.epoch, state.pid, state.status) == (2, 20, RunStatus.RUNNING)


WORKER_APPENDS = {
    "node started": lambda s, r, e: record_node_started(s, r, "a", epoch=e),
    "agent session": lambda s, r, e: record_agent_session(s, r, "a", "sess", epoch=e),
    "node completed": lambda s, r, e: record_node_completed(s, r, "a", duration_ms=1, epoch=e),
    "node failed": lambda s, r, e: record_node_failed(
        s, r, "a", duration_ms=1, error_type="X", message="m", epoch=e
    ),
    "output": lambda s, r, e: record_agent_output(
        s, r, "a", [OutputItem(kind="text", text="late")], epoch=e
    ),
    "heartbeat": lambda s, r, e: record_heartbeat(s, r, pid=10, host="h", epoch=e),
    "completed": lambda s, r, e: complete_run(s, r, duration_ms=1, epoch=e),
    "failed": lambda s, r, e: fail_run(s, r, error_type="X", message="m", epoch=e),
    "interrupted": lambda s, r, e: mark_interrupted(s, r, reason="mine", epoch=e),
}


@pytest.mark.parametrize("append", WORKER_APPENDS.values(), ids=WORKER_APPENDS.keys())
def test_a_stale_owner_cannot_append(store: EventStore, append: object) -> None:
    """After a resume, every append worker #1 makes is refused and nothing is stored."""
    run_id = _taken_over(store)
    before = store.max_position()
    with pytest.raises(WorkerFencedError, match=r"belongs to worker #2; this worker \(#1\)"):
        append(store, run_id, 1)  # type: ignore[operator]
    assert store.max_position() == before


@pytest.mark.parametrize("append", WORKER_APPENDS.values(), ids=WORKER_APPENDS.keys())
def test_the_current_owner_can_append(store: EventStore, append: object) -> None:
    """The same appends pass for worker #2, the run's owner."""
    run_id = _taken_over(store)
    before = store.max_position()
    append(store, run_id, 2)  # type: ignore[operator]
    assert store.max_position() == before + 1


def _checkpoint_batch(run_id: UUID, after: int) -> list[HeartbeatRecorded]:
    return [
        HeartbeatRecorded(
            originator_id=run_id, originator_version=after + 1, timestamp=utc_now(), pid=1, host="h"
        )
    ]


def test_checkpoint_batches_are_fenced(store: EventStore) -> None:
    """A step's batch (outbox, writes, checkpoint) from a stale owner is refused whole."""
    run_id = _taken_over(store)
    version = store.stream_version(run_id)
    before = store.max_position()
    with pytest.raises(WorkerFencedError):
        save_checkpoint(store, _checkpoint_batch(run_id, version), epoch=1)
    assert store.max_position() == before
    save_checkpoint(store, _checkpoint_batch(run_id, version), epoch=2)
    assert store.max_position() == before + 1


def test_checkpoint_batches_after_a_cancel_are_refused(store: EventStore) -> None:
    """The worker's last flush after `shep cancel` records nothing (it used to add WritesSaved)."""
    run_id = _run(store)
    start_run(store, run_id, pid=1, host="h")
    cancel_run(store, run_id, cancelled_by="me")
    before = store.max_position()
    with pytest.raises(InvalidTransitionError, match="is cancelled"):
        save_checkpoint(store, _checkpoint_batch(run_id, store.stream_version(run_id)), epoch=1)
    assert store.max_position() == before


def test_outbox_events_are_checked_against_the_real_status(store: EventStore) -> None:
    """NodeCompleted built for an outbox is refused when the run is no longer running."""
    run_id = _run(store)
    start_run(store, run_id, pid=1, host="h")
    mark_interrupted(store, run_id, reason="gone", epoch=1)
    version = store.stream_version(run_id)
    assumed = RunState(run_id, version=version, status=RunStatus.RUNNING, epoch=1)
    batch = next_events(assumed, [(NodeCompleted, {"node": "a", "duration_ms": 1})], epoch=1)
    with pytest.raises(InvalidTransitionError, match="is interrupted"):
        save_checkpoint(store, batch, epoch=1)
    assert not load_run(store, run_id).completed_nodes


def test_a_stale_checkpoint_version_asks_to_renumber(store: EventStore) -> None:
    """A batch numbered after an old version is a conflict (the saver renumbers and retries)."""
    from events.errors import ConcurrencyError

    run_id = _run(store)
    start_run(store, run_id, pid=1, host="h")
    old = store.stream_version(run_id)
    record_heartbeat(store, run_id, pid=1, host="h", epoch=1)
    with pytest.raises(ConcurrencyError):
        save_checkpoint(store, _checkpoint_batch(run_id, old), epoch=1)


def test_orphan_marking_is_compare_and_set_on_the_owner(store: EventStore) -> None:
    """Deciding "worker #1 is gone", then a resume, then marking: the new worker is untouched."""
    run_id = _run(store)
    start_run(store, run_id, pid=1, host="h")
    mark_interrupted(store, run_id, reason="pid 1 gone", epoch=1)
    decided_about = load_run(store, run_id).epoch  # an orphan check reads epoch 1 ...
    resume_run(store, run_id, pid=2, host="h")  # ... a resume lands meanwhile ...
    # ... and the check's append (it saw the run running under #1 a moment ago) is refused.
    with pytest.raises((WorkerFencedError, InvalidTransitionError)):
        mark_interrupted(store, run_id, reason="pid 1 gone", epoch=decided_about)
    state = load_run(store, run_id)
    assert (state.status, state.epoch) == (RunStatus.RUNNING, 2)


def test_a_pending_run_is_interrupted_only_while_still_unstarted(store: EventStore) -> None:
    """Epoch 0 names a run that never started: once a worker starts it, marking it is refused."""
    run_id = _run(store)
    start_run(store, run_id, pid=1, host="h")
    with pytest.raises(WorkerFencedError):
        mark_interrupted(store, run_id, reason="creator gone", epoch=0)
    other = _run(store)
    assert mark_interrupted(store, other, reason="creator gone", epoch=0).status is (
        RunStatus.INTERRUPTED
    )
    assert resume_run(store, other, pid=3, host="h").epoch == 1
