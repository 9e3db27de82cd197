"""Per-node cost of shep's checkpointer against LangGraph's SqliteSaver, measured side by side.

    python benchmarks/checkpointer.py [--quick]

A 16-node linear graph of no-op nodes is invoked, each time on a new thread,
with ``durability="sync"``: without a checkpointer, with
``EventStoreCheckpointSaver`` on shep's store, and with ``SqliteSaver`` on a
file (WAL, the driver's default ``synchronous=FULL``, as shep's store). The
three run interleaved, round after round; each figure is the median of the
rounds.

- ``checkpointer_node_us_{none,ours,sqlite}``: wall time per node.
- ``checkpointer_overhead_us_{ours,sqlite}``: per-node time with the saver
  minus per-node time without one, i.e. what checkpointing adds to a node.
- ``node_overhead_ratio``: ours / sqlite of that overhead (goal: <= 0.8).
- ``node_overhead_fenced_ratio``: the same with the saver as a worker runs it (fenced).
- ``node_overhead_cpu_ratio``, ``node_overhead_fenced_cpu_ratio``: the same two from the
  process's CPU time (every thread's), steadier on a busy machine than the wall times.
- ``node_time_ratio``: ours / sqlite of the whole per-node time.
- ``saver_step_us_{ours,sqlite}`` and ``saver_step_ratio``: the savers alone,
  called directly in one thread (``put_writes`` then ``put`` per step, with
  checkpoints shaped like the graph's), without LangGraph's threads around them.

Each invoke runs on a new thread id, like a new run: the saver's ``get_tuple``
finds the thread's stream current in the ``checkpoints`` projection and does
not catch up; catching up is left to readers (``shep status``), as for every
other projection.
"""

from __future__ import annotations

import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TypedDict
from uuid import uuid4

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint  # noqa: E402
from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402

from commands.create_run import create_run  # noqa: E402
from commands.start_run import start_run  # noqa: E402
from events.store import EventStore  # noqa: E402
from shep.runs.checkpoints import EventStoreCheckpointSaver  # noqa: E402

NODES = 16


class State(TypedDict):
    count: int


def _noop(state: State) -> dict[str, int]:
    return {"count": state["count"] + 1}


def _builder() -> StateGraph[State, None, State, State]:
    builder = StateGraph(State)
    previous = START
    for i in range(NODES):
        name = f"n{i}"
        builder.add_node(name, _noop)
        builder.add_edge(previous, name)
        previous = name
    builder.add_edge(previous, END)
    return builder


def _steps_us(saver: BaseCheckpointSaver[Any], steps: int) -> float:
    """Per-step time of put_writes + put on a new thread, checkpoints shaped like the graph's."""
    config: Any = {"configurable": {"thread_id": uuid4().hex, "checkpoint_ns": ""}}
    version: Any = None
    checkpoint = empty_checkpoint()
    start = time.perf_counter()
    for step in range(steps):
        version = saver.get_next_version(version, None)
        checkpoint = {
            **checkpoint,
            "id": str(uuid4()),
            "channel_values": {"count": step},
            "channel_versions": {f"branch:to:n{i}": version for i in range(NODES)},
            "versions_seen": {f"n{i}": {f"branch:to:n{i}": version} for i in range(NODES)},
        }
        if step:
            saver.put_writes(config, [("count", step)], "task", "~__pregel_pull, n")
        metadata: Any = {"source": "loop", "step": step, "parents": {}}
        config = saver.put(config, checkpoint, metadata, {"count": version})
    return (time.perf_counter() - start) / steps * 1e6


