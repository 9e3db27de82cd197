"""A real StateGraph on the saver: steps, crashes, interrupts, time travel, the outbox."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.types import Command, interrupt

from commands.create_run import create_run
from commands.start_run import start_run
from events.base import Event
from events.checkpoints import CheckpointSaved, WritesSaved
from events.runs import NodeCompleted, NodeStarted
from events.store import EventStore
from shep.runs.checkpoints import EventStoreCheckpointSaver
from tests.shep.runs.checkpoints import crashing_worker
from tests.shep.runs.checkpoints.graphs import NODES, linear_graph, node_completed

ROOT = Path(__file__).resolve().parents[4]


@pytest.fixture
def saver(store: EventStore, db_path: Path) -> Iterator[EventStoreCheckpointSaver]:
    with EventStoreCheckpointSaver(store, db_path) as s:
        yield s


def new_run(store: EventStore) -> UUID:
    run_id = create_run(
        store,
        workflow="test",
        agent_type="demo",
        repo="/repo",
        node_names=list(NODES),
        created_by="tester",
    )
    start_run(store, run_id, pid=os.getpid(), host="here")
    return run_id


def thread(run_id: UUID) -> RunnableConfig:
    return {"configurable": {"thread_id": run_id.hex}}


def record_appends(store: EventStore, monkeypatch: pytest.MonkeyPatch) -> list[list[Event]]:
    batches: list[list[Event]] = []
    append = store.append

    def recording(events: Sequence[Event]) -> list[int]:
        batches.append(list(events))
        return append(events)

    monkeypatch.setattr(store, "append", recording)
    return batches


def test_one_transaction_per_step_with_the_outbox(
    store: EventStore, saver: EventStoreCheckpointSaver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each step is one append: the node's writes, its NodeCompleted and the next checkpoint."""
    run_id = new_run(store)
    before = store.max_position()
    batches = record_appends(store, monkeypatch)
    calls: list[str] = []
    graph = linear_graph(
        saver, calls, on_done=lambda node: saver.enqueue(run_id.hex, node_completed(run_id, node))
    )

    result = graph.invoke({"log": []}, thread(run_id), durability="sync")
    saver.flush()

    assert result == {"log": list(NODES)}
    assert calls == list(NODES)
    # An input checkpoint, one before each node, one at the end; nothing else.
    assert len(batches) == len(NODES) + 2
    assert store.max_position() - before == sum(len(b) for b in batches)
    for batch in batches:
        assert isinstance(batch[-1], CheckpointSaved)
        assert sum(isinstance(e, CheckpointSaved) for e in batch) == 1
        assert all(e.originator_id == run_id for e in batch)
    for node, batch in zip(NODES, batches[2:], strict=True):
        completed = [e.node for e in batch if isinstance(e, NodeCompleted)]
        assert completed == [node]
        assert any(isinstance(e, WritesSaved) for e in batch)
        checkpoint = batch[-1]
        assert isinstance(checkpoint, CheckpointSaved)
        values = saver.serde.loads_typed((checkpoint.checkpoint_type, checkpoint.checkpoint))
        assert values["channel_values"]["log"][-1] == node
    versions = [e.originator_version for e in store.load(run_id)]
    assert versions == list(range(1, len(versions) + 1))


def test_resume_after_a_failed_node_reruns_only_that_node(
    store: EventStore, db_path: Path, saver: EventStoreCheckpointSaver
) -> None:
    """A node that raised is the only one a resume (by a new saver) runs again."""
    run_id = new_run(store)
    calls: list[str] = []
    failures = ["implement"]

    def flaky(node: str) -> None:
        if node in failures:
            failures.remove(node)
            raise RuntimeError(f"{node} broke")

    with pytest.raises(RuntimeError, match="implement broke"):
        linear_graph(saver, calls, on_start=flaky).invoke(
            {"log": []}, thread(run_id), durability="sync"
        )
    assert calls == ["scan", "plan", "implement"]

    with EventStoreCheckpointSaver(store, db_path) as restarted:
        graph = linear_graph(restarted, calls)
        state = graph.get_state(thread(run_id))
        assert state.next == ("implement",)
        assert "implement broke" in str(state.tasks[0].error)
        result = graph.invoke(None, thread(run_id), durability="sync")
    assert result == {"log": list(NODES)}
    assert calls == ["scan", "plan", "implement", "implement", "report"]


