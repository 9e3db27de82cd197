"""Reading checkpoints back through the ``checkpoints`` projection.

The queries are the projection's (``projections.checkpoints``; there is no SQL
here). Before a read, whatever waits in the outbox is appended and, if the
projection has not applied the thread's newest event yet, the projections are
caught up, so a saver sees everything it wrote, and ``shep projections
rebuild`` rebuilds what it reads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar, cast
from uuid import UUID

import apsw
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    get_checkpoint_id,
)

from events.sqlite_file import store_error
from projections.catch_up import catch_up
from projections.checkpoints import (
    CheckpointRow,
    MetadataRow,
    ReadSnapshot,
    WriteRow,
    get_checkpoint_row,
    get_newest_checkpoint_id,
    has_stream_rows,
    is_stream_current,
    list_checkpoint_metadata,
    list_writes,
)
from projections.database import open_database
from projections.mirror import pull_registered
from shep.runs.checkpoints.outbox import Outbox, thread_stream_id
from shep.runs.checkpoints.state import Versioned, state_versioned, upcast_state

_MetadataRows = list[MetadataRow]
_P = ParamSpec("_P")
_T = TypeVar("_T")


class ProjectionReader:
    """The read connection to the ``checkpoints`` projection, brought up to the log on demand.

    ``db_path`` is the event store's database, opened again here (read side).
    Each read runs under one lock, with driver errors translated into the
    store's. LangGraph's copies of a saver share one reader.
    """

    def __init__(self, db_path: str | Path, outbox: Outbox) -> None:
        self.db_path = Path(db_path)
        self.outbox = outbox
        self._lock = threading.Lock()
        self._conn: apsw.Connection | None = None

    def _connection(self) -> apsw.Connection:
        if self._conn is None:
            self._conn = open_database(self.db_path)
        return self._conn

    def prepare(self, stream: UUID | None = None) -> None:
        """Append what waits, then bring the projection up to the log.

        For a read of one stream, a projection that already holds that stream's
        newest event is current enough: the catch-up (which applies everything
        to every projection) is left to the next reader that needs it. A copy of
        a shared log is brought up to the server first.
        """
        self.outbox.flush()
        with self._lock:
            conn = self._connection()
            try:
                pull_registered(conn)  # a copy of a shared log; nothing otherwise
                if stream is not None and is_stream_current(conn, stream.hex):
                    return
                catch_up(conn, pull=False)  # pulled just above
            except apsw.Error as e:
                raise store_error(e, self.db_path) from e

    def read(
        self,
        query: Callable[Concatenate[apsw.Connection, _P], _T],
        *args: _P.args,
        **kwargs: _P.kwargs,
    ) -> _T:
        """``query`` run on the read connection, its driver errors translated."""
        with self._lock:
            try:
                return query(self._connection(), *args, **kwargs)
            except apsw.Error as e:
                raise store_error(e, self.db_path) from e

    def has_rows(self, stream: UUID) -> bool:
        """Whether the projection holds any checkpoint or write of the stream."""
        self.prepare(stream)
        return self.read(has_stream_rows, stream.hex)

    def load(
        self, stream: str, checkpoint_ns: str, checkpoint_id: str
    ) -> tuple[CheckpointRow, list[WriteRow]] | None:
        """The checkpoint row again (it may be gone since) and its writes, from one snapshot."""
        with self._lock:
            conn = self._connection()
            try:
                with ReadSnapshot(conn):
                    found = get_checkpoint_row(conn, stream, checkpoint_ns, checkpoint_id)
                    if found is None:
                        return None
                    return found, list_writes(conn, stream, checkpoint_ns, checkpoint_id)
            except apsw.Error as e:
                raise store_error(e, self.db_path) from e

    def close(self) -> None:
        """Close the read connection (opened again by the next read)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


