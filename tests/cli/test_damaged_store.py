"""Damaged and read-only stores: one clear line, never an internal error; verify names damage."""

from __future__ import annotations

import json
import random
from pathlib import Path
from uuid import UUID

import apsw
import pytest

from events.store import EventStore
from projections.catch_up import catch_up
from projections.database import open_database
from tests.cli.test_read_cli import _make_read_only, _make_writable
from tests.support.cli import shep
from tests.support.histories import random_run


def corrupted(db_path: Path, cause: str) -> str:
    return (
        f"shep: The event store {db_path} is damaged or not a shep database ({cause}). "
        "Restore it from a backup or move it aside.\n"
    )


def build(store: EventStore, db_path: Path, *, caught_up: int, more: int) -> list[UUID]:
    """``caught_up`` runs the projections have applied, then ``more`` runs they have not."""
    rng = random.Random(11)
    runs = [random_run(store, rng) for _ in range(caught_up)]
    conn = open_database(db_path)
    catch_up(conn)
    conn.close()
    runs += [random_run(store, rng) for _ in range(more)]
    store.close()
    checkpoint(db_path)
    return runs


def checkpoint(db_path: Path) -> None:
    """Move every committed page into shep.db itself, so damage to the file is what is read."""
    conn = apsw.Connection(str(db_path))
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    wal = db_path.with_name("shep.db-wal")
    assert not wal.exists() or wal.stat().st_size == 0


def pages_of(db_path: Path, name: str, kind: str = "leaf") -> list[int]:
    """The pages of table or index ``name`` in key order (dbstat's path order)."""
    conn = apsw.Connection(str(db_path))
    pages = [
        int(page)
        for (page,) in conn.execute(
            "SELECT pageno FROM dbstat WHERE name = ? AND pagetype = ? ORDER BY path",
            (name, kind),
        )
    ]
    conn.close()
    return pages


def page_size(db_path: Path) -> int:
    conn = apsw.Connection(str(db_path))
    (size,) = conn.execute("PRAGMA page_size").fetchone() or (4096,)
    conn.close()
    return int(size)


def first_position_on(data: bytes, page: int, size: int) -> int:
    """The smallest rowid on a table leaf page, read from the file format itself."""
    start = (page - 1) * size
    header = start + (100 if page == 1 else 0)
    assert data[header] == 0x0D, "not a table leaf page"
    cell = start + int.from_bytes(data[header + 8 : header + 10], "big")
    _, cell = _varint(data, cell)  # payload size
    rowid, _ = _varint(data, cell)
    return rowid


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = 0
    for i in range(8):
        byte = data[at + i]
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, at + i + 1
    return (value << 8) | data[at + 8], at + 9


def overwrite_page(db_path: Path, page: int) -> None:
    size = page_size(db_path)
    with db_path.open("r+b") as f:
        f.seek((page - 1) * size)
        f.write(random.Random(page).randbytes(size))


