"""The checkpoints projection: LangGraph checkpoints and pending writes, indexed for the saver.

``shep.runs.checkpoints.EventStoreCheckpointSaver`` reads these tables through the
queries at the end of this module (``get_``/``list_``, ``is_``/``has_``); the
events in the thread streams are the truth. Rows are keyed by the thread's
stream (hex), so a thread id that parses as a UUID and the same UUID spelled
differently are one thread.

Deleting is an event too (``ThreadDeleted``, ``ThreadPruned``,
``RunCheckpointsDeleted``): the handlers drop rows, and a rebuild replays
the same deletions at the same place in the log, so it gives the same tables.
Every handler writes through the cursor at once (never deferred), because
deletions must see the rows saved before them in the same batch.
Every handler changes only the rows of its own event's stream: the saver's reads
rely on it to skip a catch-up for a stream whose checkpoint events are all applied
(``is_stream_current``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import apsw

from events.base import Event, topic_of
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


# -- queries: what the saver reads ------------------------------------------------------

#: How many of a stream's newest events ``is_stream_current`` looks through at most.
CURRENT_LOOKBACK = 256
_HANDLED_TOPICS = frozenset(topic_of(t) for t in CHECKPOINTS.handlers)


class CheckpointRow(NamedTuple):
    """A checkpoint as LangGraph saved it (serialized)."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_checkpoint_id: str | None
    checkpoint_type: str
    checkpoint: bytes
    metadata_type: str
    metadata: bytes


class WriteRow(NamedTuple):
    """A pending write of a checkpoint (serialized value)."""

    task_id: str
    channel: str
    value_type: str
    value: bytes


class MetadataRow(NamedTuple):
    """A checkpoint's key and metadata, without the checkpoint itself."""

    stream: str
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    metadata_type: str
    metadata: bytes


class RunThreadRow(NamedTuple):
    """A thread holding checkpoints a LangGraph run made."""

    stream: str
    thread_id: str
    run_id: str


class StreamCheckpointRow(NamedTuple):
    """A stream's checkpoint with everything its ``CheckpointSaved`` carried."""

    checkpoint_ns: str
    checkpoint_id: str
    parent_checkpoint_id: str | None
    checkpoint_type: str
    checkpoint: bytes
    metadata_type: str
    metadata: bytes
    run_id: str | None
    source: str | None
    step: int | None


class StreamWriteRow(NamedTuple):
    """A stream's pending write with everything its ``WritesSaved`` carried."""

    checkpoint_ns: str
    checkpoint_id: str
    task_id: str
    task_path: str
    idx: int
    channel: str
    value_type: str
    value: bytes


_CHECKPOINT = (
    "SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint_type, "
    "checkpoint, metadata_type, metadata FROM checkpoints "
    "WHERE stream=? AND checkpoint_ns=? AND checkpoint_id=?"
)
_WRITES = (
    "SELECT task_id, channel, value_type, value FROM checkpoint_writes "
    "WHERE stream=? AND checkpoint_ns=? AND checkpoint_id=? ORDER BY task_path, task_id, idx"
)
_NEWEST = (
    "SELECT checkpoint_id FROM checkpoints WHERE stream=? AND checkpoint_ns=? "
    "ORDER BY checkpoint_id DESC LIMIT 1"
)
_TRACKED = "SELECT notification_id FROM tracking WHERE application_name=?"
_STREAM_NEWEST_FIRST = (
    "SELECT notification_id, topic FROM stored_events WHERE originator_id=? "
    "ORDER BY originator_version DESC LIMIT ?"
)
_HAS_ROWS = (
    "SELECT 1 FROM checkpoints WHERE stream=? "
    "UNION ALL SELECT 1 FROM checkpoint_writes WHERE stream=? LIMIT 1"
)
_STREAM_CHECKPOINTS = (
    "SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint_type, "
    "checkpoint, metadata_type, metadata, run_id, source, step FROM checkpoints "
    "WHERE stream=? ORDER BY checkpoint_ns, checkpoint_id"
)
_STREAM_WRITES = (
    "SELECT checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, value_type, "
    "value FROM checkpoint_writes WHERE stream=? "
    "ORDER BY checkpoint_ns, checkpoint_id, task_path, task_id, idx"
)


