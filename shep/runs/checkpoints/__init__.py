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

One transaction per graph step
------------------------------
``put_writes`` does not write: a task's writes wait in memory and are appended
together with the next ``put``'s checkpoint in one ``EventStore.append``. With
``durability="sync"`` that is one durable commit per graph step instead of one
per task plus one per checkpoint. Writes are appended at once (with whatever
waits) when they must outlive the step: writes to a special channel
(``__error__``, ``__interrupt__``, ``__resume__``, ``__scheduled__``), and
whatever is still waiting when ``get_tuple``/``list`` read, when ``flush()`` is
called or the saver is closed.

The trade-off: a crash loses the waiting writes of the step in flight, so on
resume LangGraph re-runs that step's tasks, the finished ones included. For a
linear graph this is exactly "the node in flight is re-run". In a step with
parallel tasks, a task that finished while a sibling was still running is
re-run too; pass ``buffer_writes=False`` to commit each task's writes at once
(one more transaction per task) when that matters more than the commits.

The outbox
----------
The runner makes its own run events (``NodeCompleted``, ...) atomic with the
checkpoint that holds the node's result by enqueueing them as the node's last
act (in the node function, or a wrapper around it)::

    saver.enqueue(run_id.hex, lambda after: [
        NodeCompleted(originator_id=run_id, originator_version=after + 1,
                      timestamp=utc_now(), node="scan", duration_ms=1200),
    ])

A node returns before LangGraph saves its writes and the step's checkpoint,
so the events join that step's transaction: after a crash either both are in
the log (the node never runs again) or neither is (it is re-run). Enqueueing
while iterating ``graph.stream(...)`` is too late: a task's result reaches the
consumer after the step's checkpoint was saved.

The builder is called when the saver appends, with the stream's current
version (``after``), and must return events of that stream numbered
``after + 1``, ``after + 2``, ...; they are appended in the order they were
enqueued, ahead of the buffered writes and the checkpoint (or with the next
special write or ``flush()``). On a version conflict the builder is called
again with the new version, so it must be pure (build events, no I/O).
``commands.run_state.next_events`` builds such events with transition checks:
``lambda after: next_events(RunState(run_id, version=after,
status=RunStatus.RUNNING), [(NodeCompleted, {...})])``. If a builder raises,
the error propagates and the stream's waiting events are dropped, as a crash
would drop them, so the log never holds a node's writes without its outbox
events. If the store fails, they stay queued for the next append.

Events appended to the same stream by others (``commands.*`` in this process,
heartbeats, a cancel from another process) make the next append conflict; the
saver then reloads the stream's version and tries again (``MAX_ATTEMPTS``).

