"""The log follower: every event after a position, once, in order, woken by the log's change."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from uuid import uuid4

from events.base import utc_now
from events.runs import HeartbeatRecorded
from events.store import EventStore
from projections.database import open_database
from projections.follow import LogFollower
from projections.state import head_position

#: Appends N heartbeats to a new stream of the store at PATH, one transaction each.
WRITER = """
import sys, uuid
from events.base import utc_now
from events.runs import HeartbeatRecorded
from events.store import EventStore
stream = uuid.uuid4()
with EventStore(sys.argv[1]) as store:
    for v in range(1, int(sys.argv[2]) + 1):
        store.append([HeartbeatRecorded(originator_id=stream, originator_version=v,
            timestamp=utc_now(), pid=1, host="other", tokens_so_far=v)])
"""


def _heartbeats(store: EventStore, count: int) -> None:
    stream = uuid4()
    store.append(
        [
            HeartbeatRecorded(
                originator_id=stream,
                originator_version=v,
                timestamp=utc_now(),
                pid=1,
                host="here",
                tokens_so_far=v,
            )
            for v in range(1, count + 1)
        ]
    )


def test_a_follower_reads_what_is_after_its_position_in_batches(
    store: EventStore, db_path: Path
) -> None:
    """Events after the starting position come back in order, in batches of at most
    ``batch_size``, each once; at the head there is nothing more.
    """
    _heartbeats(store, 3)
    conn = open_database(db_path)
    start = head_position(conn)
    _heartbeats(store, 7)
    follower = LogFollower(conn, after=start, batch_size=3)
    batches = [follower.read() for _ in range(4)]
    assert [len(b) for b in batches] == [3, 3, 1, 0]
    positions = [p for batch in batches for p, _ in batch]
    assert positions == list(range(start + 1, start + 8))
    assert all(isinstance(e, HeartbeatRecorded) for batch in batches for _, e in batch)
    assert follower.read() == []
    conn.close()


def test_a_follower_wakes_for_another_process_s_appends(store: EventStore, db_path: Path) -> None:
    """Waiting with nothing new times out; appends by another process wake the follower,
    and it yields every one of them, once, in order.
    """
    conn = open_database(db_path)
    follower = LogFollower(conn, after=head_position(conn))
    assert follower.read() == []
    assert follower.wait(0.05) is False
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(db_path), "20"])
    seen: list[int] = []
    for batch in follower.follow(idle=30):
        assert batch, "no event came within 30 s"
        seen.extend(e.tokens_so_far for _, e in batch if isinstance(e, HeartbeatRecorded))
        if len(seen) >= 20:
            break
    assert writer.wait(timeout=60) == 0
    assert seen == list(range(1, 21))
    conn.close()


def test_an_idle_follower_yields_an_empty_batch(store: EventStore, db_path: Path) -> None:
    """With nothing appended, follow() yields an empty batch after ``idle`` seconds, so its
    reader can do what is due (``shep logs --follow`` checks for orphans then).
    """
    conn = open_database(db_path)
    follower = LogFollower(conn, after=head_position(conn))
    assert next(follower.follow(idle=0.05)) == []
    conn.close()


def test_the_follower_s_own_commits_do_not_wake_it(store: EventStore, db_path: Path) -> None:
    """The follower's connection catching projections up (its own commits) is no change of
    the log: the wait times out.
    """
    from projections.catch_up import catch_up

    _heartbeats(store, 2)
    conn = open_database(db_path)
    follower = LogFollower(conn, after=0)
    assert len(follower.read()) == 2
    catch_up(conn)
    assert follower.wait(0.05) is False
    conn.close()
