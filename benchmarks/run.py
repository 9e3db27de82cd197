"""shep's benchmarks: each figure measured side by side with its baseline, in one run.

    python benchmarks/run.py --json [--quick]

prints one JSON object. Ratios, not absolute times, are what to compare: the
machines are noisy, so every ratio's two sides run interleaved in the same process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from uuid import uuid4

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import apsw  # noqa: E402

from benchmarks.history import write_history  # noqa: E402
from events.base import utc_now  # noqa: E402
from events.runs import HeartbeatRecorded  # noqa: E402
from events.schema import DEFAULT_SYNCHRONOUS, connect  # noqa: E402
from events.store import EventStore  # noqa: E402

TOPIC = "events.runs:HeartbeatRecorded"
RAW_TABLE = (
    "CREATE TABLE raw (id INTEGER PRIMARY KEY, originator_id TEXT, originator_version INTEGER, "
    "topic TEXT, state BLOB, UNIQUE (originator_id, originator_version))"
)


def _heartbeat(stream: object, version: int) -> HeartbeatRecorded:
    return HeartbeatRecorded(
        originator_id=stream,
        originator_version=version,  # type: ignore[arg-type]
        timestamp=utc_now(),
        pid=1234,
        host="bench-host",
        node="scan",
        tokens_so_far=version,
    )


def _interleaved(
    ours: Callable[[], float], baseline: Callable[[], float], rounds: int
) -> tuple[float, float]:
    """Median rate of each side over ``rounds`` alternating rounds."""
    a: list[float] = []
    b: list[float] = []
    for _ in range(rounds):
        a.append(ours())
        b.append(baseline())
    return statistics.median(a), statistics.median(b)


def bench_appends(workdir: Path, n_single: int, n_batches: int, rounds: int) -> dict[str, float]:
    """Durable appends through our store vs raw apsw INSERTs, same synchronous setting."""
    store = EventStore(workdir / "append.db")
    raw = connect(workdir / "raw.db", synchronous=DEFAULT_SYNCHRONOUS)
    raw.execute(RAW_TABLE)
    # The baseline writes rows of the same shape and size as ours: same id, topic
    # and state length, without our mapping, hashing and concurrency checks.
    payload = bytes(len(store._mapper.to_stored_event(_heartbeat(uuid4(), 1)).state))

    def ours_single() -> float:
        stream = uuid4()
        events = [_heartbeat(stream, v) for v in range(1, n_single + 1)]
        start = time.perf_counter()
        for event in events:
            store.append([event])
        return n_single / (time.perf_counter() - start)

    def raw_single() -> float:
        stream = uuid4().hex
        start = time.perf_counter()
        for v in range(1, n_single + 1):
            raw.execute("INSERT INTO raw VALUES (NULL,?,?,?,?)", (stream, v, TOPIC, payload))
        return n_single / (time.perf_counter() - start)

    def ours_batch() -> float:
        stream = uuid4()
        batches = [
            [_heartbeat(stream, b * 100 + i) for i in range(1, 101)] for b in range(n_batches)
        ]
        start = time.perf_counter()
        for batch in batches:
            store.append(batch)
        return n_batches * 100 / (time.perf_counter() - start)

    def raw_batch() -> float:
        stream = uuid4().hex
        start = time.perf_counter()
        for b in range(n_batches):
            raw.execute("BEGIN")
            raw.executemany(
                "INSERT INTO raw VALUES (NULL,?,?,?,?)",
                [(stream, b * 100 + i, TOPIC, payload) for i in range(1, 101)],
            )
            raw.execute("COMMIT")
        return n_batches * 100 / (time.perf_counter() - start)

    single, raw_single_rate = _interleaved(ours_single, raw_single, rounds)
    batch, raw_batch_rate = _interleaved(ours_batch, raw_batch, rounds)
    store.close()
    raw.close()
    return {
        "append_single_per_s": round(single),
        "append_single_raw_per_s": round(raw_single_rate),
        "append_single_ratio": round(single / raw_single_rate, 3),
        "append_batch_per_s": round(batch),
        "append_batch_raw_per_s": round(raw_batch_rate),
        "append_batch_ratio": round(batch / raw_batch_rate, 3),
    }


def bench_rebuild(db: Path, rounds: int) -> dict[str, float]:
    """Full rebuild of every projection from the log (median of ``rounds``)."""
    from projections.database import open_database
    from projections.runner import rebuild

    conn = open_database(db)
    times = []
    count = 0
    for _ in range(rounds):
        start = time.perf_counter()
        count = rebuild(conn)
        times.append(time.perf_counter() - start)
    conn.close()
    seconds = statistics.median(times)
    return {
        "rebuild_events": count,
        "rebuild_seconds": round(seconds, 2),
        "rebuild_events_per_s": round(count / seconds),
    }


def _wall(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def bench_status_cold(home: Path, runs: int, events: int, rounds: int) -> dict[str, float]:
    """Wall time of `shep status` on a big store over `python -c "import click, apsw, msgspec"`."""
    env = {**os.environ, "SHEP_HOME": str(home), "PYTHONPATH": str(ROOT)}
    # An installed shep has bytecode (pip compiles it), like the baseline's libraries.
    # From a source checkout under PYTHONDONTWRITEBYTECODE=1 every run would compile
    # our modules again; compile them once, as an install would.
    import compileall

    for package in ("shep", "commands", "events", "projections"):
        compileall.compile_dir(ROOT / package, quiet=2)
    status = [sys.executable, "-m", "shep", "status"]
    base = [sys.executable, "-c", "import click, apsw, msgspec"]
    _wall(status, env)  # warm the page cache for both sides alike
    _wall(base, env)
    ours, baseline = _interleaved(lambda: _wall(status, env), lambda: _wall(base, env), rounds)
    return {
        "status_runs": runs,
        "status_events": events,
        "status_cold_s": round(ours, 4),
        "status_baseline_s": round(baseline, 4),
        "status_cold_ratio": round(ours / baseline, 3),
    }


def bench_follow_latency(home: Path, samples: int) -> dict[str, float]:
    """Event appended here -> printed by `shep logs --follow` in another process."""
    from commands.create_run import create_run
    from commands.record_agent_output import OutputItem, record_agent_output
    from commands.start_run import start_run

    env = {**os.environ, "SHEP_HOME": str(home), "PYTHONPATH": str(ROOT)}
    store = EventStore(home / "shep.db")
    run_id = create_run(
        store, workflow="bench", agent_type="demo", repo="/r", node_names=["a"], created_by="bench"
    )
    start_run(store, run_id, pid=os.getpid(), host="bench")
    follower = subprocess.Popen(
        [sys.executable, "-m", "shep", "logs", run_id.hex, "--follow"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        bufsize=1,
    )
    assert follower.stdout is not None
    follower.stdout.readline()
    follower.stdout.readline()
    latencies = []
    for i in range(samples):
        marker = f"marker-{i}"
        sent = time.perf_counter()
        record_agent_output(store, run_id, "a", [OutputItem(kind="text", text=marker)])
        while marker not in follower.stdout.readline():
            pass
        latencies.append((time.perf_counter() - sent) * 1000)
        time.sleep(0.05)
    follower.kill()
    store.close()
    return {
        "follow_latency_ms": round(statistics.median(latencies), 1),
        "follow_latency_p90_ms": round(sorted(latencies)[int(len(latencies) * 0.9) - 1], 1),
    }


def bench_resume(workdir: Path, kills: int) -> dict[str, float]:
    """SIGKILL background workers at random moments and resume: count re-executed nodes."""
    from tests.runtime.chaos import Chaos

    workdir.mkdir()
    report = Chaos(workdir, seed=11).run(kills)
    return {
        "resume_kills": report.kills,
        "resume_runs": len(report.runs),
        "resume_reexecuted_nodes": report.reexecuted_nodes,
        "resume_all_completed": set(report.statuses.values()) == {"completed"},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for CI")
    args = parser.parse_args()
    quick = args.quick
    results: dict[str, object] = {
        "quick": quick,
        "synchronous": DEFAULT_SYNCHRONOUS,
        "apsw_sqlite": apsw.sqlite_lib_version(),
    }
    with tempfile.TemporaryDirectory(prefix="shep-bench-") as tmp:
        work = Path(tmp)
        results.update(
            bench_appends(
                work,
                n_single=200 if quick else 1000,
                n_batches=20 if quick else 100,
                rounds=3 if quick else 5,
            )
        )
        home = work / "home"
        home.mkdir(mode=0o700)
        runs, per_run = (1_000, 103) if quick else (10_000, 103)
        with EventStore(home / "shep.db") as store:
            events = write_history(store, runs, per_run)
        results.update(bench_rebuild(home / "shep.db", rounds=3))
        results.update(bench_status_cold(home, runs, events, rounds=5 if quick else 9))
        follow_home = work / "follow"
        follow_home.mkdir(mode=0o700)
        results.update(bench_follow_latency(follow_home, samples=10 if quick else 30))
        from benchmarks.checkpointer import bench as bench_checkpointer  # imports langgraph

        results.update(bench_checkpointer(quick))
        results.update(bench_resume(work / "chaos", kills=5 if quick else 20))
    print(json.dumps(results, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
