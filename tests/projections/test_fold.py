"""Folding agent output a segment at a time, as fold views, writes what folding each event
whole does."""

from __future__ import annotations

import gzip
import random
import shutil
from pathlib import Path

import pytest

from events.runs import AgentOutputRecorded
from events.store import EventStore
from projections import fold
from projections.catch_up import rebuild
from projections.database import open_database
from tests.projections.test_rebuild import snapshot
from tests.support.histories import random_decisions, random_run

HISTORIES = Path(__file__).parents[1] / "support" / "histories"


def _odd_times(store: EventStore) -> None:
    """Agent output stamped as msgspec writes no time of shep's: another offset, a naive
    time, a fraction of other digits. Each is folded as its decoded datetime's isoformat."""
    run_id = random_run(store, random.Random(9))
    version = store.stream_version(run_id)
    rows = []
    for n, stamp in enumerate(
        ["2026-01-01T10:00:00+02:00", "2026-01-01T10:00:00", "2026-01-01T10:00:00.5Z"], start=1
    ):
        state = (
            b'{"originator_id":"%s","originator_version":%d,"timestamp":"%s",'
            b'"node":"scan","kind":"text","text":"line %d"}'
            % (str(run_id).encode(), version + n, stamp.encode(), n)
        )
        rows.append((run_id.hex, version + n, "events.runs:AgentOutputRecorded", state))
    store.recorder.insert_rows(rows)


@pytest.mark.parametrize("entry", ["0.1.0", "0.2.0"])
def test_segments_fold_as_events_do(
    db_path: Path, monkeypatch: pytest.MonkeyPatch, entry: str
) -> None:
    """An old store (older versions of other types among its events), with runs of this shep
    and agent output at odd times appended, rebuilds to the same tables through fold views
    as through whole events: values, and timestamps to the byte."""
    with gzip.open(HISTORIES / entry / "shep.db.gz") as old, db_path.open("wb") as copy:
        shutil.copyfileobj(old, copy)
    conn = open_database(db_path)
    with EventStore(db_path) as store:
        rng = random.Random(3)
        for _ in range(20):
            run_id = random_run(store, rng)
            if rng.random() < 0.3:
                random_decisions(store, run_id, rng)
        _odd_times(store)
    decoded: list[int] = []
    decode = fold.Views.decode

    def counted(self: fold.Views, states: list[bytes]) -> object:
        views = decode(self, states)
        decoded.append(len(views or ()))
        return views

    monkeypatch.setattr(fold.Views, "decode", counted)
    rebuild(conn, batch_size=50)
    as_views = snapshot(conn)
    assert (
        sum(decoded)
        == conn.execute(
            "SELECT count(*) FROM stored_events WHERE topic=?", ("events.runs:AgentOutputRecorded",)
        ).fetchone()[0]
    ), "some agent output was not folded as a view"

    monkeypatch.setattr(fold.Views, "decode", lambda self, states: None)
    rebuild(conn, batch_size=50)
    assert snapshot(conn) == as_views
    times = {row[2] for row in as_views["logs"]}
    assert {"2026-01-01T10:00:00+02:00", "2026-01-01T10:00:00"} <= times
    assert "2026-01-01T10:00:00.500000+00:00" in times


def test_a_view_takes_only_the_current_form() -> None:
    """A state with a field the class does not know, or a version tag, is not read as a view
    (it goes through ``decode_event``, which upcasts or refuses it)."""
    views = fold.views_of(AgentOutputRecorded)
    current = (
        b'{"originator_id":"00000000-0000-0000-0000-000000000001","originator_version":1,'
        b'"timestamp":"2026-01-01T00:00:00Z","node":"scan","kind":"text"}'
    )
    assert views.decode([current]) is not None
    assert views.decode([current, current[:-1] + b',"channel":"stderr"}']) is None
    assert views.decode([b'{"class_version":2,' + current[1:]]) is None
    assert views.decode([current + b"," + current]) is None
    assert views.decode([b'{"node":']) is None