def bench(quick: bool) -> dict[str, float]:
    """Median per-node times and the overhead ratio of our saver to SqliteSaver."""
    invokes = 10 if quick else 30
    rounds = 5 if quick else 9
    with tempfile.TemporaryDirectory(prefix="shep-bench-cp-") as tmp:
        work = Path(tmp)
        store = EventStore(work / "shep.db")
        ours = EventStoreCheckpointSaver(store, work / "shep.db")
        # What a worker uses: every batch checked against the run's owner (fencing).
        fenced = EventStoreCheckpointSaver(store, work / "shep.db", epoch=1)
        conn = sqlite3.connect(work / "langgraph.sqlite", check_same_thread=False)
        theirs = SqliteSaver(conn)
        builder = _builder()
        graphs: dict[str, Any] = {
            "none": builder.compile(),
            "ours": builder.compile(checkpointer=ours),
            "fenced": builder.compile(checkpointer=fenced),
            "sqlite": builder.compile(checkpointer=theirs),
        }

        def thread_id(name: str) -> str:
            if name != "fenced":
                return uuid4().hex
            run_id = create_run(
                store,
                workflow="bench",
                agent_type="demo",
                repo="/r",
                node_names=[],
                created_by="bench",
            )
            start_run(store, run_id, pid=1, host="bench")
            return run_id.hex

        def per_node_us(name: str) -> float:
            graph = graphs[name]
            threads = [thread_id(name) for _ in range(invokes)]
            start, start_cpu = time.perf_counter(), time.process_time()
            for thread in threads:
                config = {"configurable": {"thread_id": thread}}
                if name == "none":
                    # durability="sync" without a checkpointer fails in LangGraph 1.2.22
                    # ('SyncPregelLoop' has no '_put_checkpoint_fut'); it means nothing there.
                    graph.invoke({"count": 0}, config)
                else:
                    graph.invoke({"count": 0}, config, durability="sync")
                if name == "ours":
                    ours.flush()
                elif name == "fenced":
                    fenced.flush()
            cpu[name].append((time.process_time() - start_cpu) / (invokes * NODES) * 1e6)
            return (time.perf_counter() - start) / (invokes * NODES) * 1e6

        samples: dict[str, list[float]] = {name: [] for name in graphs}
        #: This process's CPU (all its threads) per node: steadier than the wall times,
        #: which the syncs' waits swing both ways on a busy disk.
        cpu: dict[str, list[float]] = {name: [] for name in graphs}
        for name in graphs:  # warm up imports, tables and caches alike
            per_node_us(name)
        for name in graphs:
            cpu[name].clear()
        for _ in range(rounds):
            for name in graphs:
                samples[name].append(per_node_us(name))
        steps = 100 if quick else 300
        direct: dict[str, list[float]] = {"ours": [], "sqlite": []}
        for _ in range(rounds):
            direct["ours"].append(_steps_us(ours, steps))
            direct["sqlite"].append(_steps_us(theirs, steps))
        ours.close()
        fenced.close()
        store.close()
        conn.close()

    median = {name: statistics.median(values) for name, values in samples.items()}
    cpu_median = {name: statistics.median(values) for name, values in cpu.items()}
    cpu_sqlite = cpu_median["sqlite"] - cpu_median["none"]
    overhead_ours = median["ours"] - median["none"]
    overhead_fenced = median["fenced"] - median["none"]
    overhead_sqlite = median["sqlite"] - median["none"]
    step_ours = statistics.median(direct["ours"])
    step_sqlite = statistics.median(direct["sqlite"])
    return {
        "checkpointer_nodes": NODES,
        "checkpointer_node_us_none": round(median["none"], 1),
        "checkpointer_node_us_ours": round(median["ours"], 1),
        "checkpointer_node_us_fenced": round(median["fenced"], 1),
        "checkpointer_node_us_sqlite": round(median["sqlite"], 1),
        "checkpointer_overhead_us_ours": round(overhead_ours, 1),
        "checkpointer_overhead_us_sqlite": round(overhead_sqlite, 1),
        "node_overhead_ratio": round(overhead_ours / overhead_sqlite, 3),
        # The saver as a worker runs it, checking the run's owner before each batch.
        "node_overhead_fenced_ratio": round(overhead_fenced / overhead_sqlite, 3),
        # The same two ratios from this process's CPU time.
        "node_overhead_cpu_ratio": round((cpu_median["ours"] - cpu_median["none"]) / cpu_sqlite, 3),
        "node_overhead_fenced_cpu_ratio": round(
            (cpu_median["fenced"] - cpu_median["none"]) / cpu_sqlite, 3
        ),
        "node_time_ratio": round(median["ours"] / median["sqlite"], 3),
        "saver_step_us_ours": round(step_ours, 1),
        "saver_step_us_sqlite": round(step_sqlite, 1),
        "saver_step_ratio": round(step_ours / step_sqlite, 3),
    }


if __name__ == "__main__":
    import json

    print(json.dumps(bench("--quick" in sys.argv), indent=2))
