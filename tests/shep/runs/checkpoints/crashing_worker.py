"""A worker that dies (``os._exit``) as the ``implement`` node starts: a SIGKILL stand-in.

    python -m tests.shep.runs.checkpoints.crashing_worker DB RUN_ID_HEX

The run must exist and be running. Each node records ``NodeStarted`` through the
command (a direct append that the saver's next append conflicts with) and enqueues
``NodeCompleted`` in the saver's outbox, as the runner does.
"""

from __future__ import annotations

import os
import sys
from uuid import UUID

from commands.record_node import record_node_started
from events.store import EventStore
from shep.runs.checkpoints import EventStoreCheckpointSaver
from tests.shep.runs.checkpoints.graphs import linear_graph, node_completed

CRASH_AT = "implement"
EXIT_CODE = 37


def main(db: str, run_hex: str) -> None:
    run_id = UUID(run_hex)
    store = EventStore(db)
    saver = EventStoreCheckpointSaver(store, db)

    def on_start(node: str) -> None:
        record_node_started(store, run_id, node)
        if node == CRASH_AT:
            os._exit(EXIT_CODE)

    def on_done(node: str) -> None:
        saver.enqueue(run_hex, node_completed(run_id, node))

    graph = linear_graph(saver, [], on_start=on_start, on_done=on_done)
    graph.invoke({"log": []}, {"configurable": {"thread_id": run_hex}}, durability="sync")
    raise SystemExit("the worker was meant to crash")


if __name__ == "__main__":
    main(*sys.argv[1:3])