Deleting (``delete_thread``, ``prune``, ``delete_for_runs``) appends an event
(``ThreadDeleted``, ``ThreadPruned``, ``RunCheckpointsDeleted``): the log keeps
every checkpoint ever saved, and the projection drops the rows.
"""

from __future__ import annotations

import random
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, Self, TypeVar, cast
from uuid import UUID, uuid5

import apsw
import msgspec
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from commands.run_state import changes_status
from commands.save_checkpoint import save_checkpoint
from events.base import SHEP_NAMESPACE, Event, utc_now
from events.checkpoints import (
    ChannelWrite,
    CheckpointSaved,
    RunCheckpointsDeleted,
    ThreadDeleted,
    ThreadPruned,
    WritesSaved,
)
from events.errors import ConcurrencyError, StoreTooNewError
from events.sqlite_file import store_error
from events.store import EventStore
from events.versions import CHECKPOINT_STATE_VERSION, SHEP_VERSION
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
    list_run_threads,
    list_stream_checkpoints,
    list_stream_writes,
    list_writes,
)
from projections.database import open_database
from projections.mirror import pull_registered

#: Builds the outbox's events for a stream, numbered after the version it is given.
OutboxBuilder = Callable[[int], Sequence[Event]]

#: How many version conflicts one append survives before giving up.
MAX_ATTEMPTS = 20

#: The version of the checkpoint state this saver writes (``CHECKPOINT_STATE_VERSION``,
#: said in ``events.versions`` so that ``shep --version`` names it without importing
#: LangGraph), recorded in each checkpoint's metadata under ``STATE_VERSION_KEY``
#: and taken out again when read (absent: version 1, shep 0.1.0). A newer shep that
#: changes it adds ``STATE_UPCASTERS[N]`` (a version-N checkpoint, in place, to N+1);
#: a checkpoint of a newer version is refused, never resumed from.
STATE_VERSION_KEY = "shep_state_version"
STATE_UPCASTERS: dict[int, Callable[[Checkpoint], None]] = {}

_Events = list[Event]
_MetadataRows = list[MetadataRow]
_P = ParamSpec("_P")
_T = TypeVar("_T")


@lru_cache(maxsize=1024)
def thread_stream_id(thread_id: str) -> UUID:
    """The stream of a LangGraph thread: the UUID it spells, else one derived from it."""
    try:
        return UUID(thread_id)
    except ValueError:
        return uuid5(SHEP_NAMESPACE, "thread:" + thread_id)


@dataclass(frozen=True)
class _Versioned:
    """A checkpoint's metadata as LangGraph gave it, and its state's version."""

    metadata: dict[str, Any]
    version: int


def _state_versioned(stored: Any, checkpoint_id: str) -> _Versioned:
    """The stored metadata without the state version, and the version (refused if newer)."""
    metadata = dict(stored)
    version = metadata.pop(STATE_VERSION_KEY, 1)
    if not isinstance(version, int) or version > CHECKPOINT_STATE_VERSION:
        raise StoreTooNewError(
            f"Checkpoint {checkpoint_id} holds state of version {version}, written by a "
            f"newer shep; this is shep {SHEP_VERSION} (checkpoint state version "
            f"{CHECKPOINT_STATE_VERSION}): upgrade shep to resume from it."
        )
    return _Versioned(metadata, version)


@dataclass
class _Pending:
    """What waits for a stream's next append: outbox builders, then unnumbered events."""

    outbox: list[OutboxBuilder] = field(default_factory=list)
    events: _Events = field(default_factory=list)


@dataclass
class _State:
    """Mutable state, shared with the copies LangGraph makes (``with_allowlist``)."""

    lock: threading.RLock = field(default_factory=threading.RLock)
    read_lock: threading.Lock = field(default_factory=threading.Lock)
    pending: dict[UUID, _Pending] = field(default_factory=dict)
    versions: dict[UUID, int] = field(default_factory=dict)
    #: Per stream, a version at which the run was known to be running and ours.
    owned_at: dict[UUID, int] = field(default_factory=dict)
    conn: apsw.Connection | None = None


