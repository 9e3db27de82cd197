"""The event store across processes: subscriptions, conflicts, gap-free positions."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from pathlib import Path
from uuid import UUID, uuid4

import apsw
import pytest
from eventsourcing.persistence import StoredEvent

from events.base import utc_now
from events.errors import ConcurrencyError
from events.runs import RunCreated
from events.sqlite import ApswApplicationRecorder
from events.sqlite_datastore import ApswDatastore
from events.store import EventStore

WRITER = """
import sys, uuid
from eventsourcing.persistence import StoredEvent
from events.sqlite_datastore import ApswDatastore
from events.sqlite import ApswApplicationRecorder
recorder = ApswApplicationRecorder(ApswDatastore(sys.argv[1]))
recorder.create_table()
for i in range(int(sys.argv[2])):
    recorder.insert_events([StoredEvent(uuid.uuid4(), 1, "from-other-process", b"x")])
"""


def test_subscription_sees_writes_of_another_process(db_path: Path) -> None:
    """A writer in another process, a subscriber here: the subscriber receives every event."""
    datastore = ApswDatastore(str(db_path))
    recorder = ApswApplicationRecorder(datastore)
    recorder.create_table()
    recorder.insert_events([StoredEvent(uuid4(), 1, "here", b"x")])
    start = recorder.max_notification_id()
    received: list[str] = []
    with recorder.subscribe(gt=start) as subscription:
        # Fail instead of hanging if nothing arrives.
        watchdog = threading.Timer(30, subscription.stop)
        watchdog.start()
        subprocess.run([sys.executable, "-c", WRITER, str(db_path), "3"], check=True)
        for notification in subscription:
            received.append(notification.topic)
            if len(received) == 3:
                break
        watchdog.cancel()
    datastore.close()
    assert received == ["from-other-process"] * 3


def test_subscription_wakes_promptly_across_processes(db_path: Path) -> None:
    """The poller notices another process's commit within a few poll intervals (not seconds)."""
    datastore = ApswDatastore(str(db_path))
    recorder = ApswApplicationRecorder(datastore)
    recorder.create_table()
    with recorder.subscribe(gt=0) as subscription:
        watchdog = threading.Timer(30, subscription.stop)
        watchdog.start()
        subprocess.run([sys.executable, "-c", WRITER, str(db_path), "1"], check=True)
        written_at = time.monotonic()
        notification = next(subscription)
        waited = time.monotonic() - written_at
        watchdog.cancel()
    datastore.close()
    assert notification.topic == "from-other-process"
    # Generous bound: behaviour (no multi-second polling), not performance; see benchmarks/.
    assert waited < 5


def test_concurrent_processes_never_lose_or_duplicate(db_path: Path) -> None:
    """Four processes appending at once: every event stored once, positions 1..N without gaps."""
    EventStore(db_path).close()
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(db_path), "50"]) for _ in range(4)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    with EventStore(db_path) as store:
        ids = [n.id for n in store.recorder.select_notifications(start=1, limit=1000)]
    assert ids == list(range(1, 201))


def test_append_conflict_leaves_nothing_behind(store: EventStore) -> None:
    """A batch with one taken version is refused whole: no event of it is stored."""
    run_id = uuid4()
    now = utc_now()
    first = RunCreated(
        originator_id=run_id,
        originator_version=1,
        timestamp=now,
        workflow="w",
        agent_type="demo",
        repo="/r",
        created_by="me",
    )
    store.append([first])
    other = uuid4()
    batch = [
        RunCreated(
            originator_id=other,
            originator_version=1,
            timestamp=now,
            workflow="w",
            agent_type="demo",
            repo="/r",
            created_by="me",
        ),
        first,
    ]
    with pytest.raises(ConcurrencyError):
        store.append(batch)
    assert store.load(other) == []
    assert store.max_position() == 1