def test_interrupt_is_durable_at_once_and_resumes(
    store: EventStore, db_path: Path, saver: EventStoreCheckpointSaver
) -> None:
    """An interrupt() is in the log before invoke returns; Command(resume=) re-runs that node."""
    run_id = new_run(store)
    calls: list[str] = []
    answers: list[Any] = []

    def gate(node: str) -> None:
        if node == "plan":
            answers.append(interrupt("approve the plan?"))

    result = linear_graph(saver, calls, on_start=gate).invoke(
        {"log": []}, thread(run_id), durability="sync"
    )
    assert result["__interrupt__"][0].value == "approve the plan?"

    # A new process sees the interrupt without the first saver flushing anything.
    with EventStoreCheckpointSaver(store, db_path) as restarted:
        graph = linear_graph(restarted, calls, on_start=gate)
        state = graph.get_state(thread(run_id))
        assert state.next == ("plan",)
        assert state.tasks[0].interrupts[0].value == "approve the plan?"
        result = graph.invoke(Command(resume="approved"), thread(run_id), durability="sync")
    assert result == {"log": list(NODES)}
    assert answers == ["approved"]
    assert calls == ["scan", "plan", "plan", "implement", "report"]


def test_time_travel_lists_history_and_forks_from_an_old_checkpoint(
    store: EventStore, saver: EventStoreCheckpointSaver
) -> None:
    """get_state_history lists every step newest first; invoking an old one re-runs what follows."""
    run_id = new_run(store)
    calls: list[str] = []
    graph = linear_graph(saver, calls)
    graph.invoke({"log": []}, thread(run_id), durability="sync")

    history = list(graph.get_state_history(thread(run_id)))
    assert [h.metadata["step"] for h in history if h.metadata] == [4, 3, 2, 1, 0, -1]
    assert [h.next for h in history] == [
        (),
        ("report",),
        ("implement",),
        ("plan",),
        ("scan",),
        ("__start__",),
    ]
    before_implement = history[2]
    assert before_implement.values == {"log": ["scan", "plan"]}

    calls.clear()
    result = graph.invoke(None, before_implement.config, durability="sync")
    assert result == {"log": list(NODES)}
    assert calls == ["implement", "report"]
    after = list(graph.get_state_history(thread(run_id)))
    new = after[: len(after) - len(history)]
    # The fork copies the old checkpoint, then implement and report run on the new branch.
    assert [h.metadata["source"] for h in new if h.metadata] == ["loop", "loop", "fork"]
    fork = new[-1]
    assert fork.parent_config is not None
    travelled = before_implement.config["configurable"]["checkpoint_id"]
    assert fork.parent_config["configurable"]["checkpoint_id"] == travelled
    assert new[0].values == {"log": list(NODES)}


def test_a_killed_worker_resumes_without_rerunning_completed_nodes(
    store: EventStore, db_path: Path, shep_home: Path
) -> None:
    """Killed mid-node: completed nodes and their NodeCompleted are in the log and never re-run;
    the node in flight has NodeStarted only, and is the first to run again."""
    run_id = new_run(store)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SHEP_HOME": str(shep_home)}
    worker = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.shep.runs.checkpoints.crashing_worker",
            str(db_path),
            run_id.hex,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert worker.returncode == crashing_worker.EXIT_CODE, worker.stderr

    run_events = [e for e in store.load(run_id) if isinstance(e, NodeStarted | NodeCompleted)]
    assert [(type(e).__name__, e.node) for e in run_events] == [
        ("NodeStarted", "scan"),
        ("NodeCompleted", "scan"),
        ("NodeStarted", "plan"),
        ("NodeCompleted", "plan"),
        ("NodeStarted", "implement"),
    ]

    calls: list[str] = []
    with EventStoreCheckpointSaver(store, db_path) as saver:
        graph = linear_graph(saver, calls)
        assert graph.get_state(thread(run_id)).next == ("implement",)
        result = graph.invoke(None, thread(run_id), durability="sync")
    assert calls == ["implement", "report"]
    assert result == {"log": list(NODES)}
