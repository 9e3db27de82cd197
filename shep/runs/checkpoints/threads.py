"""Whole threads: copying a thread (or one checkpoint's chain) to another, pruning, deleting.

Deleting (``delete_thread``, ``prune``, ``delete_for_runs``) appends an event
(``ThreadDeleted``, ``ThreadPruned``, ``RunCheckpointsDeleted``): the log keeps
every checkpoint ever saved, and the projection drops the rows. A copy appends
the source's checkpoints (and writes) again on the target's stream, each
checkpoint saying which thread it was copied from.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from langgraph.checkpoint.base import BaseCheckpointSaver

from events.base import Event, utc_now
from events.checkpoints import (
    ChannelWrite,
    CheckpointSaved,
    RunCheckpointsDeleted,
    ThreadDeleted,
    ThreadPruned,
    WritesSaved,
)
from projections.checkpoints import list_run_threads, list_stream_checkpoints, list_stream_writes
from shep.runs.checkpoints.outbox import Outbox, thread_stream_id
from shep.runs.checkpoints.reads import ProjectionReader

_Events = list[Event]
_Tasks = dict[tuple[str, str], list[ChannelWrite]]


class ThreadCopies(BaseCheckpointSaver[Any]):
    """Copying and pruning threads: copies, forks, prunes and deletes, each appended as events.

    A part of ``EventStoreCheckpointSaver``, which gives it ``outbox`` and ``reader``.
    """

    outbox: Outbox
    reader: ProjectionReader

    def delete_thread(self, thread_id: str) -> None:
        """Drop the thread's checkpoints and writes (by appending ``ThreadDeleted``)."""
        stream = thread_stream_id(str(thread_id))
        if self.reader.has_rows(stream):
            event = _event(ThreadDeleted, stream, thread_id=str(thread_id))
            self.outbox.commit(stream, (event,))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Drop the checkpoints these LangGraph runs made, in every thread, with their writes."""
        if not run_ids:
            return
        self.reader.prepare()
        rows = self.reader.read(list_run_threads, [str(r) for r in run_ids])
        by_stream: dict[str, tuple[str, list[str]]] = {}
        for stream_hex, thread_id, run_id in rows:
            by_stream.setdefault(stream_hex, (thread_id, []))[1].append(run_id)
        for stream_hex, (thread_id, found) in by_stream.items():
            stream = UUID(hex=stream_hex)
            event = _event(RunCheckpointsDeleted, stream, thread_id=thread_id, run_ids=found)
            self.outbox.commit(stream, (event,))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep each namespace's newest checkpoint; ``delete``: drop all."""
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}: use keep_latest or delete")
        kind: type[Event] = ThreadPruned if strategy == "keep_latest" else ThreadDeleted
        for thread_id in thread_ids:
            stream = thread_stream_id(str(thread_id))
            if self.reader.has_rows(stream):
                self.outbox.commit(stream, (_event(kind, stream, thread_id=str(thread_id)),))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Append copies of the source thread's checkpoints and writes to the target thread."""
        source = thread_stream_id(str(source_thread_id))
        target = thread_stream_id(str(target_thread_id))
        self.reader.prepare(source)
        checkpoints = self.reader.read(list_stream_checkpoints, source.hex)
        writes = self.reader.read(list_stream_writes, source.hex)
        if not checkpoints and not writes:
            return
        by_checkpoint: dict[tuple[str, str], _Tasks] = {}
        for ns, cid, task_id, task_path, idx, channel, value_type, value in writes:
            tasks = by_checkpoint.setdefault((ns, cid), {})
            tasks.setdefault((task_id, task_path), []).append(
                ChannelWrite(idx, channel, value_type, value)
            )
        events: _Events = []
        for row in checkpoints:
            events.append(_copied_checkpoint(row, target, target_thread_id, source_thread_id))
            ns, cid = row[0], row[1]
            events.extend(_copied_writes(target, ns, cid, by_checkpoint.pop((ns, cid), {})))
        for (ns, cid), tasks in by_checkpoint.items():
            events.extend(_copied_writes(target, ns, cid, tasks))
        self.outbox.commit(target, events)

    def copy_checkpoint_chain(
        self, source_thread_id: str, target_thread_id: str, checkpoint_id: str
    ) -> int:
        """Copy ``checkpoint_id`` of the source thread and its ancestors (root namespace)
        to the target thread, oldest first, without their pending writes: the target then
        goes on from that checkpoint as if the steps after it had never run (a fork).

        Returns how many checkpoints were copied; 0 when the source has no such checkpoint.
        """
        source = thread_stream_id(str(source_thread_id))
        target = thread_stream_id(str(target_thread_id))
        self.reader.prepare(source)
        rows = {
            cid: row
            for row in self.reader.read(list_stream_checkpoints, source.hex)
            for ns, cid in [(row[0], row[1])]
            if ns == ""
        }
        chain = []
        current: str | None = checkpoint_id
        while current is not None and current in rows:
            chain.append(rows[current])
            current = rows[current][2]
        if not chain:
            return 0
        events: _Events = [
            _copied_checkpoint(row, target, target_thread_id, source_thread_id)
            for row in reversed(chain)
        ]
        self.outbox.commit(target, events)
        return len(chain)


def _event(kind: type[Event], stream: UUID, **fields: Any) -> Event:
    """An event of ``stream``, to be numbered when the outbox appends it."""
    return kind(originator_id=stream, originator_version=0, timestamp=utc_now(), **fields)


def _copied_writes(target: UUID, ns: str, cid: str, tasks: _Tasks) -> _Events:
    """Copies of a checkpoint's writes of another thread, one event per task, for ``target``."""
    now = utc_now()
    return [
        WritesSaved(
            originator_id=target,
            originator_version=0,
            timestamp=now,
            checkpoint_ns=ns,
            checkpoint_id=cid,
            task_id=task_id,
            task_path=task_path,
            writes=items,
        )
        for (task_id, task_path), items in tasks.items()
    ]


def _copied_checkpoint(
    row: Sequence[Any], target: UUID, target_thread_id: str, source_thread_id: str
) -> CheckpointSaved:
    """A copy of a checkpoint row of another thread (``list_stream_checkpoints``) for ``target``."""
    ns, cid, parent, ctype, cbytes, mtype, mbytes, run_id, src, step = row
    return CheckpointSaved(
        originator_id=target,
        originator_version=0,
        timestamp=utc_now(),
        thread_id=str(target_thread_id),
        checkpoint_ns=ns,
        checkpoint_id=cid,
        parent_checkpoint_id=parent,
        checkpoint_type=ctype,
        checkpoint=cbytes,
        metadata_type=mtype,
        metadata=mbytes,
        run_id=run_id,
        source=src,
        step=step,
        copied_from_thread=str(source_thread_id),
    )
