"""Projections built event by event equal projections rebuilt from the log."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from pathlib import Path

import apsw
import pytest

import projections.catch_up as catch_up_module
from events.errors import StoreError, UnknownEventError
from events.store import EventStore
from projections.catch_up import catch_up, rebuild
from projections.database import open_database
from projections.schema import PROJECTIONS
from projections.state import lag
from tests.support.histories import random_decisions, random_run


def snapshot(conn: apsw.Connection) -> dict[str, list[tuple[object, ...]]]:
    tables = [t for p in PROJECTIONS for t in p.tables]
    return {t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in tables}


def build_history(store: EventStore, conn: apsw.Connection, runs: int, seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(runs):
        run_id = random_run(store, rng)
        if rng.random() < 0.3:
            random_decisions(store, run_id, rng)
        if rng.random() < 0.4:
            catch_up(conn, batch_size=rng.choice([1, 7, 50, 5000]))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_rebuilt_equals_incremental(store: EventStore, db_path: Path, seed: int) -> None:
    """Catching up in random batch sizes at random moments gives the same tables as a rebuild."""
    conn = open_database(db_path)
    build_history(store, conn, runs=60, seed=seed)
    catch_up(conn)
    assert lag(conn) == 0
    incremental = snapshot(conn)
    assert incremental["runs"], "history produced no runs"
    assert incremental["logs"]
    rebuild(conn, batch_size=97)
    assert snapshot(conn) == incremental


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_rebuilt_equals_incremental_large(store: EventStore, db_path: Path) -> None:
    """The same on a large history (thousands of runs)."""
    conn = open_database(db_path)
    build_history(store, conn, runs=2000, seed=42)
    catch_up(conn)
    incremental = snapshot(conn)
    rebuild(conn)
    assert snapshot(conn) == incremental


def test_catch_up_is_exactly_once_across_connections(store: EventStore, db_path: Path) -> None:
    """Two connections catching up in turn never apply an event twice."""
    first, second = open_database(db_path), open_database(db_path)
    build_history(store, first, runs=10, seed=7)
    catch_up(first, batch_size=3)
    catch_up(second, batch_size=3)
    logs = first.execute("SELECT count(*), count(DISTINCT position) FROM logs").fetchone()
    assert logs is not None
    assert logs[0] == logs[1] > 0
    assert catch_up(second) == 0


@pytest.mark.parametrize("fold", [catch_up, rebuild])
def test_a_later_version_of_a_folded_type_is_refused_not_misread(
    store: EventStore, db_path: Path, fold: Callable[[apsw.Connection], int]
) -> None:
    """A state of a folded type that this shep's class does not take (here version 2 of
    ``AgentOutputRecorded``, which this shep knows at version 1, written by a newer shep) is
    refused by catch-up and by rebuild, naming the type and its version, not folded as a
    version 1 event; the projections are left as they were."""
    conn = open_database(db_path)
    run_id = random_run(store, random.Random(5))
    catch_up(conn)
    before = snapshot(conn)
    version = store.stream_version(run_id)
    later = (
        b'{"class_version":2,"originator_id":"%s","originator_version":%d,'
        b'"timestamp":"2026-01-01T00:00:00Z","node":"scan","kind":"text","text":"hi",'
        b'"tool_name":null,"tool_id":null,"is_error":false,"channel":"stderr"}'
        % (str(run_id).encode(), version + 1)
    )
    store.recorder.insert_rows(
        [(run_id.hex, version + 1, "events.runs:AgentOutputRecorded", later)]
    )
    with pytest.raises(UnknownEventError, match=r"version 2 of events\.runs:AgentOutputRecorded"):
        fold(conn)
    assert snapshot(conn) == before


def test_what_is_appended_while_a_rebuild_reads_ahead_is_in_its_tables(
    store: EventStore, db_path: Path
) -> None:
    """A rebuild reads its next batch in a thread of its own while it commits the last;
    runs written between its batches, read ahead of or not, are in the tables it swaps in,
    as catching up gives them."""
    conn = open_database(db_path)
    build_history(store, conn, runs=20, seed=11)
    rng = random.Random(12)
    written: list[int] = []

    def append_between_batches(_: object) -> None:
        if len(written) < 5:
            written.append(1)
            random_run(store, rng)
            if rng.random() < 0.5:
                random_decisions(store, random_run(store, rng), rng)

    replayed = rebuild(conn, batch_size=61, progress=append_between_batches)

    assert len(written) == 5
    assert replayed == store.recorder.max_notification_id()
    rebuilt = snapshot(conn)
    fresh = open_database(db_path)
    rebuild(fresh, batch_size=5000)
    assert snapshot(fresh) == rebuilt
    catch_up(conn)
    assert snapshot(conn) == rebuilt


def test_a_rebuild_leaves_no_thread_and_the_store_checkpointing_as_before(
    store: EventStore, db_path: Path
) -> None:
    """The rebuild's own thread and connection are gone when it ends, as they are when it
    fails; the store checkpoints its WAL automatically again, and sorts with as many
    helper threads, as it did before."""
    conn = open_database(db_path)
    build_history(store, conn, runs=10, seed=13)
    conn.execute("PRAGMA wal_autocheckpoint=777")
    conn.execute("PRAGMA threads=3")

    rebuild(conn, batch_size=50)

    assert conn.execute("PRAGMA wal_autocheckpoint").fetchall() == [(777,)]
    assert conn.execute("PRAGMA threads").fetchall() == [(3,)]  # the swap's sorts took 1
    assert not [t for t in threading.enumerate() if t.name.startswith("shep-rebuild")]
    run_id = random_run(store, random.Random(14))
    store.recorder.insert_rows(
        [(run_id.hex, store.stream_version(run_id) + 1, "events.runs:NoSuchEvent", b"{}")]
    )
    with pytest.raises(StoreError, match="NoSuchEvent"):
        rebuild(conn, batch_size=50)
    assert conn.execute("PRAGMA wal_autocheckpoint").fetchall() == [(777,)]
    assert not [t for t in threading.enumerate() if t.name.startswith("shep-rebuild")]


@pytest.mark.parametrize("restart_pages", [None, 64])
def test_a_rebuild_starts_the_wal_over_as_it_goes(
    store: EventStore,
    db_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    restart_pages: int | None,
) -> None:
    """The rebuild's checkpoints copy the WAL into the file as it goes; once the WAL holds
    ``_RESTART_WAL_PAGES``, the rebuild waits for the rest to be copied, so that its next
    transaction writes the WAL from its start again instead of growing it by the size of
    every new table. (With no limit it grows past four times the limit here: 801 pages.)"""
    conn = open_database(db_path)
    build_history(store, conn, runs=120, seed=15)
    store.close()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    monkeypatch.setattr(catch_up_module, "_RESTART_WAL_PAGES", restart_pages or 1 << 40)

    rebuild(conn, batch_size=40)

    (page_size,) = conn.execute("PRAGMA page_size").fetchone() or (4096,)
    wal_pages = Path(f"{db_path}-wal").stat().st_size // page_size
    if restart_pages is None:
        assert wal_pages > 4 * 64
    else:
        assert wal_pages <= 3 * restart_pages  # the limit, a batch or two, the swap
