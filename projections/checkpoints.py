"""The checkpoints projection: LangGraph checkpoints and pending writes, indexed for the saver.

``shep.checkpointer.EventStoreCheckpointSaver`` reads these tables; the events
in the thread streams are the truth. Rows are keyed by the thread's stream
(hex), so a thread id that parses as a UUID and the same UUID spelled
differently are one thread.

Deleting is an event too (``ThreadDeleted``, ``ThreadPruned``,
``RunCheckpointsDeleted``): the handlers drop rows, and a rebuild replays
the same deletions at the same place in the log, so it gives the same tables.
Every handler writes through the cursor at once (never deferred), because
deletions must see the rows saved before them in the same batch.
"""

from __future__ import annotations

from events.base import Event
from events.checkpoints import (
    CheckpointSaved,
    RunCheckpointsDeleted,
    ThreadDeleted,
    ThreadPruned,
    WritesSaved,
)
from projections.base import Batch, Projection

DDL = (
    "CREATE TABLE IF NOT EXISTS checkpoints ("
    "stream TEXT NOT NULL, checkpoint_ns TEXT NOT NULL, checkpoint_id TEXT NOT NULL, "
    "thread_id TEXT NOT NULL, parent_checkpoint_id TEXT, run_id TEXT, source TEXT, "
    "step INTEGER, checkpoint_type TEXT NOT NULL, checkpoint BLOB NOT NULL, "
    "metadata_type TEXT NOT NULL, metadata BLOB NOT NULL, saved_at TEXT NOT NULL, "
    "position INTEGER NOT NULL, "
    "PRIMARY KEY (stream, checkpoint_ns, checkpoint_id))",
    "CREATE INDEX IF NOT EXISTS checkpoints_run ON checkpoints (run_id) WHERE run_id IS NOT NULL",
    "CREATE TABLE IF NOT EXISTS checkpoint_writes ("
    "stream TEXT NOT NULL, checkpoint_ns TEXT NOT NULL, checkpoint_id TEXT NOT NULL, "
    "task_id TEXT NOT NULL, idx INTEGER NOT NULL, task_path TEXT NOT NULL, "
    "channel TEXT NOT NULL, value_type TEXT NOT NULL, value BLOB NOT NULL, "
    "position INTEGER NOT NULL, "
    "PRIMARY KEY (stream, checkpoint_ns, checkpoint_id, task_id, idx))",
)

_COLUMNS = (
    "(stream, checkpoint_ns, checkpoint_id, task_id, idx, task_path, channel, value_type, "
    "value, position) VALUES (?,?,?,?,?,?,?,?,?,?)"
)
# LangGraph's rule: a regular write keeps the first value saved for its (task, idx);
# a special channel (negative idx: error, interrupt, resume, scheduled) is replaced.
_KEEP_FIRST = "INSERT OR IGNORE INTO checkpoint_writes " + _COLUMNS
_REPLACE = "INSERT OR REPLACE INTO checkpoint_writes " + _COLUMNS


def _delete_checkpoints(b: Batch, where: str, params: tuple[object, ...]) -> None:
    """Delete the stream's checkpoints matching ``where``, and their writes first."""
    b.cursor.execute(
        "DELETE FROM checkpoint_writes WHERE stream=? AND (checkpoint_ns, checkpoint_id) IN "
        f"(SELECT checkpoint_ns, checkpoint_id FROM checkpoints WHERE stream=? AND {where})",
        (b.stream, b.stream, *params),
    )
    b.cursor.execute(f"DELETE FROM checkpoints WHERE stream=? AND {where}", (b.stream, *params))


def _saved(b: Batch, event: Event) -> None:
    assert isinstance(event, CheckpointSaved)
    # A checkpoint saved again under the same id replaces the earlier one (as LangGraph's
    # own savers do); its writes stay.
    b.cursor.execute(
        "INSERT OR REPLACE INTO checkpoints VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (
            b.stream,
            event.checkpoint_ns,
            event.checkpoint_id,
            event.thread_id,
            event.parent_checkpoint_id,
            event.run_id,
            event.source,
            event.step,
            event.checkpoint_type,
            event.checkpoint,
            event.metadata_type,
            event.metadata,
            b.at,
            b.position,
        ),
    )


def _writes(b: Batch, event: Event) -> None:
    assert isinstance(event, WritesSaved)
    # In order, one by one: a batch may repeat a (task, idx) and the later one must win
    # or lose exactly as it did when it was saved.
    for w in event.writes:
        b.cursor.execute(
            _REPLACE if w.idx < 0 else _KEEP_FIRST,
            (
                b.stream,
                event.checkpoint_ns,
                event.checkpoint_id,
                event.task_id,
                w.idx,
                event.task_path,
                w.channel,
                w.value_type,
                w.value,
                b.position,
            ),
        )


def _thread_deleted(b: Batch, event: Event) -> None:
    assert isinstance(event, ThreadDeleted)
    b.cursor.execute("DELETE FROM checkpoints WHERE stream=?", (b.stream,))
    b.cursor.execute("DELETE FROM checkpoint_writes WHERE stream=?", (b.stream,))


def _thread_pruned(b: Batch, event: Event) -> None:
    assert isinstance(event, ThreadPruned)
    _delete_checkpoints(
        b,
        "checkpoint_id < (SELECT max(c.checkpoint_id) FROM checkpoints c "
        "WHERE c.stream=checkpoints.stream AND c.checkpoint_ns=checkpoints.checkpoint_ns)",
        (),
    )


def _runs_deleted(b: Batch, event: Event) -> None:
    assert isinstance(event, RunCheckpointsDeleted)
    if not event.run_ids:
        return
    marks = ",".join("?" * len(event.run_ids))
    _delete_checkpoints(b, f"run_id IN ({marks})", tuple(event.run_ids))


CHECKPOINTS = Projection(
    name="checkpoints",
    ddl=DDL,
    tables=("checkpoints", "checkpoint_writes"),
    handlers={
        CheckpointSaved: _saved,
        WritesSaved: _writes,
        ThreadDeleted: _thread_deleted,
        ThreadPruned: _thread_pruned,
        RunCheckpointsDeleted: _runs_deleted,
    },
)
