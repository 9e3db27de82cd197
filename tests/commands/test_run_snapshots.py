"""A run's fold starts from a snapshot, and is always the fold of its whole stream.

``load_run`` folds a long run from its newest snapshot (this process's, or the
one stored with the stream) instead of from its first event. These tests pin
that the result is exactly the fold of every event, whatever the history and
wherever the snapshots fall; that the log stays the truth (a damaged or missing
snapshot only costs a longer fold); and that optimistic concurrency still
refuses a writer whose fold is stale.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import apsw
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import events.store
from commands.mark_interrupted import mark_interrupted
from commands.record_agent_output import OutputItem, record_agent_output
from commands.record_heartbeat import record_heartbeat
from commands.record_node import record_node_started
from commands.resume_run import resume_run
from commands.run_state import SNAPSHOT_TOPIC, RunState, fold, load_run, next_events
from events.base import Event, utc_now
from events.errors import ConcurrencyError, WorkerFencedError
from events.runs import (
    AgentOutputRecorded,
    HeartbeatRecorded,
    NodeCompleted,
    NodeFailed,
    NodeStarted,
    RunCancelled,
    RunCompleted,
    RunCreated,
    RunFailed,
    RunInterrupted,
    RunResumed,
    RunStarted,
    RunStatus,
    RunSuspended,
)
from events.store import EventStore
from tests.commands.test_fencing import _run

NODES = ("a", "b", "c")

#: One event of a run's stream, by kind: the fields it needs besides its place in the stream.
KINDS: dict[str, tuple[type[Event], Any]] = {
    "started": (RunStarted, st.builds(dict, pid=st.integers(1, 9), host=st.just("h"))),
    "resumed": (
        RunResumed,
        st.builds(dict, pid=st.integers(1, 9), host=st.just("h"), epoch=st.integers(0, 5)),
    ),
    "node_started": (NodeStarted, st.builds(dict, node=st.sampled_from(NODES))),
    "node_completed": (
        NodeCompleted,
        st.builds(dict, node=st.sampled_from(NODES), duration_ms=st.just(1)),
    ),
    "node_failed": (
        NodeFailed,
        st.builds(
            dict,
            node=st.sampled_from(NODES),
            duration_ms=st.just(1),
            error_type=st.just("E"),
            message=st.just("m"),
        ),
    ),
    "suspended": (
        RunSuspended,
        st.builds(dict, item_ids=st.lists(st.uuids(), max_size=2), approval=st.booleans()),
    ),
    "interrupted": (RunInterrupted, st.builds(dict, reason=st.just("gone"))),
    "cancelled": (RunCancelled, st.builds(dict, cancelled_by=st.just("me"))),
    "completed": (RunCompleted, st.builds(dict, duration_ms=st.just(1))),
    "failed": (RunFailed, st.builds(dict, error_type=st.just("E"), message=st.just("m"))),
    "output": (AgentOutputRecorded, st.builds(dict, node=st.just("a"), kind=st.just("text"))),
    "heartbeat": (HeartbeatRecorded, st.builds(dict, pid=st.just(1), host=st.just("h"))),
}

#: A history: batches of events appended in turn, each optionally followed by a load.
steps = st.lists(
    st.tuples(
        st.lists(
            st.sampled_from(sorted(KINDS)).flatmap(
                lambda kind: st.tuples(st.just(KINDS[kind][0]), KINDS[kind][1])
            ),
            min_size=1,
            max_size=6,
        ),
        st.booleans(),
    ),
    max_size=25,
)


def _created(run_id: UUID) -> RunCreated:
    return RunCreated(
        originator_id=run_id,
        originator_version=1,
        timestamp=utc_now(),
        workflow="wf",
        agent_type="demo",
        repo="/r",
        node_names=list(NODES),
        created_by="me",
    )


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(history=steps, interval=st.integers(1, 6))
def test_a_fold_from_snapshots_equals_the_fold_of_the_whole_stream(
    history: list[tuple[list[tuple[type[Event], dict[str, Any]]], bool]],
    interval: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whatever the events and wherever snapshots fall (kept in memory, stored with an
    append every ``interval`` versions), ``load_run`` equals ``fold`` over every event, in
    the process that made the snapshots and in a new one that finds only the stored ones.
    """
    monkeypatch.setattr(events.store, "SNAPSHOT_INTERVAL", interval)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "shep.db"
        run_id = uuid4()
        # Durability is not what this test is about: no syncs keep its examples quick.
        with EventStore(path, synchronous="OFF") as store:
            store.append([_created(run_id)])
            version = 1
            for batch, load in history:
                appended = []
                for cls, fields in batch:
                    version += 1
                    appended.append(
                        cls(
                            originator_id=run_id,
                            originator_version=version,
                            timestamp=utc_now(),
                            **fields,
                        )
                    )
                store.append(appended)
                if load:
                    assert load_run(store, run_id) == fold(run_id, store.load(run_id))
            whole = fold(run_id, store.load(run_id))
            assert whole is not None
            assert whole.version == version
            assert load_run(store, run_id) == whole
        with EventStore(path, synchronous="OFF") as fresh:
            assert load_run(fresh, run_id) == whole