def test_a_batch_of_many_statements_is_stored_or_refused_whole(store: EventStore) -> None:
    """A batch bigger than one INSERT (101 events: 64, 32, 4 and 1 rows) is stored with
    consecutive positions, each event readable and the chain intact, and so is a batch of
    big events (a statement a row); one whose 90th version is taken stores nothing, its
    first 64 rows included."""
    from events.audit import verify_chain
    from events.runs import HeartbeatRecorded

    def beats(stream: UUID, versions: range, host: str = "h") -> list[HeartbeatRecorded]:
        return [
            HeartbeatRecorded(
                originator_id=stream, originator_version=v, timestamp=utc_now(), pid=v, host=host
            )
            for v in versions
        ]

    stream = uuid4()
    assert store.append(beats(stream, range(1, 102))) == list(range(1, 102))
    assert [e.originator_version for e in store.load(stream)] == list(range(1, 102))
    big = uuid4()  # events big enough to go in a statement a row
    assert store.append(beats(big, range(1, 11), host="h" * 1000)) == list(range(102, 112))
    assert [e.originator_version for e in store.load(big)] == list(range(1, 11))
    taken = uuid4()
    store.append(beats(taken, range(90, 91)))
    with pytest.raises(ConcurrencyError):
        store.append(beats(taken, range(1, 101)))
    assert [e.originator_version for e in store.load(taken)] == [90]
    assert store.max_position() == 112
    conn = apsw.Connection(str(store.path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        report = verify_chain(conn)
    finally:
        conn.close()
    assert report.ok
    assert report.events == 112


def test_events_round_trip_typed(store: EventStore) -> None:
    """Events come back as the same typed Structs, UUIDs and datetimes included."""
    event = RunCreated(
        originator_id=uuid4(),
        originator_version=1,
        timestamp=utc_now(),
        workflow="w",
        agent_type="demo",
        repo="/r",
        created_by="me",
        inputs={"k": "v"},
        node_names=["a", "b"],
        origin_run_id=uuid4(),
    )
    store.append([event])
    assert store.load(event.originator_id) == [event]


def _created() -> RunCreated:
    return RunCreated(
        originator_id=uuid4(),
        originator_version=1,
        timestamp=utc_now(),
        workflow="w",
        agent_type="demo",
        repo="/r",
        created_by="me",
    )


def test_a_store_whose_file_was_replaced_never_writes_into_the_new_file(tmp_path: Path) -> None:
    """Another file put at the store's path (a new home's store, a restored copy): the store
    says so, and a connection it opens now is refused instead of writing into that file;
    with the file deleted it says deleted.
    """
    from events.errors import StoreError

    db = tmp_path / "shep.db"
    store = EventStore(db)
    store.append([_created()])
    assert store.file_moved() is None
    other = EventStore(tmp_path / "other.db")
    other.close()
    for suffix in ("-wal", "-shm"):  # what belongs to the old file goes with it
        Path(f"{db}{suffix}").unlink()
    (tmp_path / "other.db").replace(db)
    assert store.file_moved() == "replaced"
    with contextlib.ExitStack() as busy:
        while store.datastore._idle:  # every idle connection busy: the append opens one
            busy.enter_context(store.datastore.borrow())
        with pytest.raises(StoreError, match="is no longer the file this store opened"):
            store.append([_created()])
    check = EventStore(db)
    assert check.recorder.max_notification_id() in (None, 0)  # nothing was written into it
    check.close()
    db.unlink()
    assert store.file_moved() == "deleted"
    store.close()


def test_a_given_up_store_refuses_every_read_and_write(tmp_path: Path) -> None:
    """Once a worker gives its store up (the file deleted or replaced under it), nothing
    reaches the file any more: appends, stream reads, the SQLite fast fold read and stored
    snapshots all fail with the reason, so the worker reports it instead of going on.
    """
    from commands.run_state import SNAPSHOT_TOPIC
    from events.errors import StoreUnavailableError

    store = EventStore(tmp_path / "shep.db")
    created = _created()
    store.append([created])
    store.give_up(StoreUnavailableError("the store was deleted"))
    stream = created.originator_id
    calls = [
        lambda: store.append([_created()]),
        lambda: store.load(stream),
        lambda: store.load_since(stream, after_version=0, types=[RunCreated]),
        lambda: store.get_snapshot(stream, SNAPSHOT_TOPIC),
    ]
    for call in calls:
        with pytest.raises(StoreUnavailableError, match="the store was deleted"):
            call()
    store.close()
    assert EventStore(tmp_path / "shep.db").load(stream) == [created]