class EventStoreCheckpointSaver(BaseCheckpointSaver[Any]):
    """LangGraph checkpoints as events in shep's event store (see the module docstring).

    ``store`` is the event store to append to; ``db_path`` the same database,
    opened again here (read side) for the ``checkpoints`` projection. Safe to
    use from LangGraph's background threads. A worker passes its ``epoch``:
    the thread is then its run, and every append is refused once the run has
    another owner or has ended (see ``commands.save_checkpoint``).
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
        #: A worker's ownership of its run: every append is fenced with it.
        self.epoch = epoch
        self._state = _State()

    # -- the outbox and flushing ---------------------------------------------------------

    def enqueue(self, thread_id: str, build: OutboxBuilder) -> None:
        """Append ``build(after)``'s events with the thread's next append (see the module doc)."""
        stream = thread_stream_id(str(thread_id))
        with self._state.lock:
            self._state.pending.setdefault(stream, _Pending()).outbox.append(build)

    def flush(self, thread_id: str | None = None) -> None:
        """Append whatever waits (outbox, buffered writes) for one thread, or for all."""
        if thread_id is not None:
            self._commit(thread_stream_id(str(thread_id)))
            return
        with self._state.lock:
            streams = list(self._state.pending)
        for stream in streams:
            self._commit(stream)

    def close(self) -> None:
        """Flush, then close the read connection (the event store stays open)."""
        state = self._state
        try:
            self.flush()
        finally:
            with state.read_lock:
                if state.conn is not None:
                    state.conn.close()
                    state.conn = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _commit(self, stream: UUID, tail: Sequence[Event] = ()) -> None:
        """Append the stream's outbox, buffered events and ``tail`` in one transaction.

        Versions are given here, from the stream's current version; a conflict
        reloads it and numbers everything again. If the store fails, the outbox
        and buffered events stay queued (in order) and the error propagates. If
        an outbox builder fails, they are dropped, as a crash would drop them,
        so the log never holds a node's writes without its outbox events.
        """
        state = self._state
        with state.lock:
            pending = state.pending.pop(stream, None) or _Pending()
            if not pending.outbox and not pending.events and not tail:
                return
            for _ in range(MAX_ATTEMPTS):
                version = self._version(stream)
                batch = self._number(stream, version, pending, tail)
                # Right after our own append the run is still ours (the append was
                # compare-and-set on a version where it was): no need to look again.
                known = self.epoch is not None and state.owned_at.get(stream) == version
                try:
                    save_checkpoint(self.store, batch, epoch=None if known else self.epoch)
                except ConcurrencyError:
                    # Someone else appended to the stream (a command, a heartbeat): reload.
                    state.versions.pop(stream, None)
                    continue
                except BaseException:
                    # Nothing else could queue meanwhile: we hold the lock.
                    state.pending[stream] = pending
                    raise
                state.versions[stream] = version + len(batch)
                if not any(changes_status(type(event)) for event in batch):
                    state.owned_at[stream] = version + len(batch)
                return
            state.pending[stream] = pending
            raise ConcurrencyError(
                f"Stream {stream} kept changing while checkpoints were saved "
                f"({MAX_ATTEMPTS} attempts). Try again."
            )

    @staticmethod
    def _number(stream: UUID, version: int, pending: _Pending, tail: Sequence[Event]) -> _Events:
        """The batch: outbox events as built, then the rest numbered on and stamped now."""
        batch: _Events = []
        for build in pending.outbox:
            for event in build(version + len(batch)):
                expected = version + len(batch) + 1
                if event.originator_id != stream or event.originator_version != expected:
                    raise ValueError(
                        f"outbox event {type(event).__name__} must be version {expected} of "
                        f"stream {stream}, not version {event.originator_version} of "
                        f"{event.originator_id}"
                    )
                batch.append(event)
        now = utc_now()
        for event in (*pending.events, *tail):
            batch.append(
                msgspec.structs.replace(
                    event, originator_version=version + len(batch) + 1, timestamp=now
                )
            )
        return batch

    def _version(self, stream: UUID) -> int:
        version = self._state.versions.get(stream)
        if version is None:
            version = self._state.versions[stream] = self.store.stream_version(stream)
        return version

    def _queue(self, stream: UUID, event: Event, *, now: bool) -> None:
        with self._state.lock:
            self._state.pending.setdefault(stream, _Pending()).events.append(event)
        if now:
            self._commit(stream)

    # -- writing -------------------------------------------------------------------------

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
        self._commit(stream, (event,))
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
        self._queue(stream, event, now=special or not self.buffer_writes)

    def delete_thread(self, thread_id: str) -> None:
        """Drop the thread's checkpoints and writes (by appending ``ThreadDeleted``)."""
        stream = thread_stream_id(str(thread_id))
        if self._has_rows(stream):
            self._commit(stream, (self._event(ThreadDeleted, stream, thread_id=str(thread_id)),))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Drop the checkpoints these LangGraph runs made, in every thread, with their writes."""
        if not run_ids:
            return
        self._prepare_read()
        rows = self._read(list_run_threads, [str(r) for r in run_ids])
        by_stream: dict[str, tuple[str, list[str]]] = {}
        for stream_hex, thread_id, run_id in rows:
            by_stream.setdefault(stream_hex, (thread_id, []))[1].append(run_id)
        for stream_hex, (thread_id, found) in by_stream.items():
            stream = UUID(hex=stream_hex)
            event = self._event(RunCheckpointsDeleted, stream, thread_id=thread_id, run_ids=found)
            self._commit(stream, (event,))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep each namespace's newest checkpoint; ``delete``: drop all."""
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}: use keep_latest or delete")
        kind: type[Event] = ThreadPruned if strategy == "keep_latest" else ThreadDeleted
        for thread_id in thread_ids:
            stream = thread_stream_id(str(thread_id))
            if self._has_rows(stream):
                self._commit(stream, (self._event(kind, stream, thread_id=str(thread_id)),))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Append copies of the source thread's checkpoints and writes to the target thread."""
        source = thread_stream_id(str(source_thread_id))
        target = thread_stream_id(str(target_thread_id))
        self._prepare_read(source)
        checkpoints = self._read(list_stream_checkpoints, source.hex)
        writes = self._read(list_stream_writes, source.hex)
        if not checkpoints and not writes:
            return
        by_checkpoint: dict[tuple[str, str], dict[tuple[str, str], list[ChannelWrite]]] = {}
        for ns, cid, task_id, task_path, idx, channel, value_type, value in writes:
            tasks = by_checkpoint.setdefault((ns, cid), {})
            tasks.setdefault((task_id, task_path), []).append(
                ChannelWrite(idx, channel, value_type, value)
            )
        events: _Events = []
        for row in checkpoints:
            events.append(_copied_checkpoint(row, target, target_thread_id, source_thread_id))
            ns, cid = row[0], row[1]
            events.extend(self._copied_writes(target, ns, cid, by_checkpoint.pop((ns, cid), {})))
        for (ns, cid), tasks in by_checkpoint.items():
            events.extend(self._copied_writes(target, ns, cid, tasks))
        self._commit(target, events)

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
        self._prepare_read(source)
        rows = {
            cid: row
            for row in self._read(list_stream_checkpoints, source.hex)
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
        self._commit(target, events)
        return len(chain)

    @staticmethod
    def _copied_writes(
        target: UUID, ns: str, cid: str, tasks: dict[tuple[str, str], list[ChannelWrite]]
    ) -> _Events:
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

    @staticmethod
    def _event(kind: type[Event], stream: UUID, **fields: Any) -> Event:
        return kind(originator_id=stream, originator_version=0, timestamp=utc_now(), **fields)

    # -- reading -------------------------------------------------------------------------

    def _connection(self) -> apsw.Connection:
        if self._state.conn is None:
            self._state.conn = open_database(self.db_path)
        return self._state.conn

    def _prepare_read(self, stream: UUID | None = None) -> None:
        """Append what waits, then bring the projection up to the log.

        For a read of one stream, a projection that already holds that stream's
        newest event is current enough: the catch-up (which applies everything
        to every projection) is left to the next reader that needs it. A copy of
        a shared log is brought up to the server first.
        """
        self.flush()
        with self._state.read_lock:
            conn = self._connection()
            try:
                pull_registered(conn)  # a copy of a shared log; nothing otherwise
                if stream is not None and is_stream_current(conn, stream.hex):
                    return
                catch_up(conn, pull=False)  # pulled just above
            except apsw.Error as e:
                raise store_error(e, self.db_path) from e

    def _read(
        self,
        query: Callable[Concatenate[apsw.Connection, _P], _T],
        *args: _P.args,
        **kwargs: _P.kwargs,
    ) -> _T:
        """``query`` run on the read connection, its driver errors translated."""
        with self._state.read_lock:
            try:
                return query(self._connection(), *args, **kwargs)
            except apsw.Error as e:
                raise store_error(e, self.db_path) from e

    def _has_rows(self, stream: UUID) -> bool:
        self._prepare_read(stream)
        return self._read(has_stream_rows, stream.hex)

    def _load(
        self, stream: str, checkpoint_ns: str, checkpoint_id: str
    ) -> tuple[CheckpointRow, list[WriteRow]] | None:
        """The checkpoint row again (it may be gone since) and its writes, from one snapshot."""
        with self._state.read_lock:
            conn = self._connection()
            try:
                with ReadSnapshot(conn):
                    found = get_checkpoint_row(conn, stream, checkpoint_ns, checkpoint_id)
                    if found is None:
                        return None
                    return found, list_writes(conn, stream, checkpoint_ns, checkpoint_id)
            except apsw.Error as e:
                raise store_error(e, self.db_path) from e

    def _tuple(
        self,
        config: RunnableConfig,
        row: CheckpointRow,
        writes: list[WriteRow],
        metadata: _Versioned | None = None,
    ) -> CheckpointTuple:
        thread_id = config["configurable"]["thread_id"]
        _, ns, checkpoint_id, parent, ctype, cbytes, mtype, mbytes = row
        loads = self.serde.loads_typed
        pending: list[PendingWrite] = [
            (task_id, channel, loads((value_type, value)))
            for task_id, channel, value_type, value in writes
        ]
        if metadata is None:
            metadata = _state_versioned(loads((mtype, mbytes)), checkpoint_id)
        checkpoint = cast(Checkpoint, loads((ctype, cbytes)))
        for version in range(metadata.version, CHECKPOINT_STATE_VERSION):
            STATE_UPCASTERS[version](checkpoint)
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
        self._prepare_read(stream_id)
        if not checkpoint_id:
            checkpoint_id = self._read(get_newest_checkpoint_id, stream, checkpoint_ns)
            if checkpoint_id is None:
                return None
            config = {
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": checkpoint_ns,
                    "checkpoint_id": checkpoint_id,
                }
            }
        loaded = self._load(stream, checkpoint_ns, checkpoint_id)
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
            self._prepare_read()
        else:
            conf = config["configurable"]
            stream = thread_stream_id(str(conf["thread_id"]))
            self._prepare_read(stream)
            stream_hex = stream.hex
            checkpoint_ns = conf.get("checkpoint_ns")
            checkpoint_id = get_checkpoint_id(config) or None
        heads = self._read(
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
            versioned = _state_versioned(self.serde.loads_typed((mtype, mbytes)), checkpoint_id)
            metadata = versioned.metadata
            if filter and not all(metadata.get(k) == v for k, v in filter.items()):
                continue
            shown_thread = config["configurable"]["thread_id"] if config else thread_id
            loaded = self._load(stream, ns, checkpoint_id)
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

    # -- versions ------------------------------------------------------------------------

    def get_next_version(self, current: Any, channel: None) -> Any:
        """Integers (checkpoints are stored whole, so versions need not be unique across
        forks, and small ints keep every checkpoint event small); a thread whose versions
        are ``<counter>.<random>`` strings, as LangGraph's SQL savers write, keeps them."""
        if isinstance(current, str):
            counter = int(current.split(".")[0]) + 1
            return f"{counter:032}.{random.random():016}"  # noqa: S311 (not security)
        return 1 if current is None else int(current) + 1

    # -- async twins: the work is short and local, so they run it in place ----------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.get_tuple(config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        for item in self.list(config, filter=filter, before=before, limit=limit):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self.put(config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self.put_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        self.delete_thread(thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        self.delete_for_runs(run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self.copy_thread(source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self.prune(thread_ids, strategy=strategy)


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
