"""The runs page's kept listing: read once per positions of the read side, never stale.

The runs table keeps what it listed for the projections' positions it read it at
(``shep.web.runs_table.Listings``), so the fragments every open page fetches after a
change cost one read. A real `shep ui` must still show each change as soon as its
projections have it: a new run, a run's new status, a new waiting count.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from commands.create_run import create_run
from commands.start_run import start_run
from events.store import EventStore
from projections.database import open_database
from projections.state import positions
from shep.web.runs_table import Listings
from tests.shep.web.ui_server import UiServer


def test_a_listing_is_read_again_only_when_a_position_moved() -> None:
    """Same positions and filters: kept; other filters, or a moved position: read."""
    reads: list[str] = []
    listings = Listings()

    def read(name: str) -> str:
        reads.append(name)
        return f"listing {len(reads)}"

    assert listings.get((5, 5), ("",), lambda: read("a")) == "listing 1"
    assert listings.get((5, 5), ("",), lambda: read("a")) == "listing 1"
    assert listings.get((5, 5), ("failed",), lambda: read("b")) == "listing 2"
    assert listings.get((5, 6), ("",), lambda: read("c")) == "listing 3"
    assert listings.get((5, 6), ("failed",), lambda: read("d")) == "listing 4"
    assert reads == ["a", "b", "c", "d"]


def _caught_up(db: Path, head: int) -> None:
    conn = open_database(db, readonly=True)
    try:
        deadline = time.monotonic() + 20
        while min(positions(conn).values()) < head:
            assert time.monotonic() < deadline, "the server did not catch up"
            time.sleep(0.01)
    finally:
        conn.close()


def test_the_runs_page_shows_a_change_once_the_server_has_it(db_path: Path) -> None:
    """A run created, then started, while the page is served: each GET after the server's
    projections caught up shows it (none serves the listing kept from before)."""
    server = UiServer.start()
    try:
        store = EventStore(db_path)
        first = server.get("/").body
        run = create_run(
            store, workflow="wf", agent_type="demo", repo="/r", node_names=["a"], created_by="t"
        )
        _caught_up(db_path, store.max_position())
        page = server.get("/").body
        assert f'id="run-{run.hex}"' not in first
        row = re.search(rf'<tr id="run-{run.hex}" class="status-(\w+)"', page)
        assert row is not None
        assert row[1] == "pending"

        start_run(store, run, pid=os.getpid(), host="here")
        _caught_up(db_path, store.max_position())
        row = re.search(rf'<tr id="run-{run.hex}" class="status-(\w+)"', server.get("/").body)
        assert row is not None
        assert row[1] == "running"
        store.close()
    finally:
        server.stop()
