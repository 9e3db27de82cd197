"""Secondary indexes are checked, not assumed: whatever is missing is created again."""

from __future__ import annotations

import random
from pathlib import Path

import apsw

from events.store import EventStore
from projections.catch_up import catch_up, rebuild
from projections.database import open_database
from projections.schema import PROJECTIONS
from projections.state import has_schema
from projections.tables import PROJECTION_INDEXES
from tests.projections.test_rebuild import snapshot
from tests.support.histories import random_run


def indexes(conn: apsw.Connection) -> set[str]:
    return {
        str(name)
        for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type='index' AND sql IS NOT NULL"
        )
    }


def test_index_names_are_those_of_the_ddl() -> None:
    """PROJECTION_INDEXES names exactly the indexes the projections' DDL creates."""
    in_ddl = {s.split()[5] for p in PROJECTIONS for s in p.ddl if s.startswith("CREATE INDEX")}
    assert set(PROJECTION_INDEXES) == in_ddl


def test_open_creates_indexes_a_killed_rebuild_left_out(store: EventStore, db_path: Path) -> None:
    """Tables present, indexes gone (a rebuild killed mid-way): opening creates every index."""
    random_run(store, random.Random(1))
    conn = open_database(db_path)
    assert indexes(conn) == set(PROJECTION_INDEXES)
    for name in PROJECTION_INDEXES:
        conn.execute(f"DROP INDEX {name}")
    assert not has_schema(conn)
    conn.close()
    conn = open_database(db_path)
    assert indexes(conn) == set(PROJECTION_INDEXES)
    conn.close()


def test_catch_up_creates_a_missing_index(store: EventStore, db_path: Path) -> None:
    """A connection opened before the index went missing creates it when it next catches up."""
    rng = random.Random(2)
    random_run(store, rng)
    conn = open_database(db_path)
    catch_up(conn)
    other = apsw.Connection(str(db_path))
    other.execute("DROP INDEX logs_run")
    other.close()
    random_run(store, rng)
    assert catch_up(conn) > 0
    assert indexes(conn) == set(PROJECTION_INDEXES)
    conn.close()


def test_a_rebuild_killed_before_its_indexes_is_completed_by_the_next_open(
    store: EventStore, db_path: Path
) -> None:
    """The state a rebuild killed mid-replay leaves (empty tables, no tracking, no indexes):
    the next open and catch-up give the same tables as a full rebuild, with every index."""
    rng = random.Random(3)
    for _ in range(20):
        random_run(store, rng)
    conn = open_database(db_path)
    rebuild(conn, batch_size=50)
    expected = snapshot(conn)
    for name in PROJECTION_INDEXES:
        conn.execute(f"DROP INDEX {name}")
    for projection in PROJECTIONS:
        for table in projection.tables:
            conn.execute(f"DELETE FROM {table}")
        conn.execute("DELETE FROM tracking WHERE application_name = ?", (projection.name,))
    conn.close()
    conn = open_database(db_path)
    assert indexes(conn) == set(PROJECTION_INDEXES)
    catch_up(conn)
    assert snapshot(conn) == expected
    conn.close()


def test_catch_up_on_a_read_only_connection_reads_nothing(store: EventStore, db_path: Path) -> None:
    """A read-only connection is left as it is: catch_up returns 0 and writes nothing."""
    rng = random.Random(4)
    random_run(store, rng)
    open_database(db_path).close()
    random_run(store, rng)
    conn = open_database(db_path, readonly=True)
    assert catch_up(conn) == 0
    conn.close()
