"""The checkpoint tables built incrementally equal the ones rebuilt from the log."""

from __future__ import annotations

import contextlib
import random
from pathlib import Path
from typing import Any

import apsw
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.types import Command, interrupt

from events.store import EventStore
from projections.catch_up import catch_up, rebuild
from projections.checkpoints import CHECKPOINTS
from projections.database import open_database
from projections.state import lag
from shep.runs.checkpoints import EventStoreCheckpointSaver
from tests.shep.runs.checkpoints.graphs import NODES, linear_graph


def snapshot(conn: apsw.Connection) -> dict[str, list[tuple[Any, ...]]]:
    return {
        t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr)
        for t in CHECKPOINTS.tables
    }


def config(thread_id: str, run: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}, "metadata": {"run_id": run}}


@pytest.mark.parametrize("seed", [1, 2])
def test_rebuilt_checkpoints_equal_incremental(store: EventStore, db_path: Path, seed: int) -> None:
    """Graphs with failures, interrupts, forks, copies, prunes and deletions, caught up in
    random batches by another reader, give the same rows as a rebuild from scratch."""
    rng = random.Random(seed)
    reader = open_database(db_path)
    saver = EventStoreCheckpointSaver(store, db_path)
    threads: list[str] = []
    for i in range(8):
        thread_id = rng.choice([f"thread-{i}", f"{rng.getrandbits(128):032x}"])
        threads.append(thread_id)
        stop = rng.choice([None, *NODES])
        failures = [stop] if stop and rng.random() < 0.5 else []

        def hook(node: str, stop: str | None = stop, failures: list[str] = failures) -> None:
            if node in failures:
                failures.remove(node)
                raise RuntimeError("failed")
            if node == stop and not failures:
                interrupt("go on?")

        graph = linear_graph(saver, [], on_start=hook)
        with contextlib.suppress(RuntimeError):
            graph.invoke({"log": []}, config(thread_id, f"run-{i}a"), durability="sync")
        graph.invoke(Command(resume="yes"), config(thread_id, f"run-{i}b"), durability="sync")
        if rng.random() < 0.5:
            history = list(graph.get_state_history({"configurable": {"thread_id": thread_id}}))
            graph.invoke(None, rng.choice(history).config, durability="sync")
        if rng.random() < 0.4:
            catch_up(reader, batch_size=rng.choice([1, 3, 17, 5000]))
    saver.copy_thread(threads[0], "copy-of-0")
    saver.prune([threads[1]], strategy="keep_latest")
    saver.prune([threads[2]], strategy="delete")
    saver.delete_thread(threads[3])
    saver.delete_for_runs(["run-4a", "run-5b"])
    saver.close()

    catch_up(reader, batch_size=rng.choice([2, 5000]))
    assert lag(reader) == 0
    incremental = snapshot(reader)
    assert incremental["checkpoints"]
    assert incremental["checkpoint_writes"]
    rebuild(reader, batch_size=13)
    assert snapshot(reader) == incremental
