"""The checkpoints projection's queries, read directly: what the saver reads, and its snapshot."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint

from events.base import utc_now
from events.runs import HeartbeatRecorded
from events.store import EventStore
from projections.catch_up import catch_up
from projections.checkpoints import (
    CURRENT_LOOKBACK,
    ReadSnapshot,
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
from shep.runs.checkpoints import EventStoreCheckpointSaver, thread_stream_id

THREAD = "chat-1"
STREAM = thread_stream_id(THREAD).hex


@pytest.fixture
def saver(store: EventStore, db_path: Path) -> Iterator[EventStoreCheckpointSaver]:
    with EventStoreCheckpointSaver(store, db_path) as s:
        yield s


@pytest.fixture
def conn(db_path: Path) -> Iterator[apsw.Connection]:
    c = open_database(db_path)
    yield c
    c.close()


def save_two(saver: EventStoreCheckpointSaver) -> tuple[str, str]:
    """Two checkpoints of THREAD, the second with two tasks' writes; returns their ids."""
    ids = []
    config: RunnableConfig = {"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}}
    for step in range(2):
        checkpoint = empty_checkpoint()
        config = saver.put(config, checkpoint, {"source": "loop", "step": step, "run_id": "r1"}, {})
        ids.append(checkpoint["id"])
    saver.put_writes(config, [("b", 2), ("a", 1)], "task-2")
    saver.put_writes(config, [("c", 3)], "task-1")
    saver.flush()
    return ids[0], ids[1]


def test_stream_is_current_once_caught_up(
    saver: EventStoreCheckpointSaver, conn: apsw.Connection
) -> None:
    """A stream is current when the projection has applied its newest event, or has none."""
    assert is_stream_current(conn, STREAM)
    save_two(saver)
    assert not is_stream_current(conn, STREAM)
    assert not has_stream_rows(conn, STREAM)
    catch_up(conn)
    assert is_stream_current(conn, STREAM)
    assert has_stream_rows(conn, STREAM)


def heartbeats(store: EventStore, count: int) -> None:
    """Append ``count`` run events (none the projection handles) to THREAD's stream."""
    stream = thread_stream_id(THREAD)
    after = store.stream_version(stream)
    store.append(
        [
            HeartbeatRecorded(
                originator_id=stream,
                originator_version=after + i,
                timestamp=utc_now(),
                pid=1,
                host="h",
                node="n",
            )
            for i in range(1, count + 1)
        ]
    )


def test_stream_stays_current_through_events_the_projection_ignores(
    saver: EventStoreCheckpointSaver, store: EventStore, conn: apsw.Connection
) -> None:
    """Run events after the stream's applied checkpoints leave it current (no catch-up is
    needed to read it); a checkpoint after them, or one hidden behind more of them than
    the look-back, does not."""
    save_two(saver)
    catch_up(conn)
    heartbeats(store, 3)
    assert is_stream_current(conn, STREAM)
    save_two(saver)
    assert not is_stream_current(conn, STREAM)
    heartbeats(store, CURRENT_LOOKBACK + 1)
    assert not is_stream_current(conn, STREAM)
    catch_up(conn)
    assert is_stream_current(conn, STREAM)


def test_a_stream_of_run_events_only_is_current(store: EventStore, conn: apsw.Connection) -> None:
    """A run's stream with no checkpoint yet (a worker's first read) needs no catch-up."""
    heartbeats(store, 2)
    assert is_stream_current(conn, STREAM)


def test_queries_read_what_the_saver_wrote(
    saver: EventStoreCheckpointSaver, conn: apsw.Connection
) -> None:
    """Rows come back typed, keyed by stream hex, in the orders LangGraph expects."""
    first, second = save_two(saver)
    catch_up(conn)
    assert get_newest_checkpoint_id(conn, STREAM, "") == second
    assert get_newest_checkpoint_id(conn, STREAM, "other") is None
    row = get_checkpoint_row(conn, STREAM, "", second)
    assert row is not None
    assert (row.thread_id, row.parent_checkpoint_id) == (THREAD, first)
    assert get_checkpoint_row(conn, STREAM, "", "missing") is None
    writes = list_writes(conn, STREAM, "", second)
    assert [(w.task_id, w.channel) for w in writes] == [
        ("task-1", "c"),
        ("task-2", "b"),
        ("task-2", "a"),
    ]
    heads = list_checkpoint_metadata(conn, stream=STREAM)
    assert [h.checkpoint_id for h in heads] == [second, first]
    assert [h.checkpoint_id for h in list_checkpoint_metadata(conn, before_id=second)] == [first]
    assert [h.checkpoint_id for h in list_checkpoint_metadata(conn, limit=1)] == [second]
    assert list_checkpoint_metadata(conn, stream=STREAM, checkpoint_ns="other") == []
    assert [(r.stream, r.thread_id) for r in list_run_threads(conn, ["r1", "r2"])] == [
        (STREAM, THREAD)
    ]
    assert list_run_threads(conn, []) == []
    assert [c.step for c in list_stream_checkpoints(conn, STREAM)] == [0, 1]
    assert [(w.task_id, w.idx) for w in list_stream_writes(conn, STREAM)] == [
        ("task-1", 0),
        ("task-2", 0),
        ("task-2", 1),
    ]


def test_read_snapshot_holds_one_state(
    saver: EventStoreCheckpointSaver, conn: apsw.Connection, db_path: Path
) -> None:
    """Inside ``ReadSnapshot`` a deletion caught up elsewhere is not seen; after it, it is."""
    _, second = save_two(saver)
    catch_up(conn)
    other = open_database(db_path)
    try:
        with ReadSnapshot(conn):
            assert get_checkpoint_row(conn, STREAM, "", second) is not None
            saver.delete_thread(THREAD)
            catch_up(other)
            assert len(list_writes(conn, STREAM, "", second)) == 3
        assert list_writes(conn, STREAM, "", second) == []
    finally:
        other.close()
