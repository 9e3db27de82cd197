"""A LangGraph checkpointer whose checkpoints are events in the thread's stream.

``EventStoreCheckpointSaver`` appends ``CheckpointSaved`` and ``WritesSaved``
events (``events.checkpoints``) to the stream of the thread: a thread id that
parses as a UUID *is* that stream (runs use ``thread_id = run_id.hex``, so a
run's checkpoints sit in the run's own history), any other thread id gets
``uuid5(SHEP_NAMESPACE, "thread:" + thread_id)``. It reads back through the
``checkpoints`` projection, with the queries that module owns
(``projections.checkpoints``; there is no SQL here): before a read, if the
projection has not applied the thread's newest event yet, it catches the
projections up, so it sees everything it wrote, and ``shep projections
rebuild`` rebuilds what it reads. Checkpoints are stored whole (channel values
inline, as ``SqliteSaver`` does), with small integer channel versions.

Use it with ``durability="sync"`` and flush when the graph returns or raises::

    saver = EventStoreCheckpointSaver(store, db_path)
    graph = builder.compile(checkpointer=saver)
    try:
        graph.invoke(inputs, {"configurable": {"thread_id": run_id.hex}}, durability="sync")
    finally:
        saver.flush()

The package, by job (each module's docstring says its part of the design):

- ``saver``: ``EventStoreCheckpointSaver``, writing (``put``, ``put_writes``,
  ``enqueue``), made of the parts below;
- ``outbox``: the write buffer and the outbox, one transaction per graph step,
  a node's run events atomic with its checkpoint;
- ``reads``: the read connection, the catch-up before a read, ``get_tuple`` and
  ``list``;
- ``threads``: copying a thread or a checkpoint's chain, pruning, deleting;
- ``aio``: the async twins;
- ``state``: the version of a checkpoint's state, and its upcasters.
"""

from __future__ import annotations

from events.versions import CHECKPOINT_STATE_VERSION
from shep.runs.checkpoints.outbox import MAX_ATTEMPTS, OutboxBuilder, thread_stream_id
from shep.runs.checkpoints.saver import EventStoreCheckpointSaver
from shep.runs.checkpoints.state import STATE_UPCASTERS, STATE_VERSION_KEY

__all__ = [
    "CHECKPOINT_STATE_VERSION",
    "MAX_ATTEMPTS",
    "STATE_UPCASTERS",
    "STATE_VERSION_KEY",
    "EventStoreCheckpointSaver",
    "OutboxBuilder",
    "thread_stream_id",
]
