"""The saver's own promises: streams, buffering, durability of special writes, the outbox,
version conflicts, and deletion as events."""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID, uuid4, uuid5

import apsw
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT

from commands.create_run import create_run
from commands.record_heartbeat import record_heartbeat
from commands.start_run import start_run
from events.base import SHEP_NAMESPACE, Event, utc_now
from events.checkpoints import CheckpointSaved, ThreadDeleted, ThreadPruned, WritesSaved
from events.runs import NodeCompleted
from events.store import EventStore
from shep.runs.checkpoints import EventStoreCheckpointSaver, thread_stream_id
from tests.shep.runs.checkpoints.graphs import node_completed


@pytest.fixture
def saver(store: EventStore, db_path: Path) -> Iterator[EventStoreCheckpointSaver]:
    with EventStoreCheckpointSaver(store, db_path) as s:
        yield s


def put(
    saver: EventStoreCheckpointSaver, thread_id: str, parent: str | None = None
) -> RunnableConfig:
    config: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    if parent:
        config["configurable"]["checkpoint_id"] = parent
    return saver.put(config, empty_checkpoint(), {"source": "loop", "step": 0}, {})


def new_run(store: EventStore) -> UUID:
    run_id = create_run(
        store, workflow="t", agent_type="demo", repo="/r", node_names=["a"], created_by="me"
    )
    start_run(store, run_id, pid=os.getpid(), host="here")
    return run_id


def test_thread_ids_map_to_streams(store: EventStore, saver: EventStoreCheckpointSaver) -> None:
    """A UUID thread id is that stream (however spelled); any other name gets a uuid5 stream."""
    run_id = uuid4()
    assert thread_stream_id(run_id.hex) == thread_stream_id(str(run_id)) == run_id
    assert thread_stream_id("chat-42") == uuid5(SHEP_NAMESPACE, "thread:chat-42")

    stored = put(saver, run_id.hex)
    assert isinstance(store.load(run_id)[0], CheckpointSaved)
    same = saver.get_tuple({"configurable": {"thread_id": str(run_id)}})
    assert same is not None
    assert same.config["configurable"]["thread_id"] == str(run_id)
    assert same.checkpoint["id"] == stored["configurable"]["checkpoint_id"]

    put(saver, "chat-42")
    assert isinstance(store.load(uuid5(SHEP_NAMESPACE, "thread:chat-42"))[0], CheckpointSaved)


def test_writes_wait_for_the_next_checkpoint(
    store: EventStore, db_path: Path, saver: EventStoreCheckpointSaver
) -> None:
    """put_writes appends nothing; a crash (a new saver) loses them; the next put carries them."""
    first = put(saver, "t")
    position = store.max_position()
    saver.put_writes(first, [("a", 1), ("b", 2)], "task-1", "path")
    assert store.max_position() == position

    with EventStoreCheckpointSaver(store, db_path) as other_process:
        seen = other_process.get_tuple(first)
        assert seen is not None
        assert seen.pending_writes == []

    put(saver, "t", first["configurable"]["checkpoint_id"])
    kinds = [type(e) for e in store.load(thread_stream_id("t"))]
    assert kinds == [CheckpointSaved, WritesSaved, CheckpointSaved]
    tup = saver.get_tuple(first)
    assert tup is not None
    assert tup.pending_writes == [("task-1", "a", 1), ("task-1", "b", 2)]


def test_reads_flush_what_waits(store: EventStore, saver: EventStoreCheckpointSaver) -> None:
    """get_tuple and list see the saver's own buffered writes, by appending them first."""
    first = put(saver, "t")
    saver.put_writes(first, [("a", 1)], "task-1")
    tup = saver.get_tuple(first)
    assert tup is not None
    assert tup.pending_writes == [("task-1", "a", 1)]
    saver.put_writes(first, [("b", 2)], "task-2")
    listed = list(saver.list({"configurable": {"thread_id": "t"}}))
    assert listed[0].pending_writes == [("task-1", "a", 1), ("task-2", "b", 2)]
    assert [type(e) for e in store.load(thread_stream_id("t"))] == [
        CheckpointSaved,
        WritesSaved,
        WritesSaved,
    ]