def test_garbage_over_an_event_page_names_its_first_position(
    store: EventStore, db_path: Path
) -> None:
    """Garbage over a page of events in the middle of the file.

    Reading it (status and logs catch up through it) is the store-corrupted line,
    exit 1; verify names the first event stored on that page, exit 4.
    """
    runs = build(store, db_path, caught_up=8, more=8)
    conn = apsw.Connection(str(db_path))
    (tracked,) = conn.execute("SELECT min(notification_id) FROM tracking").fetchone() or (0,)
    conn.close()
    data = db_path.read_bytes()
    size = page_size(db_path)
    lagging = [
        p for p in pages_of(db_path, "stored_events") if first_position_on(data, p, size) > tracked
    ]
    page = lagging[len(lagging) // 2]
    position = first_position_on(data, page, size)
    assert position > 1
    overwrite_page(db_path, page)

    for args in (["status"], ["logs", runs[0].hex]):
        result = shep(*args)
        assert (result.returncode, result.stderr) == (
            1,
            corrupted(db_path, "database disk image is malformed"),
        ), args
    result = shep("audit", "verify")
    assert result.returncode == 4
    assert result.stderr == (
        f"shep: The event store {db_path} is damaged at position {position}: the event cannot "
        f"be read (database disk image is malformed). {position - 1} events before it verify. "
        "Restore it from a backup or move it aside.\n"
    )


@pytest.mark.parametrize("table", ["tracking", "runs"])
def test_damage_read_before_any_command_is_the_corrupted_line(
    store: EventStore, db_path: Path, table: str
) -> None:
    """Damage in what every command reads first (tracking for the lag, runs for orphans).

    One line saying the store is damaged, exit 1: never an internal error.
    """
    build(store, db_path, caught_up=6, more=0)
    overwrite_page(db_path, pages_of(db_path, table)[0])
    for args in (["status"], ["logs", "deadbeef"], ["projections", "rebuild"]):
        result = shep(*args)
        assert (result.returncode, result.stderr) == (
            1,
            corrupted(db_path, "database disk image is malformed"),
        ), args


def test_truncated_file_verify_names_the_first_missing_position(
    store: EventStore, db_path: Path
) -> None:
    """A file cut at a page boundary among the events: commands say it is damaged, exit 1;
    verify reads up to the cut and names the first event past it, exit 4."""
    rng = random.Random(5)
    for _ in range(12):
        random_run(store, rng)
    store.close()
    checkpoint(db_path)
    data = db_path.read_bytes()
    size = page_size(db_path)
    leaves = pages_of(db_path, "stored_events")
    cut = leaves[len(leaves) // 2]
    position = min(first_position_on(data, p, size) for p in leaves if p >= cut)
    assert position > 1
    db_path.write_bytes(data[: (cut - 1) * size])

    result = shep("status")
    assert (result.returncode, result.stderr) == (
        1,
        corrupted(db_path, "database disk image is malformed"),
    )
    result = shep("audit", "verify")
    assert result.returncode == 4
    assert result.stderr == (
        f"shep: The event store {db_path} is damaged at position {position}: the event cannot "
        f"be read (database disk image is malformed). {position - 1} events before it verify. "
        "Restore it from a backup or move it aside.\n"
    )


def test_a_file_that_is_not_a_database(shep_home: Path) -> None:
    """shep.db holding something else: every command, verify included, says so, exit 1."""
    shep_home.mkdir()
    db_path = shep_home / "shep.db"
    db_path.write_bytes(b"these are not the pages you are looking for\n" * 500)
    for args in (["status"], ["logs", "deadbeef"], ["audit", "verify"]):
        result = shep(*args)
        assert (result.returncode, result.stderr) == (
            1,
            corrupted(db_path, "file is not a database"),
        ), args


def test_read_only_store_reads_projections_as_they_are(
    store: EventStore, db_path: Path, shep_home: Path
) -> None:
    """shep.db and its home immutable, projections behind the log.

    status and logs show the projections as they are, with one line on stderr
    saying how far behind they are; verify checks the whole log.
    """
    rng = random.Random(21)
    runs = [random_run(store, rng) for _ in range(4)]
    before_status = json.loads(shep("status", "--all", "--json", check=True).stdout)
    before_logs = shep("logs", runs[0].hex, check=True).stdout
    seen = store.max_position()
    runs += [random_run(store, rng) for _ in range(3)]
    head = store.max_position()
    store.close()
    checkpoint(db_path)
    behind = (
        f"shep: the event store is read-only: projections are {head - seen} events behind "
        "the log, shown as they are.\n"
    )
    paths = [shep_home, db_path]
    _make_read_only(paths)
    try:
        status = shep("status", "--all", "--json")
        logs = shep("logs", runs[0].hex)
        verify = shep("audit", "verify")
    finally:
        _make_writable(paths)
    assert (status.returncode, status.stderr) == (0, behind)
    assert json.loads(status.stdout) == before_status
    assert (logs.returncode, logs.stderr, logs.stdout) == (0, behind, before_logs)
    assert (verify.returncode, verify.stderr) == (0, "")
    assert verify.stdout.startswith(f"OK: {head} events verify. Head hash: ")