class ReadSnapshot:
    """``with ReadSnapshot(conn):`` ``BEGIN`` ... ``COMMIT``, so the queries inside read
    one snapshot of the tables.

    Deferred, so it takes no write lock, and committed whatever happens inside
    (it only read). A class rather than a ``contextmanager`` generator: the saver
    enters one per checkpoint it loads, and a class adds a third of the overhead.
    """

    __slots__ = ("conn",)

    def __init__(self, conn: apsw.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> apsw.Connection:
        self.conn.execute("BEGIN")
        return self.conn

    def __exit__(self, *exc_info: object) -> None:
        self.conn.execute("COMMIT")


def is_stream_current(conn: apsw.Connection, stream: str) -> bool:
    """Whether this projection has applied every event of ``stream`` (hex) that it handles.

    Every handler changes only the rows of its event's own stream, so the stream's rows
    are current once its checkpoint events are applied, whatever else came after them:
    a worker's run stream gains run events (started, a heartbeat) before the graph
    reads its checkpoints, and those need no catch-up (which would fold every
    projection up to the end of the log). Looks at the stream's newest events back to
    the projection's position, at most ``CURRENT_LOOKBACK`` of them: past that the
    answer is no, and the caller catches up.
    """
    row = conn.execute(_TRACKED, (CHECKPOINTS.name,)).fetchone()
    applied = 0 if row is None else int(row[0])
    seen = 0
    rows = conn.execute(_STREAM_NEWEST_FIRST, (stream, CURRENT_LOOKBACK))
    try:
        for position, topic in rows:
            if position <= applied:
                return True  # a stream's positions grow with its versions: the rest is applied
            if topic in _HANDLED_TOPICS:
                return False
            seen += 1
    finally:
        rows.close()  # a statement left part read would hold its read transaction open
    return seen < CURRENT_LOOKBACK


def has_stream_rows(conn: apsw.Connection, stream: str) -> bool:
    """Whether ``stream`` (hex) has any checkpoint or pending write."""
    return conn.execute(_HAS_ROWS, (stream, stream)).fetchone() is not None


def get_checkpoint_row(
    conn: apsw.Connection, stream: str, checkpoint_ns: str, checkpoint_id: str
) -> CheckpointRow | None:
    """The checkpoint of ``stream`` (hex) with this namespace and id, if there is one."""
    row = conn.execute(_CHECKPOINT, (stream, checkpoint_ns, checkpoint_id)).fetchone()
    return None if row is None else CheckpointRow._make(row)


def get_newest_checkpoint_id(conn: apsw.Connection, stream: str, checkpoint_ns: str) -> str | None:
    """The id of the newest checkpoint of ``stream`` (hex) in the namespace, if any."""
    row = conn.execute(_NEWEST, (stream, checkpoint_ns)).fetchone()
    return None if row is None else str(row[0])


def list_writes(
    conn: apsw.Connection, stream: str, checkpoint_ns: str, checkpoint_id: str
) -> list[WriteRow]:
    """The checkpoint's pending writes, in task path, task id and index order."""
    return list(map(WriteRow._make, conn.execute(_WRITES, (stream, checkpoint_ns, checkpoint_id))))


def list_checkpoint_metadata(
    conn: apsw.Connection,
    *,
    stream: str | None = None,
    checkpoint_ns: str | None = None,
    checkpoint_id: str | None = None,
    before_id: str | None = None,
    limit: int | None = None,
) -> list[MetadataRow]:
    """Checkpoints' keys and metadata (not the checkpoints), newest id first.

    Each given argument narrows the rows: to one stream (hex), namespace or
    checkpoint id, to ids below ``before_id``, to the first ``limit``.
    """
    clauses: list[str] = []
    params: list[object] = []
    if stream is not None:
        clauses.append("stream=?")
        params.append(stream)
    if checkpoint_ns is not None:
        clauses.append("checkpoint_ns=?")
        params.append(checkpoint_ns)
    if checkpoint_id is not None:
        clauses.append("checkpoint_id=?")
        params.append(checkpoint_id)
    if before_id is not None:
        clauses.append("checkpoint_id<?")
        params.append(before_id)
    sql = "SELECT stream, thread_id, checkpoint_ns, checkpoint_id, metadata_type, metadata "
    sql += "FROM checkpoints"
    if clauses:
        sql += " WHERE " + " AND ".join(clauses)
    sql += " ORDER BY checkpoint_id DESC"
    if limit is not None:
        sql += " LIMIT ?"
        params.append(limit)
    return list(map(MetadataRow._make, conn.execute(sql, tuple(params))))


def list_run_threads(conn: apsw.Connection, run_ids: Sequence[str]) -> list[RunThreadRow]:
    """The threads holding checkpoints these LangGraph runs made, one row per (stream, run)."""
    if not run_ids:
        return []
    marks = ",".join("?" * len(run_ids))
    sql = (
        "SELECT DISTINCT stream, thread_id, run_id FROM checkpoints "
        f"WHERE run_id IN ({marks}) ORDER BY stream, run_id"
    )
    return list(map(RunThreadRow._make, conn.execute(sql, tuple(run_ids))))


def list_stream_checkpoints(conn: apsw.Connection, stream: str) -> list[StreamCheckpointRow]:
    """Every checkpoint of ``stream`` (hex), by namespace and id."""
    return list(map(StreamCheckpointRow._make, conn.execute(_STREAM_CHECKPOINTS, (stream,))))


def list_stream_writes(conn: apsw.Connection, stream: str) -> list[StreamWriteRow]:
    """Every pending write of ``stream`` (hex), by namespace, checkpoint, task path, task, index."""
    return list(map(StreamWriteRow._make, conn.execute(_STREAM_WRITES, (stream,))))