class CheckpointReads(BaseCheckpointSaver[Any]):
    """LangGraph's reads (``get_tuple``, ``list``): checkpoint tuples from the projection.

    A part of ``EventStoreCheckpointSaver``, which gives it ``reader``.
    """

    reader: ProjectionReader

    def _tuple(
        self,
        config: RunnableConfig,
        row: CheckpointRow,
        writes: list[WriteRow],
        metadata: Versioned | None = None,
    ) -> CheckpointTuple:
        thread_id = config["configurable"]["thread_id"]
        _, ns, checkpoint_id, parent, ctype, cbytes, mtype, mbytes = row
        loads = self.serde.loads_typed
        pending: list[PendingWrite] = [
            (task_id, channel, loads((value_type, value)))
            for task_id, channel, value_type, value in writes
        ]
        if metadata is None:
            metadata = state_versioned(loads((mtype, mbytes)), checkpoint_id)
        checkpoint = cast(Checkpoint, loads((ctype, cbytes)))
        upcast_state(checkpoint, metadata.version)
        return CheckpointTuple(
            config=config,
            checkpoint=checkpoint,
            metadata=cast(CheckpointMetadata, metadata.metadata),
            parent_config=(
                {
                    "configurable": {
                        "thread_id": thread_id,
                        "checkpoint_ns": ns,
                        "checkpoint_id": parent,
                    }
                }
                if parent
                else None
            ),
            pending_writes=pending,
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names, or the thread's newest in its namespace."""
        conf = config["configurable"]
        thread_id = conf["thread_id"]
        checkpoint_ns = str(conf.get("checkpoint_ns", ""))
        stream_id = thread_stream_id(str(thread_id))
        stream = stream_id.hex
        checkpoint_id = get_checkpoint_id(config)
        self.reader.prepare(stream_id)
        if not checkpoint_id:
            checkpoint_id = self.reader.read(get_newest_checkpoint_id, stream, checkpoint_ns)
            if checkpoint_id is None:
                return None
            config = {
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": checkpoint_ns,
                    "checkpoint_id": checkpoint_id,
                }
            }
        loaded = self.reader.load(stream, checkpoint_ns, checkpoint_id)
        if loaded is None:
            return None
        return self._tuple(config, *loaded)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Matching checkpoints, newest first; ``filter`` matches metadata values exactly."""
        stream_hex: str | None = None
        checkpoint_ns: str | None = None
        checkpoint_id: str | None = None
        before_id = get_checkpoint_id(before) if before is not None else None
        if config is None:
            self.reader.prepare()
        else:
            conf = config["configurable"]
            stream = thread_stream_id(str(conf["thread_id"]))
            self.reader.prepare(stream)
            stream_hex = stream.hex
            checkpoint_ns = conf.get("checkpoint_ns")
            checkpoint_id = get_checkpoint_id(config) or None
        heads = self.reader.read(
            list_checkpoint_metadata,
            stream=stream_hex,
            checkpoint_ns=checkpoint_ns,
            checkpoint_id=checkpoint_id,
            before_id=before_id or None,
            # A filter is matched here, after the query: the limit counts matches.
            limit=None if filter else limit,
        )
        return self._iter_list(config, heads, filter, limit)

    def _iter_list(
        self,
        config: RunnableConfig | None,
        heads: _MetadataRows,
        filter: dict[str, Any] | None,
        limit: int | None,
    ) -> Iterator[CheckpointTuple]:
        remaining = limit
        for stream, thread_id, ns, checkpoint_id, mtype, mbytes in heads:
            if remaining is not None and remaining <= 0:
                return
            versioned = state_versioned(self.serde.loads_typed((mtype, mbytes)), checkpoint_id)
            metadata = versioned.metadata
            if filter and not all(metadata.get(k) == v for k, v in filter.items()):
                continue
            shown_thread = config["configurable"]["thread_id"] if config else thread_id
            loaded = self.reader.load(stream, ns, checkpoint_id)
            if loaded is None:
                continue
            if remaining is not None:
                remaining -= 1
            tuple_config: RunnableConfig = {
                "configurable": {
                    "thread_id": shown_thread,
                    "checkpoint_ns": ns,
                    "checkpoint_id": checkpoint_id,
                }
            }
            yield self._tuple(tuple_config, loaded[0], loaded[1], versioned)
