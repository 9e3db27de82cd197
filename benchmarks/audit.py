"""The audit trail's figures: ``shep audit export`` and ``shep audit verify`` on a big log.

    python benchmarks/audit.py [--quick]

A log of 1,000,000 events (100,000 with ``--quick``): runs of 103 events as
``benchmarks.history`` writes them (agent output, heartbeats, nodes), one in ten
a gated run whose approval gate was decided, so the export meets decisions too.

- ``export_events_per_s``: ``write_jsonl`` of the whole log into a file
  (the work of ``shep audit export --output FILE``; goal: >= 150,000).
- ``export_peak_rss_mb``: the peak resident memory of the process running
  ``shep audit export --output FILE`` on that log, and ``export_baseline_rss_mb``
  that of ``python -c "import click, apsw, msgspec"``: the export's own memory
  is the difference, and it does not grow with the log.
- ``verify_events_per_s``: ``verify_chain`` over the store (the work of
  ``shep audit verify``; goal: >= 300,000).
- ``export_verify_events_per_s``: ``verify_export`` of the exported file,
  offline (``shep audit verify --export FILE``).
"""

from __future__ import annotations

import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID, uuid4

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.history import run_events, waiting_run_events  # noqa: E402
from events.audit import open_log, verify_chain  # noqa: E402
from events.base import Event, utc_now  # noqa: E402
from events.catalog import encode_event, topic_of  # noqa: E402
from events.chain import GENESIS_HASH, chain_hash  # noqa: E402
from events.inbox import ApprovalGranted, ApprovalRequested  # noqa: E402
from events.sqlite_file import connect  # noqa: E402
from events.store import EventStore  # noqa: E402

EVENTS_PER_RUN = 103
GATED_EVERY = 10

Row = tuple[str, int, str, bytes]


def _template(events: Iterator[Event]) -> list[tuple[UUID, int, str, bytes]]:
    return [
        (e.originator_id, e.originator_version, topic_of(type(e)), encode_event(e)) for e in events
    ]


def _gated_run(run_id: UUID, rng: random.Random) -> Iterator[Event]:
    """A gated run's events, then the gate approved by a person."""
    for event in waiting_run_events(run_id, EVENTS_PER_RUN - 1, rng, approval=True):
        yield event
        if isinstance(event, ApprovalRequested):
            gate = event
    yield ApprovalGranted(
        originator_id=gate.originator_id,
        originator_version=2,
        timestamp=utc_now(),
        actor="user:alice",
        rationale='=HYPERLINK("http://example.com") looks right',
        run_id=run_id,
        node=gate.node,
    )


def _runs(runs: int, seed: int) -> Iterator[Row]:
    """Each run's rows: a template run's encoded events with fresh stream ids put in.

    Encoding ~100 msgspec Structs per run is most of the cost of writing a history;
    swapping ids in encoded bytes is cheap and keeps every event's shape as real.
    """
    rng = random.Random(seed)
    plain = _template(run_events(uuid4(), EVENTS_PER_RUN, rng, finish=True))
    gated = _template(_gated_run(uuid4(), rng))
    for i in range(runs):
        template = gated if i % GATED_EVERY == GATED_EVERY - 1 else plain
        # A gate's stream id is in its events (and the run's id in the gate's).
        fresh = {str(stream).encode(): uuid4() for stream in dict.fromkeys(s for s, *_ in template)}
        for stream, version, topic, stored in template:
            state = stored
            for old, new in fresh.items():
                state = state.replace(old, str(new).encode())
            yield fresh[str(stream).encode()].hex, version, topic, state


def fill_log(db_path: Path, events: int, *, seed: int = 1) -> int:
    """Append about ``events`` events (whole runs) to the store at ``db_path``, fast.

    Rows are inserted directly, with their chain hashes, in big transactions and
    ``synchronous=OFF``: a benchmark's store, not a user's. Returns the count.
    """
    EventStore(db_path).close()  # the tables, as shep creates them
    conn = connect(db_path, synchronous="OFF")
    try:
        last = conn.execute(
            "SELECT notification_id, chain_hash FROM stored_events "
            "ORDER BY notification_id DESC LIMIT 1"
        ).fetchone()
        position, previous = (last[0], last[1]) if last else (0, GENESIS_HASH)
        batch: list[tuple[str, int, str, bytes, bytes]] = []
        runs = max(1, round(events / EVENTS_PER_RUN))
        for stream, version, topic, state in _runs(runs, seed):
            position += 1
            previous = chain_hash(
                previous, position, stream.encode(), version, topic.encode(), state
            )
            batch.append((stream, version, topic, state, previous))
            if len(batch) == 50_000:
                _insert(conn, batch)
        _insert(conn, batch)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return int(position)


def _insert(conn: object, batch: list[tuple[str, int, str, bytes, bytes]]) -> None:
    import apsw

    assert isinstance(conn, apsw.Connection)
    with conn:
        conn.executemany(
            "INSERT INTO stored_events (originator_id, originator_version, topic, state, "
            "chain_hash) VALUES (?,?,?,?,?)",
            batch,
        )
    batch.clear()


def _peak_rss_mb(cmd: list[str], env: dict[str, str]) -> float:
    """The peak resident memory (MB) of ``cmd``, run to its end in a fresh process."""
    code = (
        "import resource, subprocess, sys; "
        "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, *cmd], check=True, capture_output=True, text=True, env=env
    ).stdout
    return int(out.split()[-1]) / 1024  # Linux reports KiB


def bench(quick: bool) -> dict[str, float]:
    """Export and verify rates on a log of 1M events (100k quick), and the export's memory."""
    from shep.audit.export import ExportFilter, write_jsonl
    from shep.audit.verify_export import verify_export

    size = 100_000 if quick else 1_000_000
    with tempfile.TemporaryDirectory(prefix="shep-bench-audit-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir(mode=0o700)
        db = home / "shep.db"
        events = fill_log(db, size)
        out = Path(tmp) / "export.jsonl"

        conn = open_log(db)
        start = time.perf_counter()
        report = verify_chain(conn)
        verify_s = time.perf_counter() - start
        conn.close()
        assert report.ok, report
        assert report.events == events, report

        start = time.perf_counter()
        with open(out, "wb") as f:
            summary = write_jsonl(db, ExportFilter(), f)
        export_s = time.perf_counter() - start
        assert summary.count == events

        start = time.perf_counter()
        checked = verify_export(out)
        check_s = time.perf_counter() - start
        assert checked.ok, checked
        export_mb = out.stat().st_size / 1e6

        env = {**os.environ, "SHEP_HOME": str(home), "PYTHONPATH": str(ROOT)}
        cli = [sys.executable, "-m", "shep", "audit", "export", "--output", str(out)]
        rss = _peak_rss_mb(cli, env)
        baseline = _peak_rss_mb([sys.executable, "-c", "import click, apsw, msgspec"], env)
    return {
        "audit_events": events,
        "export_events_per_s": round(events / export_s),
        "export_file_mb": round(export_mb, 1),
        "export_peak_rss_mb": round(rss, 1),
        "export_baseline_rss_mb": round(baseline, 1),
        "verify_events_per_s": round(events / verify_s),
        "export_verify_events_per_s": round(events / check_s),
        "audit_own_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


if __name__ == "__main__":
    import json

    print(json.dumps(bench("--quick" in sys.argv), indent=2))
