"""An agent starts only while its worker owns the run: check, start and record are one step."""

from __future__ import annotations

import subprocess
import threading
import time
from types import SimpleNamespace
from uuid import UUID

import pytest

from commands.cancel_run import cancel_run
from commands.create_run import create_run
from commands.mark_interrupted import mark_interrupted
from commands.record_node import start_agent
from commands.resume_run import resume_run
from commands.start_run import start_run
from events.errors import InvalidTransitionError, StoreUnavailableError, WorkerFencedError
from events.runs import AgentStarted, RunInterrupted
from events.store import EventStore
from shep.nodes.agent import AgentNodes


def _started(store: EventStore) -> UUID:
    run_id = create_run(
        store, workflow="wf", agent_type="demo", repo="/r", node_names=["a"], created_by="me"
    )
    start_run(store, run_id, pid=10, host="h")
    return run_id


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "30"], start_new_session=True)


def test_the_owner_starts_its_agent_and_the_log_names_the_process(store: EventStore) -> None:
    run_id = _started(store)
    process = start_agent(store, run_id, "a", "claude", _sleeper, epoch=1)
    try:
        [event] = [e for e in store.load(run_id) if isinstance(e, AgentStarted)]
        assert (event.node, event.agent, event.pid) == ("a", "claude", process.pid)
        assert process.poll() is None
    finally:
        process.kill()
        process.wait()


@pytest.mark.parametrize("how", ["taken over", "interrupted", "cancelled"])
def test_a_fenced_or_stopped_run_starts_no_agent(store: EventStore, how: str) -> None:
    """A worker that goes on after losing the run (it was stopped, slow) never starts the agent."""
    run_id = _started(store)
    if how == "cancelled":
        cancel_run(store, run_id, reason="by me", cancelled_by="me")
    else:
        mark_interrupted(store, run_id, reason="no heartbeat", epoch=1)
        if how == "taken over":
            resume_run(store, run_id, pid=20, host="h")
    before = store.max_position()
    started: list[subprocess.Popen[bytes]] = []

    def popen() -> subprocess.Popen[bytes]:
        started.append(_sleeper())
        return started[-1]

    expected = WorkerFencedError if how == "taken over" else InvalidTransitionError
    with pytest.raises(expected):
        start_agent(store, run_id, "a", "claude", popen, epoch=1)
    assert started == []
    assert store.max_position() == before


def test_no_takeover_commits_between_the_check_and_the_record(store: EventStore) -> None:
    """An interruption attempted while the agent is being started waits, then comes after it."""
    run_id = _started(store)
    in_popen = threading.Event()
    other = EventStore(store.path)
    interrupted: list[BaseException | None] = []

    def interrupt() -> None:
        in_popen.wait(5)
        try:
            mark_interrupted(other, run_id, reason="no heartbeat", epoch=1)
            interrupted.append(None)
        except BaseException as e:
            interrupted.append(e)

    def slow_popen() -> subprocess.Popen[bytes]:
        in_popen.set()
        time.sleep(0.3)  # the other writer is waiting on the lock meanwhile
        return _sleeper()

    thread = threading.Thread(target=interrupt)
    thread.start()
    process = start_agent(store, run_id, "a", "claude", slow_popen, epoch=1)
    thread.join(10)
    other.close()
    process.kill()
    process.wait()
    assert interrupted == [None]
    kinds = [type(e) for e in store.load(run_id)]
    assert kinds.index(AgentStarted) < kinds.index(RunInterrupted)


def test_an_agent_started_but_not_recorded_is_killed(
    store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = _started(store)
    started: list[subprocess.Popen[bytes]] = []

    def popen() -> subprocess.Popen[bytes]:
        started.append(_sleeper())
        return started[-1]

    def broken(events: object) -> list[int]:
        raise StoreUnavailableError("disk full")

    monkeypatch.setattr(store, "append", broken)
    # The worker's launcher (what every executor starts its agent through) kills it.
    ctx = SimpleNamespace(store=store, run_id=run_id, epoch=1)
    nodes = AgentNodes(ctx, SimpleNamespace(name="claude"), None, 1.0)  # type: ignore[arg-type]
    with pytest.raises(StoreUnavailableError):
        nodes._launch("a", popen)
    [process] = started
    assert process.returncode is not None  # killed and reaped
    assert not [e for e in store.load(run_id) if isinstance(e, AgentStarted)]