def test_special_writes_are_appended_at_once(
    store: EventStore, db_path: Path, saver: EventStoreCheckpointSaver
) -> None:
    """An error or interrupt write is durable before put_writes returns, with what waited."""
    first = put(saver, "t")
    saver.put_writes(first, [("a", 1)], "task-1")
    saver.put_writes(first, [(ERROR, "boom")], "task-2")
    with EventStoreCheckpointSaver(store, db_path) as other_process:
        tup = other_process.get_tuple(first)
        assert tup is not None
        assert tup.pending_writes == [("task-1", "a", 1), ("task-2", ERROR, "boom")]


def test_pending_writes_sort_and_special_channels_replace(
    saver: EventStoreCheckpointSaver,
) -> None:
    """Writes come back in writes_sort_key order; a regular write keeps its first value,
    a special one its last."""
    first = put(saver, "t")
    saver.put_writes(first, [("x", "late path")], "task-a", "~2")
    saver.put_writes(first, [("x", 1), ("y", 2)], "task-b", "~1")
    saver.put_writes(first, [("x", "ignored")], "task-b", "~1")
    saver.put_writes(first, [(INTERRUPT, "first")], "task-a", "~2")
    saver.put_writes(first, [(INTERRUPT, "second")], "task-a", "~2")
    tup = saver.get_tuple(first)
    assert tup is not None
    assert tup.pending_writes == [
        ("task-b", "x", 1),
        ("task-b", "y", 2),
        ("task-a", INTERRUPT, "second"),
        ("task-a", "x", "late path"),
    ]


def test_unbuffered_writes_commit_per_task(store: EventStore, db_path: Path) -> None:
    """buffer_writes=False appends each task's writes at once."""
    with EventStoreCheckpointSaver(store, db_path, buffer_writes=False) as saver:
        first = put(saver, "t")
        position = store.max_position()
        saver.put_writes(first, [("a", 1)], "task-1")
        assert store.max_position() == position + 1


def test_outbox_events_join_the_next_checkpoint(
    store: EventStore, saver: EventStoreCheckpointSaver
) -> None:
    """Enqueued run events are numbered at append time and land with the next checkpoint,
    even after a command appended to the same stream (a version conflict, then a retry)."""
    run_id = new_run(store)
    first = put(saver, run_id.hex)
    saver.put_writes(first, [("a", 1)], "task-1")
    saver.enqueue(run_id.hex, node_completed(run_id, "a"))
    record_heartbeat(store, run_id, pid=1, host="here")  # the saver's version is now stale
    position = store.max_position()
    put(saver, run_id.hex, first["configurable"]["checkpoint_id"])

    events = store.load(run_id)
    assert [type(e) for e in events[-3:]] == [NodeCompleted, WritesSaved, CheckpointSaved]
    assert store.max_position() == position + 3
    assert [e.originator_version for e in events] == list(range(1, len(events) + 1))


def test_a_failing_outbox_builder_drops_what_waited(
    store: EventStore, saver: EventStoreCheckpointSaver
) -> None:
    """A builder that misnumbers its events fails the append; the step's writes go with it,
    as in a crash, so no node's writes are ever stored without its outbox events."""
    run_id = new_run(store)
    first = put(saver, run_id.hex)
    position = store.max_position()

    def misnumbered(after: int) -> list[Event]:
        return [
            NodeCompleted(
                originator_id=run_id,
                originator_version=after + 2,
                timestamp=utc_now(),
                node="a",
                duration_ms=1,
            )
        ]

    saver.put_writes(first, [("a", 1)], "task-1")
    saver.enqueue(run_id.hex, misnumbered)
    with pytest.raises(ValueError, match="must be version"):
        put(saver, run_id.hex, first["configurable"]["checkpoint_id"])
    assert store.max_position() == position
    saver.flush()
    assert store.max_position() == position


