"""The log follower on a shared store: woken by the server's notifications, reading the copy.

A home's follower listens on the server's channel; each append notifies it,
and it copies the new events into the home's copy of the log before yielding
them. When the server goes away it says so once, follows the copy, and says
when the server is back.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from uuid import uuid4

import apsw
import pytest

from events.base import utc_now
from events.runs import HeartbeatRecorded
from events.store import EventStore
from projections import mirror
from projections.database import open_database
from projections.follow import LogFollower
from tests.support.postgres_server import PostgresServer

#: Appends N heartbeats to a new stream of the store at URL, one append each.
WRITER = """
import sys, time, uuid
from events.base import utc_now
from events.runs import HeartbeatRecorded
from events.store import EventStore
stream = uuid.uuid4()
with EventStore(sys.argv[1]) as store:
    for v in range(1, int(sys.argv[2]) + 1):
        store.append([HeartbeatRecorded(originator_id=stream, originator_version=v,
            timestamp=utc_now(), pid=1, host="other", tokens_so_far=v)])
        time.sleep(0.01)
"""


@pytest.fixture(autouse=True)
def fresh_mirror(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mirror's per-process state (connections, offline servers), the test's own."""
    monkeypatch.setattr(mirror, "_connections", {})
    monkeypatch.setattr(mirror, "_offline", set())
    monkeypatch.setattr(mirror, "_copies", {})


def _copy(tmp_path: Path) -> apsw.Connection:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    return open_database(home / "shared-cache-test.db")


def test_appends_on_the_server_wake_a_follower_of_the_copy(pg_url: str, tmp_path: Path) -> None:
    """Another process appends to the shared store: the follower, listening, copies each
    event into the home's copy and yields it, once, in order.
    """
    EventStore(pg_url).close()
    conn = _copy(tmp_path)
    follower = LogFollower(conn, url=pg_url)
    assert follower.read() == []
    writer = subprocess.Popen([sys.executable, "-c", WRITER, pg_url, "15"])
    seen: list[int] = []
    try:
        for batch in follower.follow(idle=30):
            assert batch, "no event came within 30 s"
            seen.extend(e.tokens_so_far for _, e in batch if isinstance(e, HeartbeatRecorded))
            if len(seen) >= 15:
                break
    finally:
        follower.close()
    assert writer.wait(timeout=60) == 0
    assert seen == list(range(1, 16))
    (copied,) = conn.execute("SELECT count(*) FROM stored_events").fetchone() or (0,)
    assert copied == 15
    conn.close()


def test_without_the_server_the_follower_says_so_and_follows_the_copy(
    own_pg_server: PostgresServer, tmp_path: Path
) -> None:
    """The server dies: the follower says so once and goes on (its waits time out); the server
    comes back: it says so, and what was appended meanwhile is copied and yielded.
    """
    url = own_pg_server.database()
    store = EventStore(url)
    conn = _copy(tmp_path)
    notices: list[str] = []
    follower = LogFollower(conn, url=url, on_notice=notices.append)
    follower.read()
    follower.wait(0.1)  # listening
    own_pg_server.kill()
    for _ in range(3):
        follower.wait(0.2)
    assert len(notices) == 1
    assert notices[0].endswith("Following this machine's copy until it is back.")
    own_pg_server.revive()
    stream = uuid4()
    appended = threading.Event()

    def append_when_back() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                store.append(
                    [
                        HeartbeatRecorded(
                            originator_id=stream,
                            originator_version=1,
                            timestamp=utc_now(),
                            pid=1,
                            host="h",
                        )
                    ]
                )
            except Exception:  # the server is still starting
                time.sleep(0.2)
                continue
            appended.set()
            return

    writer = threading.Thread(target=append_when_back)
    writer.start()
    got: list[Any] = []
    try:
        for batch in follower.follow(idle=1):
            got.extend(batch)
            if got:
                break
            assert appended.wait(0) or writer.is_alive(), "the server did not come back"
    finally:
        follower.close()
        writer.join()
        store.close()
    assert [e.originator_id for _, e in got] == [stream]
    assert notices[-1] == "the shared store is back."
    conn.close()
