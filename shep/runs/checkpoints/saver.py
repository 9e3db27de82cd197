"""``EventStoreCheckpointSaver``: LangGraph's saver, made of the checkpointer's parts.

Writing (``put``, ``put_writes``, ``enqueue``) is this module's; the parts it
composes are the outbox (``outbox.Outbox``, the write buffer and the append),
the read side (``reads.ProjectionReader`` and the ``reads.CheckpointReads``
methods), whole threads (``threads.ThreadCopies``) and the async twins
(``aio.AsyncTwins``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from events.base import utc_now
from events.checkpoints import ChannelWrite, CheckpointSaved, WritesSaved
from events.store import EventStore
from events.versions import CHECKPOINT_STATE_VERSION
from shep.runs.checkpoints.aio import AsyncTwins
from shep.runs.checkpoints.outbox import Outbox, OutboxBuilder, thread_stream_id
from shep.runs.checkpoints.reads import CheckpointReads, ProjectionReader
from shep.runs.checkpoints.state import STATE_VERSION_KEY
from shep.runs.checkpoints.threads import ThreadCopies


class EventStoreCheckpointSaver(CheckpointReads, ThreadCopies, AsyncTwins):
    """Writing LangGraph checkpoints and writes as events (see ``shep.runs.checkpoints``).

    ``store`` is the event store to append to; ``db_path`` the same database,
    opened again (read side) for the ``checkpoints`` projection. Safe to use
    from LangGraph's background threads. A worker passes its ``epoch``: the
    thread is then its run, and every append is refused once the run has
    another owner or has ended (see ``commands.save_checkpoint``).

    Reads, whole threads and the async twins are its bases' (one job each);
    the outbox and the reader are parts it holds, shared with the copies
    LangGraph makes (``with_allowlist`` copies the saver, not its parts).
    """

    def __init__(
        self,
        store: EventStore,
        db_path: str | Path,
        *,
        serde: SerializerProtocol | None = None,
        buffer_writes: bool = True,
        epoch: int | None = None,
    ) -> None:
        super().__init__(serde=serde)
        self.store = store
        self.db_path = Path(db_path)
        self.buffer_writes = buffer_writes
        self.outbox = Outbox(store, epoch=epoch)
        self.reader = ProjectionReader(self.db_path, self.outbox)

    @property
    def epoch(self) -> int | None:
        """A worker's ownership of its run: every append is fenced with it."""
        return self.outbox.epoch

    def enqueue(self, thread_id: str, build: OutboxBuilder) -> None:
        """Append ``build(after)``'s events with the thread's next append (see
        ``shep.runs.checkpoints.outbox``)."""
        self.outbox.enqueue(thread_stream_id(str(thread_id)), build)

    def flush(self, thread_id: str | None = None) -> None:
        """Append whatever waits (outbox, buffered writes) for one thread, or for all."""
        self.outbox.flush(None if thread_id is None else thread_stream_id(str(thread_id)))

    def close(self) -> None:
        """Flush, then close the read connection (the event store stays open)."""
        try:
            self.flush()
        finally:
            self.reader.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Append the checkpoint, with the writes and outbox waiting for its thread."""
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        checkpoint_ns = str(conf.get("checkpoint_ns", ""))
        stream = thread_stream_id(thread_id)
        full_metadata = get_checkpoint_metadata(config, metadata)
        checkpoint_type, checkpoint_bytes = self.serde.dumps_typed(checkpoint)
        metadata_type, metadata_bytes = self.serde.dumps_typed(
            {**full_metadata, STATE_VERSION_KEY: CHECKPOINT_STATE_VERSION}
        )
        run_id = full_metadata.get("run_id")
        source = full_metadata.get("source")
        step = full_metadata.get("step")
        event = CheckpointSaved(
            originator_id=stream,
            originator_version=0,
            timestamp=utc_now(),
            thread_id=thread_id,
            checkpoint_ns=checkpoint_ns,
            checkpoint_id=checkpoint["id"],
            parent_checkpoint_id=conf.get("checkpoint_id"),
            checkpoint_type=checkpoint_type,
            checkpoint=checkpoint_bytes,
            metadata_type=metadata_type,
            metadata=metadata_bytes,
            new_versions=dict(new_versions),
            run_id=None if run_id is None else str(run_id),
            source=source if isinstance(source, str) else None,
            step=step if isinstance(step, int) and not isinstance(step, bool) else None,
        )
        self.outbox.commit(stream, (event,))
        return {
            "configurable": {
                "thread_id": conf["thread_id"],
                "checkpoint_ns": checkpoint_ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Buffer a task's writes for the next checkpoint; special channels are appended at once."""
        if not writes:
            return
        conf = config["configurable"]
        stream = thread_stream_id(str(conf["thread_id"]))
        dumps = self.serde.dumps_typed
        items = [
            ChannelWrite(WRITES_IDX_MAP.get(channel, idx), channel, *dumps(value))
            for idx, (channel, value) in enumerate(writes)
        ]
        event = WritesSaved(
            originator_id=stream,
            originator_version=0,
            timestamp=utc_now(),
            checkpoint_ns=str(conf.get("checkpoint_ns", "")),
            checkpoint_id=str(conf["checkpoint_id"]),
            task_id=task_id,
            task_path=task_path,
            writes=items,
        )
        special = any(channel in WRITES_IDX_MAP for channel, _ in writes)
        self.outbox.queue(stream, event, now=special or not self.buffer_writes)

    def get_next_version(self, current: Any, channel: None) -> Any:
        """Integers (checkpoints are stored whole, so versions need not be unique across
        forks, and small ints keep every checkpoint event small); a thread whose versions
        are ``<counter>.<random>`` strings, as LangGraph's SQL savers write, keeps them."""
        if isinstance(current, str):
            counter = int(current.split(".")[0]) + 1
            return f"{counter:032}.{random.random():016}"  # noqa: S311 (not security)
        return 1 if current is None else int(current) + 1