def test_deleting_appends_events_and_keeps_history(
    store: EventStore, saver: EventStoreCheckpointSaver
) -> None:
    """delete_thread and prune are events; the projection drops rows; the log keeps them all."""
    first = put(saver, "t")
    second = put(saver, "t", first["configurable"]["checkpoint_id"])
    saver.put_writes(first, [("a", 1)], "task-1")
    saver.prune(["t"])
    assert [t.config for t in saver.list({"configurable": {"thread_id": "t"}})] == [second]
    assert saver.get_tuple(first) is None

    saver.delete_thread("t")
    assert saver.get_tuple({"configurable": {"thread_id": "t"}}) is None
    kinds = [type(e) for e in store.load(thread_stream_id("t"))]
    assert kinds == [CheckpointSaved, CheckpointSaved, WritesSaved, ThreadPruned, ThreadDeleted]

    saver.delete_thread("t")  # nothing left: no event
    saver.delete_thread("never-used")
    assert len(store.load(thread_stream_id("t"))) == len(kinds)
    assert store.load(thread_stream_id("never-used")) == []

    third = put(saver, "t")  # the thread lives on
    assert saver.get_tuple({"configurable": {"thread_id": "t"}}) is not None
    assert third["configurable"]["checkpoint_id"] != second["configurable"]["checkpoint_id"]


def test_a_copy_shares_the_outbox(store: EventStore, saver: EventStoreCheckpointSaver) -> None:
    """LangGraph may compile a graph with a copy of the saver (with_allowlist); the runner's
    enqueue/flush on the original still reach the copy's appends."""
    clone = copy.copy(saver)  # what with_allowlist does when the allowlist is strict
    first = put(clone, "t")
    saver.put_writes(first, [("a", 1)], "task-1")
    put(clone, "t", first["configurable"]["checkpoint_id"])
    kinds = [type(e) for e in store.load(thread_stream_id("t"))]
    assert kinds == [CheckpointSaved, WritesSaved, CheckpointSaved]


def test_list_without_a_thread_spans_every_thread(
    store: EventStore, db_path: Path, saver: EventStoreCheckpointSaver
) -> None:
    """list(None) catches up and lists every thread's checkpoints, newest first, each under
    the thread id it was saved with, including those another process wrote."""
    run_id = uuid4()
    first = put(saver, str(run_id))
    with EventStoreCheckpointSaver(store, db_path) as other_process:
        second = put(other_process, "chat-1")
    listed = list(saver.list(None))
    assert [t.config["configurable"]["thread_id"] for t in listed] == ["chat-1", str(run_id)]
    assert [t.checkpoint["id"] for t in listed] == [
        second["configurable"]["checkpoint_id"],
        first["configurable"]["checkpoint_id"],
    ]
    assert [t.config for t in saver.list(None, limit=1)] == [listed[0].config]


# --- the checkpoint state's version ------------------------------------------------------


def test_a_checkpoint_records_its_state_version_and_hands_back_langgraphs_metadata(
    store: EventStore, saver: EventStoreCheckpointSaver
) -> None:
    """Each saved checkpoint's stored metadata carries the state version it was written in;
    what LangGraph gets back (and filters on) is its own metadata, without it."""
    from shep.runs.checkpoints import CHECKPOINT_STATE_VERSION, STATE_VERSION_KEY

    config = put(saver, "versioned")
    (saved,) = store.load(thread_stream_id("versioned"), types=[CheckpointSaved])
    assert isinstance(saved, CheckpointSaved)
    stored = saver.serde.loads_typed((saved.metadata_type, saved.metadata))
    assert stored[STATE_VERSION_KEY] == CHECKPOINT_STATE_VERSION
    found = saver.get_tuple(config)
    assert found is not None
    assert STATE_VERSION_KEY not in found.metadata
    assert found.metadata["source"] == "loop"
    listed = list(saver.list(None, filter={"source": "loop"}))
    assert [t.config["configurable"]["checkpoint_id"] for t in listed] == [
        config["configurable"]["checkpoint_id"]
    ]
    assert STATE_VERSION_KEY not in listed[0].metadata


