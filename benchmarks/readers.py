"""The memory of the commands that read a whole run: a long run must not fill the memory.

    python benchmarks/readers.py [--quick]

One run of 400,000 events (20,000 with ``--quick``), written through the commands a
worker calls: four nodes, each with 100,000 lines of agent output (5,000 quick) of a
few hundred characters, recorded in batches of 1,000 as a worker records them.

- ``readers_events``: the run's events; ``readers_log_mb``: the size of shep.db.
- ``logs_peak_rss_mb``, ``logs_json_peak_rss_mb``, ``replay_peak_rss_mb``,
  ``replay_json_peak_rss_mb``: the peak resident memory of `shep logs RUN`,
  `shep logs RUN --json`, `shep replay RUN` and `shep replay RUN --json`, output to
  /dev/null; ``readers_baseline_rss_mb``: that of `python -c "import click, apsw, msgspec"`.
- ``..._rss_ratio``: each over the baseline (goal: <= 2.0, whatever the run's length).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from uuid import UUID

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.audit import _peak_rss_mb  # noqa: E402
from events.store import EventStore  # noqa: E402

NODES = ("plan", "implement", "test", "review")
BATCH = 1_000
#: A line as agents write them: a path, some code, a sentence.
LINE = "src/shep/module_{i}.py:{i}: " + "x = compute(value, other) + adjust(limit) " * 3


def write_run(db: Path, lines_per_node: int) -> tuple[UUID, int]:
    """A completed run whose nodes wrote ``lines_per_node`` lines each: (its id, its events)."""
    from commands.complete_run import complete_run
    from commands.create_run import create_run
    from commands.record_agent_output import OutputItem, record_agent_output
    from commands.record_node import record_node_completed, record_node_started
    from commands.start_run import start_run

    with EventStore(db) as store:
        run_id = create_run(
            store,
            workflow="bench",
            agent_type="demo",
            repo="/r",
            node_names=list(NODES),
            created_by="bench",
        )
        start_run(store, run_id, pid=1, host="bench")
        for node in NODES:
            record_node_started(store, run_id, node, epoch=1)
            for start in range(0, lines_per_node, BATCH):
                items = [
                    OutputItem(kind="text", text=LINE.format(i=i))
                    for i in range(start, min(start + BATCH, lines_per_node))
                ]
                record_agent_output(store, run_id, node, items, epoch=1)
            record_node_completed(store, run_id, node, duration_ms=1, epoch=1)
        complete_run(store, run_id, duration_ms=1, epoch=1)
        return run_id, store.stream_version(run_id)


def bench(quick: bool) -> dict[str, float]:
    """The readers' peak memory on one long run, over the bare interpreter's."""
    from benchmarks.run import _compile_sources

    with tempfile.TemporaryDirectory(prefix="shep-bench-readers-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir(mode=0o700)
        run_id, events = write_run(home / "shep.db", 5_000 if quick else 100_000)
        env = {**os.environ, "SHEP_HOME": str(home), "PYTHONPATH": str(ROOT)}
        _compile_sources()
        shep = [sys.executable, "-m", "shep"]
        _peak_rss_mb([*shep, "status"], env)  # the projections caught up, as a user's would be
        baseline = _peak_rss_mb([sys.executable, "-c", "import click, apsw, msgspec"], env)
        results: dict[str, float] = {
            "readers_events": events,
            "readers_log_mb": round((home / "shep.db").stat().st_size / 1e6, 1),
            "readers_baseline_rss_mb": round(baseline, 1),
        }
        for name, args in (
            ("logs", ["logs", run_id.hex]),
            ("logs_json", ["logs", run_id.hex, "--json"]),
            ("replay", ["replay", run_id.hex]),
            ("replay_json", ["replay", run_id.hex, "--json"]),
        ):
            rss = _peak_rss_mb([*shep, *args], env)
            results[f"{name}_peak_rss_mb"] = round(rss, 1)
            results[f"{name}_rss_ratio"] = round(rss / baseline, 3)
    return results


if __name__ == "__main__":
    print(json.dumps(bench("--quick" in sys.argv[1:]), indent=2))
