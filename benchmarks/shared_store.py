"""The shared store (PostgreSQL): durable appends against raw psycopg, and 8 writers at once.

- ``pg_append_ratio``: single-event appends per second through shep's store
  (table lock, head read, chain hash, OCC) over single-row INSERTs with commit
  through psycopg alone, on the same server and database, rows of the same
  shape and size, interleaved. The issue's goal is at least 0.7.
- ``pg_writers_8_events_per_s``: 8 processes appending at once through
  ``EventStore(url)``, then the log is checked: positions exactly 1..N (none
  lost, none twice) and the chain verifies on the server. The same load on a
  SQLite file, in the same run, gives ``pg_writers_8_vs_sqlite_ratio``.
- ``pg_status_ratio``: wall time of ``shep status`` on a home on the shared
  store over the same command on a home whose shep.db holds the same log; lower
  is better, 1 is par. Measured in the steady state of a user who runs status
  often: the first read started the home's keeper (``projections.keeper``), which
  has copied the log and checks with the server every few seconds, so each
  status reads the copy as it is (no psycopg, no query to the server). The goal
  is at most 1.3.
- ``pg_status_pull_ratio``: the same without a keeper (``SHEP_SHARED_KEEPER=0``,
  none running): each status imports psycopg and asks the server what is new
  (one query finds nothing), as every status did before the keeper.

The server is a throwaway cluster (``tests/support/postgres_server.py``) with fsync on
and synchronous_commit on, so a commit waits for the disk as a real one does.
Without PostgreSQL's binaries the figures are left out, with a note.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from uuid import uuid4

if str(Path(__file__).resolve().parent.parent) not in sys.path:  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.history import write_history
from benchmarks.run import (
    ROOT,
    TOPIC,
    _compile_sources,
    _heartbeat,
    _interleaved,
    _wall,
)
from events.store import EventStore
from projections.keeper import AUTOSTART_ENV, keeper_pid, kept
from projections.mirror import copy_file
from tests.support.postgres_server import PostgresServer, find_binaries

WRITERS = 8

_RAW_TABLE = (
    "CREATE TABLE raw (id bigint PRIMARY KEY, originator_id text NOT NULL, "
    "originator_version bigint NOT NULL, topic text NOT NULL, state bytea NOT NULL, "
    "UNIQUE (originator_id, originator_version))"
)

_WRITER = """
import sys, uuid
sys.path.insert(0, sys.argv[3])
from benchmarks.run import _heartbeat
from events.store import EventStore
with EventStore(sys.argv[1]) as store:
    stream = uuid.uuid4()
    sys.stdout.write("ready\\n"); sys.stdout.flush()
    sys.stdin.readline()
    for v in range(1, int(sys.argv[2]) + 1):
        store.append([_heartbeat(stream, v)])
