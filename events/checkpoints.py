"""Events of a LangGraph thread's checkpoints, appended to the thread's stream.

A run's workflow uses the run's own stream as its thread (``thread_id`` is
the run id in hex), so a run's history holds its lifecycle events and every
checkpoint of its state, in order. Other threads get a stream of their own
(``uuid5(SHEP_NAMESPACE, "thread:" + thread_id)``).

Checkpoints and channel values are stored as the saver's serializer wrote
them (``serde.dumps_typed``: a type tag and bytes), so this module needs no
LangGraph import; only ``shep.runs.checkpoints`` decodes them.

The log is append-only, so deleting or pruning checkpoints is itself an event:
the ``checkpoints`` projection drops the rows, and a rebuild replays the same
deletions at the same place in the log.
"""

from __future__ import annotations

import msgspec

from events.base import Event


class ChannelWrite(msgspec.Struct, frozen=True, array_like=True):
    """One write of a task to a channel, serialized by the saver.

    ``idx`` is the write's index in the task's list, or LangGraph's negative
    index for a special channel (``__error__`` -1, ``__scheduled__`` -2,
    ``__interrupt__`` -3, ``__resume__`` -4).
    """

    idx: int
    channel: str
    value_type: str
    value: bytes


class CheckpointSaved(Event, frozen=True, kw_only=True):
    """LangGraph saved a checkpoint of the workflow's state (one per graph step).

    ``checkpoint`` holds the whole checkpoint, channel values included;
    ``new_versions`` names the channels this step changed. ``run_id``,
    ``source`` and ``step`` are copied out of the metadata so the projection
    can find and describe a checkpoint without decoding it.
    """

    thread_id: str
    checkpoint_ns: str = ""
    checkpoint_id: str
    parent_checkpoint_id: str | None = None
    checkpoint_type: str
    checkpoint: bytes
    metadata_type: str
    metadata: bytes
    new_versions: dict[str, str | int | float] = {}
    run_id: str | None = None
    source: str | None = None
    step: int | None = None
    copied_from_thread: str | None = None


class WritesSaved(Event, frozen=True, kw_only=True):
    """A task's writes against a checkpoint were saved (pending until the next checkpoint).

    Regular writes keep the first value saved for a (task, idx); writes to a
    special channel (negative idx) replace an earlier one.
    """

    checkpoint_ns: str = ""
    checkpoint_id: str
    task_id: str
    task_path: str = ""
    writes: list[ChannelWrite]


class ThreadDeleted(Event, frozen=True, kw_only=True):
    """Every checkpoint and write of the thread was deleted (the events stay in the log)."""

    thread_id: str


class ThreadPruned(Event, frozen=True, kw_only=True):
    """All but the newest checkpoint of each namespace, and their writes, were deleted."""

    thread_id: str


class RunCheckpointsDeleted(Event, frozen=True, kw_only=True):
    """The thread's checkpoints made by these LangGraph runs, and their writes, were deleted."""

    thread_id: str
    run_ids: list[str]