def _stored_snapshot(path: Path, run_id: UUID) -> tuple[int, str] | None:
    conn = apsw.Connection(str(path))
    try:
        row = conn.execute(
            "SELECT originator_version, topic FROM snapshots WHERE originator_id=?",
            (run_id.hex,),
        ).fetchone()
    except apsw.SQLError:
        row = None
    conn.close()
    return None if row is None else (int(row[0]), str(row[1]))


def _long_run(store: EventStore, lines: int) -> UUID:
    """A started run with ``lines`` output events appended through the commands."""
    from commands.start_run import start_run

    run_id = _run(store)
    start_run(store, run_id, pid=1, host="h")
    items = [OutputItem(kind="text", text=f"line {i}") for i in range(50)]
    for _ in range(lines // 50):
        record_agent_output(store, run_id, "a", items, epoch=1)
    return run_id


def test_a_long_run_stores_a_snapshot_near_its_head(db_path: Path) -> None:
    """Appending to a run stores a snapshot with an append once the last stored one is
    ``SNAPSHOT_INTERVAL`` versions behind; a new process's fold starts there.
    """
    with EventStore(db_path) as store:
        run_id = _long_run(store, 1000)
        version = store.stream_version(run_id)
    stored = _stored_snapshot(db_path, run_id)
    assert stored is not None
    assert stored[1] == SNAPSHOT_TOPIC
    assert version - events.store.SNAPSHOT_INTERVAL - 50 <= stored[0] < version
    with EventStore(db_path) as fresh:
        assert load_run(fresh, run_id) == fold(run_id, fresh.load(run_id))


def _ahead_of_the_log(conn: apsw.Connection) -> None:
    """Rewrite the snapshot, consistently, as the fold at a version the log does not have."""
    (data,) = conn.execute("SELECT state FROM snapshots").fetchone() or (b"",)
    state = msgspec.msgpack.decode(data, type=RunState)
    state.version += 100_000
    state.status = RunStatus.COMPLETED
    conn.execute(
        "UPDATE snapshots SET state=?, originator_version=?",
        (msgspec.msgpack.encode(state), state.version),
    )


@pytest.mark.parametrize(
    "damage",
    [
        "UPDATE snapshots SET state = x'c1c1c1'",
        "UPDATE snapshots SET topic = 'commands.run_state:RunState:0:00000000'",
        "UPDATE snapshots SET originator_version = originator_version - 1",
        _ahead_of_the_log,
        "DROP TABLE snapshots",
    ],
    ids=["unreadable", "another-shape", "another-version", "ahead-of-the-log", "gone"],
)
def test_the_log_is_the_truth_not_the_snapshot(
    db_path: Path, damage: str | Callable[[apsw.Connection], None]
) -> None:
    """A stored snapshot that cannot be read, was made by another fold, says another version
    than its row, is ahead of the log, or is gone, is ignored: the run is folded from its
    stream.
    """
    with EventStore(db_path) as store:
        run_id = _long_run(store, 500)
        record_node_started(store, run_id, "a", epoch=1)
    assert _stored_snapshot(db_path, run_id) is not None
    conn = apsw.Connection(str(db_path))
    if callable(damage):
        damage(conn)
    else:
        conn.execute(damage)
    conn.close()
    with EventStore(db_path) as fresh:
        state = load_run(fresh, run_id)
        assert state == fold(run_id, fresh.load(run_id))
        assert state.current_node == "a"


def test_a_wrong_snapshot_of_the_right_shape_is_refused_by_its_own_run_id(
    db_path: Path,
) -> None:
    """A snapshot copied from another run (right shape, right version) is not used."""
    with EventStore(db_path) as store:
        first = _long_run(store, 500)
        second = _long_run(store, 500)
        record_node_started(store, second, "b", epoch=1)
    conn = apsw.Connection(str(db_path))
    conn.execute(
        "UPDATE snapshots SET state = (SELECT state FROM snapshots WHERE originator_id=?) "
        "WHERE originator_id=?",
        (first.hex, second.hex),
    )
    conn.close()
    with EventStore(db_path) as fresh:
        state = load_run(fresh, second)
        assert state.run_id == second
        assert state == fold(second, fresh.load(second))


def test_a_stale_fold_in_memory_never_passes_for_the_current_owner(db_path: Path) -> None:
    """A worker's process keeps its run's fold in memory; another process takes the run over.
    The worker's next append is fenced off (the fold is brought up to the stream's newest
    version first), and an append built on the stale fold conflicts.
    """
    with EventStore(db_path) as worker:
        run_id = _long_run(worker, 400)
        stale = load_run(worker, run_id)
        with EventStore(db_path) as other:
            mark_interrupted(other, run_id, reason="stale", epoch=1)
            resume_run(other, run_id, pid=2, host="h")
        with pytest.raises(WorkerFencedError):
            record_heartbeat(worker, run_id, pid=1, host="h", epoch=1)
        with pytest.raises(ConcurrencyError):
            worker.append(next_events(stale, [(NodeStarted, {"node": "a"})], epoch=1))
        current = load_run(worker, run_id)
        assert (current.epoch, current.pid) == (2, 2)
        assert current == fold(run_id, worker.load(run_id))


def test_an_append_expecting_a_version_is_refused_at_any_other(db_path: Path) -> None:
    """``append(expected_version=V)`` stores nothing unless the stream is at V: behind it
    (the events would leave a gap) as well as ahead of it.
    """
    with EventStore(db_path) as store:
        run_id = _run(store)
        state = load_run(store, run_id)
        assert state.version == 1
        ahead = next_events(state, [(RunStarted, {"pid": 1, "host": "h"})])
        with pytest.raises(ConcurrencyError):
            store.append(ahead, expected_version=0)
        gap = [
            HeartbeatRecorded(
                originator_id=run_id, originator_version=3, timestamp=utc_now(), pid=1, host="h"
            )
        ]
        with pytest.raises(ConcurrencyError):
            store.append(gap, expected_version=2)
        assert store.stream_version(run_id) == 1
        store.append(ahead, expected_version=1)
        assert store.stream_version(run_id) == 2


def test_a_worker_decides_on_its_own_fold_and_reads_nothing(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a process is its run's only writer, its appends read nothing of the stream
    first: each is decided on the fold it kept and commits at that fold's version.
    """
    with EventStore(db_path) as store:
        run_id = _long_run(store, 100)
        load_run(store, run_id)
        reads: list[object] = []
        since = store.recorder.select_since
        monkeypatch.setattr(store.recorder, "select_since", lambda *a: reads.append(a) or since(*a))
        record_node_started(store, run_id, "a", epoch=1)
        record_agent_output(store, run_id, "a", [OutputItem(kind="text", text="x")], epoch=1)
        record_heartbeat(store, run_id, pid=1, host="h", epoch=1)
        assert reads == []
        assert load_run(store, run_id) == fold(run_id, store.load(run_id))


def test_a_fold_gone_stale_costs_one_refused_append_then_holds(db_path: Path) -> None:
    """Another process appends to the run (a heartbeat of its own): this process's next
    append, decided on its older fold, is refused whole, decided again on the log and
    stored after the other's event.
    """
    with EventStore(db_path) as worker:
        run_id = _long_run(worker, 100)
        before = load_run(worker, run_id).version
        with EventStore(db_path) as other:
            record_heartbeat(other, run_id, pid=9, host="other", epoch=1)
        state = record_heartbeat(worker, run_id, pid=1, host="h", epoch=1)
        assert state.version == before + 2
        beats = [e for e in worker.load(run_id) if isinstance(e, HeartbeatRecorded)]
        assert [(e.originator_version, e.pid) for e in beats] == [
            (before + 1, 9),
            (before + 2, 1),
        ]
        assert state == fold(run_id, worker.load(run_id))


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    writes=st.lists(
        st.tuples(st.integers(0, 1), st.sampled_from(["node", "output", "heartbeat"])),
        min_size=1,
        max_size=30,
    ),
    interval=st.integers(1, 5),
)
def test_two_writers_each_deciding_on_their_own_folds_stay_exact(
    writes: list[tuple[int, str]], interval: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes' stores append to one run in any order, each deciding on the fold it
    keeps: every state a command returns is the fold of the stream up to its version,
    and no version is skipped or taken twice.
    """
    from commands.start_run import start_run

    monkeypatch.setattr(events.store, "SNAPSHOT_INTERVAL", interval)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "shep.db"
        stores = [EventStore(path, synchronous="OFF"), EventStore(path, synchronous="OFF")]
        try:
            run_id = _run(stores[0])
            start_run(stores[0], run_id, pid=1, host="h")
            for which, what in writes:
                store = stores[which]
                if what == "node":
                    state = record_node_started(store, run_id, "a", epoch=1)
                elif what == "output":
                    state = record_agent_output(
                        store, run_id, "a", [OutputItem(kind="text", text="x")], epoch=1
                    )
                else:
                    state = record_heartbeat(store, run_id, pid=which, host="h", epoch=1)
                assert state is not None
                upto = [e for e in store.load(run_id) if e.originator_version <= state.version]
                assert state == fold(run_id, upto)
            stream = stores[1].load(run_id)
            assert [e.originator_version for e in stream] == list(range(1, len(stream) + 1))
            assert len(stream) == 2 + len(writes)
        finally:
            for store in stores:
                store.close()


def test_a_refusal_on_a_stale_fold_is_decided_again_on_the_log(db_path: Path) -> None:
    """This process's fold says the run is running; another process interrupts it. Resuming
    it here is allowed (the log says interrupted), and so is a checkpoint save by the new
    owner: a fold kept in memory never refuses what the log allows.
    """
    from commands.save_checkpoint import save_checkpoint

    with EventStore(db_path) as here:
        run_id = _long_run(here, 100)
        assert load_run(here, run_id).status is RunStatus.RUNNING
        with EventStore(db_path) as other:
            mark_interrupted(other, run_id, reason="gone", epoch=1)
        state = resume_run(here, run_id, pid=2, host="h")
        assert (state.status, state.epoch) == (RunStatus.RUNNING, 2)
        with EventStore(db_path) as other:
            record_heartbeat(other, run_id, pid=2, host="h", epoch=2)
        beat = HeartbeatRecorded(
            originator_id=run_id,
            originator_version=state.version + 2,
            timestamp=utc_now(),
            pid=2,
            host="h",
        )
        save_checkpoint(here, [beat], epoch=2)
        assert load_run(here, run_id) == fold(run_id, here.load(run_id))