"""


def bench_pg_appends(url: str, n: int, rounds: int) -> dict[str, float]:
    import psycopg

    store = EventStore(url)
    raw = psycopg.connect(url)
    raw.execute(_RAW_TABLE)
    raw.commit()
    payload = bytes(len(store._mapper.to_stored_event(_heartbeat(uuid4(), 1)).state))
    next_id = 0

    def ours() -> float:
        stream = uuid4()
        events = [_heartbeat(stream, v) for v in range(1, n + 1)]
        start = time.perf_counter()
        for event in events:
            store.append([event])
        return n / (time.perf_counter() - start)

    def baseline() -> float:
        nonlocal next_id
        stream = uuid4().hex
        start = time.perf_counter()
        for v in range(1, n + 1):
            next_id += 1
            raw.execute(
                "INSERT INTO raw VALUES (%s, %s, %s, %s, %s)", (next_id, stream, v, TOPIC, payload)
            )
            raw.commit()
        return n / (time.perf_counter() - start)

    ours_rate, raw_rate = _interleaved(ours, baseline, rounds)
    store.close()
    raw.close()
    return {
        "pg_append_per_s": round(ours_rate),
        "pg_append_raw_per_s": round(raw_rate),
        "pg_append_ratio": round(ours_rate / raw_rate, 3),
    }


def _writers(location: str, per_writer: int) -> float:
    """Events per second of ``WRITERS`` processes appending at once to ``location``."""
    EventStore(location).close()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, location, str(per_writer), str(ROOT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(WRITERS)
    ]
    for p in procs:
        assert p.stdout is not None
        if p.stdout.readline() != "ready\n":
            raise RuntimeError("a writer failed to start")
    start = time.perf_counter()
    for p in procs:  # all at once: each has imported and connected already
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    codes = [p.wait(timeout=600) for p in procs]
    elapsed = time.perf_counter() - start
    if any(codes):
        raise RuntimeError(f"writers exited with {codes}")
    return WRITERS * per_writer / elapsed


def bench_pg_writers(url: str, sqlite_path: Path, per_writer: int) -> dict[str, object]:
    import psycopg

    from events.postgres_verify import verify_pg_chain

    pg_rate = _writers(url, per_writer)
    sqlite_rate = _writers(str(sqlite_path), per_writer)
    total = WRITERS * per_writer
    with psycopg.connect(url) as conn:
        ids = [r[0] for r in conn.execute("SELECT notification_id FROM stored_events ORDER BY 1")]
    report = verify_pg_chain(url)
    return {
        "pg_writers_8_events_per_s": round(pg_rate),
        "sqlite_writers_8_events_per_s": round(sqlite_rate),
        "pg_writers_8_vs_sqlite_ratio": round(pg_rate / sqlite_rate, 3),
        "pg_writers_8_gap_free": ids == list(range(1, total + 1)),
        "pg_writers_8_chain_verifies": report.ok and report.events == total,
    }


def bench_pg_status(url: str, work: Path, runs: int, rounds: int) -> dict[str, float]:
    """`shep status` on a shared home over the same log in a home's own shep.db."""
    local = work / "status-local"
    local.mkdir(mode=0o700)
    with EventStore(local / "shep.db") as store:
        write_history(store, runs, 103)
    base_env = {k: v for k, v in os.environ.items() if k != "SHEP_DATABASE_URL"}
    local_env = {**base_env, "SHEP_HOME": str(local), "PYTHONPATH": str(ROOT)}
    shep = [sys.executable, "-m", "shep"]
    subprocess.run(
        [*shep, "store", "migrate", "--to", url],
        env=local_env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    shared_home = work / "status-shared"
    shared_env = {**local_env, "SHEP_HOME": str(shared_home), "SHEP_DATABASE_URL": url}
    pulling_env = {**shared_env, AUTOSTART_ENV: "0"}
    _compile_sources()
    status = [*shep, "status"]
    for env in (pulling_env, local_env):
        _wall(status, env)  # the copy is made, the projections caught up, the cache warm
    pulling, own_before = _interleaved(
        lambda: _wall(status, pulling_env), lambda: _wall(status, local_env), rounds
    )
    _wall(status, shared_env)  # starts the keeper, as a user's first status does
    copy = copy_file(str(shared_home), url)
    try:
        deadline = time.monotonic() + 60
        while not _kept(copy, url):
            if time.monotonic() > deadline:
                raise RuntimeError("the keeper did not start")
            time.sleep(0.1)
        kept, own = _interleaved(
            lambda: _wall(status, shared_env), lambda: _wall(status, local_env), rounds
        )
        still_kept = _kept(copy, url)
    finally:
        pid = keeper_pid(copy)
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
    if not still_kept:
        raise RuntimeError("the keeper stopped keeping the copy while status was measured")
    return {
        "pg_status_s": round(kept, 4),
        "pg_status_sqlite_s": round(own, 4),
        "pg_status_ratio": round(kept / own, 3),
        "pg_status_pull_s": round(pulling, 4),
        "pg_status_pull_ratio": round(pulling / own_before, 3),
    }


def _kept(copy: str, url: str) -> bool:
    """Whether a status on the shared home reads its copy as it is (the keeper checked)."""
    from events.postgres_url import where
    from events.sqlite_file import connect

    if not os.path.exists(copy):
        return False
    conn = connect(copy, readonly=True)
    try:
        return kept(conn, copy, where(url)) is not None
    finally:
        conn.close()


def bench(quick: bool) -> dict[str, object]:
    binaries = find_binaries()
    if binaries is None:
        return {"pg_skipped": "PostgreSQL binaries not found (apt-get install postgresql)"}
    server = PostgresServer(
        binaries, settings=("fsync=on", "full_page_writes=on", "synchronous_commit=on")
    ).start()
    try:
        results: dict[str, object] = {}
        results.update(
            bench_pg_appends(server.database(), n=100 if quick else 500, rounds=3 if quick else 5)
        )
        with tempfile.TemporaryDirectory(prefix="shep-bench-pg-") as tmp:
            results.update(
                bench_pg_writers(
                    server.database(), Path(tmp) / "writers.db", per_writer=25 if quick else 100
                )
            )
            results.update(
                bench_pg_status(
                    server.database(),
                    Path(tmp),
                    runs=200 if quick else 1000,
                    rounds=5 if quick else 9,
                )
            )
        return results
    finally:
        server.stop()


if __name__ == "__main__":
    import json

    print(json.dumps(bench("--quick" in sys.argv)))
