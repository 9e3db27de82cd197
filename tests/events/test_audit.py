"""verify_chain on real SQLite files: what it catches, and the hash format it keeps."""

from __future__ import annotations

from pathlib import Path
from uuid import UUID

import apsw
import pytest
from eventsourcing.persistence import StoredEvent

from events.audit import open_log, verify_chain
from events.chain import GENESIS_HASH, chain_hash
from events.errors import StoreCorruptedError
from events.sqlite import ApswApplicationRecorder, ApswProcessRecorder
from events.sqlite_datastore import ApswDatastore

STREAM = UUID("12345678-1234-5678-1234-567812345678")
OTHER = UUID("87654321-4321-8765-4321-876543218765")
EVENTS = [
    StoredEvent(STREAM, 1, "shep.run.created", b'{"workflow":"feature"}'),
    StoredEvent(STREAM, 2, "shep.run.started", b'{"pid":42}'),
    StoredEvent(OTHER, 1, "shep.run.created", b'{"workflow":"analyze"}'),
    StoredEvent(STREAM, 3, "shep.run.cancelled", b'{"by":"me"}'),
]
#: The head hash of EVENTS as the writer computed it before storage classes were verified.
HEAD = "3390bdb9d108f6a1256bfa51fce130c75260b3f23be3361526a752e99565e25f"


@pytest.fixture
def log(db_path: Path) -> Path:
    datastore = ApswDatastore(str(db_path))
    recorder = ApswProcessRecorder(datastore)
    recorder.create_table()
    recorder.insert_events(EVENTS)
    datastore.close()
    return db_path


def verify(path: Path) -> tuple[int, int | None, str, bool]:
    conn = open_log(path)
    try:
        report = verify_chain(conn)
    finally:
        conn.close()
    return report.events, report.first_bad_position, report.problem, report.damaged


def edit(path: Path, statement: str, *params: object) -> None:
    """Run ``statement`` with the append-only triggers out of the way, as an editor would."""
    conn = apsw.Connection(str(path))
    conn.execute("DROP TRIGGER IF EXISTS stored_events_no_update")
    conn.execute("DROP TRIGGER IF EXISTS stored_events_no_delete")
    conn.execute(statement, params)
    conn.close()


def test_chain_format_is_unchanged(log: Path) -> None:
    """A fixed log's head hash is what earlier versions computed: old stores and anchors verify.

    The hash is recomputed here by hand from its definition, then pinned as hex.
    """
    previous = GENESIS_HASH
    for position, event in enumerate(EVENTS, start=1):
        assert isinstance(event.originator_id, UUID)
        previous = chain_hash(
            previous,
            position,
            event.originator_id.hex.encode(),
            event.originator_version,
            event.topic.encode(),
            event.state,
        )
    conn = open_log(log)
    report = verify_chain(conn)
    conn.close()
    assert report.ok
    assert report.head_hash == previous
    assert report.head_hash.hex() == HEAD


@pytest.mark.parametrize(
    ("column", "recast", "stored_as", "expected"),
    [
        ("originator_id", "CAST(originator_id AS BLOB)", "blob", "text"),
        ("topic", "CAST(topic AS BLOB)", "blob", "text"),
        ("state", "CAST(state AS TEXT)", "text", "blob"),
        ("originator_version", "CAST(originator_version AS BLOB)", "blob", "integer"),
        # Arabic-Indic three: SQLite keeps it TEXT, Python's int() reads it as 3.
        ("originator_version", "'\u0663'", "text", "integer"),
        ("chain_hash", "CAST(chain_hash AS TEXT)", "text", "blob"),
    ],
)
def test_a_changed_storage_class_breaks_the_chain_there(
    log: Path, column: str, recast: str, stored_as: str, expected: str
) -> None:
    """A value recast to another storage class (same bytes, same hash) breaks the chain there."""
    edit(log, f"UPDATE stored_events SET {column} = {recast} WHERE notification_id = 4")
    conn = apsw.Connection(str(log))
    assert conn.execute(f"SELECT typeof({column}) FROM stored_events WHERE rowid=4").fetchone() == (
        stored_as,
    )
    conn.close()
    assert verify(log) == (
        3,
        4,
        f"{column} is stored as {stored_as}, not {expected} (its storage class was changed)",
        False,
    )


def test_a_recast_id_hides_the_event_from_the_command_side(log: Path) -> None:
    """Why the storage class matters: a BLOB id no longer matches the stream's TEXT id."""
    datastore = ApswDatastore(str(log))
    recorder = ApswApplicationRecorder(datastore)
    assert [e.originator_version for e in recorder.select_events(STREAM)] == [1, 2, 3]
    edit(log, "UPDATE stored_events SET originator_id = CAST(originator_id AS BLOB) WHERE rowid=4")
    assert [e.originator_version for e in recorder.select_events(STREAM)] == [1, 2]
    datastore.close()
    assert verify(log)[1] == 4


def test_a_tracking_position_beyond_the_head_is_a_truncated_log(log: Path) -> None:
    """Removing the last events leaves a consistent chain, but a reader had seen them."""
    edit(log, "INSERT INTO tracking VALUES ('runs', 4)")
    assert verify(log) == (4, None, "", False)
    edit(log, "DELETE FROM stored_events WHERE notification_id > 2")
    assert verify(log) == (
        2,
        3,
        "the log was truncated: it ends at position 2, but 'runs' has already processed position 4",
        False,
    )


def test_anchor_hash_is_the_chain_hash_at_that_position(log: Path) -> None:
    """The report carries the hash at the anchor position (none beyond the head)."""
    at_1 = chain_hash(GENESIS_HASH, 1, STREAM.hex.encode(), 1, b"shep.run.created", EVENTS[0].state)
    at_2 = chain_hash(at_1, 2, STREAM.hex.encode(), 2, b"shep.run.started", EVENTS[1].state)
    conn = open_log(log)
    report = verify_chain(conn, anchor_position=2)
    beyond = verify_chain(conn, anchor_position=9)
    conn.close()
    assert report.anchor_hash == at_2
    assert beyond.anchor_hash is None


def test_a_row_out_of_order_is_named_at_the_expected_position(log: Path) -> None:
    """A row read back with a position below the expected one (as damaged pages give) is named."""
    edit(log, "UPDATE stored_events SET notification_id = 0 WHERE notification_id = 3")
    # Position 0 sorts first: the walk reads it where it expects position 1.
    assert verify(log) == (
        0,
        1,
        "a row read there has position 0, out of order (the file is damaged or was edited)",
        True,
    )


def test_a_file_that_is_not_a_database_is_store_corrupted(db_path: Path) -> None:
    """No position can be named when the file is not a database: StoreCorruptedError."""
    db_path.write_bytes(b"not a database at all " * 300)
    with pytest.raises(StoreCorruptedError, match="is damaged or not a shep database"):
        verify(db_path)


def test_an_empty_database_verifies_empty(db_path: Path) -> None:
    """A database without the events table holds no history: 0 events, genesis head."""
    apsw.Connection(str(db_path)).execute("CREATE TABLE other (x)")
    assert verify(db_path) == (0, None, "", False)