def test_a_checkpoint_of_a_newer_state_version_is_refused(
    store: EventStore, saver: EventStoreCheckpointSaver
) -> None:
    """A checkpoint a newer shep saved in a newer state version is never resumed from: reading
    it is refused with one line saying so."""
    from events.errors import StoreTooNewError
    from events.versions import SHEP_VERSION
    from shep.runs.checkpoints import STATE_VERSION_KEY

    checkpoint = empty_checkpoint()
    ctype, cbytes = saver.serde.dumps_typed(checkpoint)
    mtype, mbytes = saver.serde.dumps_typed({"source": "loop", "step": 0, STATE_VERSION_KEY: 2})
    stream = thread_stream_id("from-the-future")
    store.append(
        [CheckpointSaved(originator_id=stream, originator_version=1, timestamp=utc_now(),
                         thread_id="from-the-future", checkpoint_id=checkpoint["id"],
                         checkpoint_type=ctype, checkpoint=cbytes, metadata_type=mtype,
                         metadata=mbytes)]
    )  # fmt: skip
    config: RunnableConfig = {"configurable": {"thread_id": "from-the-future"}}
    with pytest.raises(StoreTooNewError) as refused:
        saver.get_tuple(config)
    assert str(refused.value) == (
        f"Checkpoint {checkpoint['id']} holds state of version 2, written by a newer shep; "
        f"this is shep {SHEP_VERSION} (checkpoint state version 1): upgrade shep to resume "
        "from it."
    )
    with pytest.raises(StoreTooNewError):
        list(saver.list(config))


def test_a_checkpoint_of_shep_0_1_0_reads_as_state_version_1(shep_home: Path) -> None:
    """The checkpoints of the demo run in 0.1.0's store (no state version recorded) read as
    version 1: the run's newest checkpoint comes back, with LangGraph's metadata as saved."""
    from tests.events.old_stores import unpack_0_1_0

    db = unpack_0_1_0(shep_home)
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        (run_hex,) = conn.execute(
            "SELECT originator_id FROM stored_events WHERE originator_id LIKE 'd247bdbc%' LIMIT 1"
        ).fetchone()
    finally:
        conn.close()
    with EventStore(db) as old, EventStoreCheckpointSaver(old, db) as reader:
        found = reader.get_tuple({"configurable": {"thread_id": run_hex}})
    assert found is not None
    assert found.metadata["source"] == "loop"
    assert "shep_state_version" not in found.metadata


def test_a_workers_first_read_of_its_run_folds_no_projection(
    store: EventStore, saver: EventStoreCheckpointSaver, db_path: Path
) -> None:
    """A run whose stream holds only run events since the projections' position (created,
    started, a heartbeat: what a worker finds before its graph's first read) is read without
    a catch-up: the projections stay where they were, yet the run's checkpoints are seen."""
    run_id = new_run(store)
    put(saver, run_id.hex)
    assert saver.get_tuple({"configurable": {"thread_id": run_id.hex}}) is not None
    record_heartbeat(store, run_id, pid=os.getpid(), host="here", node="a")
    other = new_run(store)  # unapplied events of another stream
    tracked = "SELECT notification_id FROM tracking WHERE application_name='runs'"
    conn = apsw.Connection(str(db_path))
    try:
        before = conn.execute(tracked).fetchall()
        found = saver.get_tuple({"configurable": {"thread_id": run_id.hex}})
        assert conn.execute(tracked).fetchall() == before
    finally:
        conn.close()
    assert found is not None
    assert saver.get_tuple({"configurable": {"thread_id": other.hex}}) is None
