"""Opening a long run's history with `shep replay` against the read commands' baseline.

    python benchmarks/replay.py [--quick]

The store holds a run of 20,000 events (5,000 with ``--quick``) shaped like a
gated workflow that looped: ``draft`` (an agent step with hundreds of lines of
output and heartbeats, and a checkpoint of the whole state after it), then an
approval gate that was rejected and sent the run back to ``draft``, round after
round, until the last round was approved and ``finish`` ran. Each checkpoint
holds the state as LangGraph's serializer writes it (msgpack), growing with
each round. Other runs (2,000 events) share the store.

- ``replay_open_s``: wall time of `shep replay RUN --json --at last`, which
  reads and folds the whole run but decodes only the last frame's checkpoints.
- ``replay_baseline_s``: `python -c "import click, apsw, msgspec"`.
- ``replay_open_ratio``: the two, interleaved, medians (goal: <= 2.0).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from uuid import UUID, uuid4

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import ormsgpack  # noqa: E402

from events.base import Event, utc_now  # noqa: E402
from events.checkpoints import ChannelWrite, CheckpointSaved, WritesSaved  # noqa: E402
from events.inbox import (  # noqa: E402
    ApprovalGranted,
    ApprovalRejected,
    ApprovalRequested,
    item_stream_id,
)
from events.runs import (  # noqa: E402
    AgentOutputRecorded,
    HeartbeatRecorded,
    NodeCompleted,
    NodeStarted,
    RunCompleted,
    RunCreated,
    RunResumed,
    RunStarted,
    RunSuspended,
    Usage,
)
from events.store import EventStore  # noqa: E402

#: Agent output and heartbeats of one ``draft`` round (the rest of a round is ~10 events).
ROUND_OUTPUT = 480


class _LongRun:
    """Numbers and stamps one run's events, and writes its checkpoints as LangGraph does."""

    def __init__(self, run_id: UUID) -> None:
        self.run_id, self.version, self.clock = run_id, 0, utc_now() - timedelta(hours=5)
        self.state: dict[str, object] = {"repo": "/repos/app", "inputs": {}, "results": {}}
        self.step, self.checkpoint_id = -1, ""

    def at(self, ms: int = 1) -> datetime:
        self.clock += timedelta(milliseconds=ms)
        return self.clock

    def __call__(self, cls: type[Event], **fields: object) -> Event:
        self.version += 1
        return cls(
            originator_id=self.run_id,
            originator_version=self.version,
            timestamp=self.at(),
            **fields,
        )

    def checkpoint(self, node: str, update: dict[str, object]) -> Iterator[Event]:
        """The node's writes, then the checkpoint of the state after them."""
        for key, value in update.items():
            current = self.state.get(key)
            if isinstance(current, dict) and isinstance(value, dict):
                self.state[key] = {**current, **value}
            else:
                self.state[key] = value
        parent = self.checkpoint_id or None
        self.step += 1
        self.checkpoint_id = f"1f1e7447-{self.step:04x}-6000-8000-{self.run_id.hex[:12]}"
        if parent is not None:
            yield self(
                WritesSaved,
                checkpoint_id=parent,
                task_id=str(uuid4()),
                task_path=f"~__pregel_pull, {node}",
                writes=[
                    ChannelWrite(n, key, "msgpack", ormsgpack.packb(value))
                    for n, (key, value) in enumerate(update.items())
                ],
            )
        body = {
            "v": 4,
            "ts": self.clock.isoformat(),
            "id": self.checkpoint_id,
            "channel_values": self.state,
            "channel_versions": {key: self.step + 2 for key in self.state},
            "versions_seen": {node: {f"branch:to:{node}": self.step + 1}},
            "updated_channels": sorted(update),
        }
        yield self(
            CheckpointSaved,
            thread_id=self.run_id.hex,
            checkpoint_id=self.checkpoint_id,
            parent_checkpoint_id=parent,
            checkpoint_type="msgpack",
            checkpoint=ormsgpack.packb(body),
            metadata_type="msgpack",
            metadata=ormsgpack.packb({"source": "loop", "step": self.step, "parents": {}}),
            new_versions={key: self.step + 2 for key in update},
            source="loop",
            step=self.step,
        )


def long_run_events(run_id: UUID, events: int, rng: random.Random) -> Iterator[Event]:
    """A gated run of about ``events`` events: draft and a rejected gate, round after round."""
    run = _LongRun(run_id)
    yield run(
        RunCreated,
        workflow="gated-review",
        agent_type="claude-code",
        repo="/repos/app",
        node_names=["draft", "approve", "finish"],
        created_by="bench@host",
    )
    yield run(RunStarted, pid=4000, host="host", epoch=1)
    yield from run.checkpoint("__start__", {"session_id": None})
    rounds = max(1, events // (ROUND_OUTPUT + 12))
    for n in range(1, rounds + 1):
        yield from _agent_node(run, "draft", n, rng)
        yield from _gate(run, n, approved=n == rounds, rng=rng)
    yield from _agent_node(run, "finish", 1, rng)
    yield run(RunCompleted, duration_ms=5 * 3600 * 1000)


def _agent_node(run: _LongRun, node: str, iteration: int, rng: random.Random) -> Iterator[Event]:
    yield run(NodeStarted, node=node, iteration=iteration)
    text: list[str] = []
    for i in range(ROUND_OUTPUT):
        if i % 25 == 24:
            yield run(HeartbeatRecorded, pid=4000, host="host", node=node, tokens_so_far=i)
            continue
        line = f"Round {iteration}: reading module {i} and noting what the change touches."
        text.append(line)
        yield run(AgentOutputRecorded, node=node, kind="text", text=line)
    yield run(
        NodeCompleted,
        node=node,
        duration_ms=rng.randrange(20_000, 90_000),
        usage=Usage(input_tokens=4000, output_tokens=1500, cost_usd=0.02),
    )
    summary = "\n".join(text[-12:])
    yield from run.checkpoint(
        node,
        {"results": {node: summary}, "iterations": {node: iteration}, "session_id": "sess-1"},
    )


def _gate(run: _LongRun, n: int, *, approved: bool, rng: random.Random) -> Iterator[Event]:
    interrupt_id = f"{rng.getrandbits(128):032x}"
    item = item_stream_id(run.run_id, interrupt_id)
    yield ApprovalRequested(
        originator_id=item,
        originator_version=1,
        timestamp=run.at(),
        run_id=run.run_id,
        node="approve",
        summary=f"Draft {n} ready",
        phase="draft",
        iteration=n,
        interrupt_id=interrupt_id,
    )
    yield run(NodeStarted, node="approve", iteration=n, kind="approval")
    yield run(RunSuspended, item_ids=[item], approval=True)
    decided = ApprovalGranted if approved else ApprovalRejected
    yield decided(
        originator_id=item,
        originator_version=2,
        timestamp=run.at(60_000),
        actor="user:reviewer",
        rationale="ship it" if approved else f"round {n}: name the modules it touches",
        run_id=run.run_id,
        node="approve",
    )
    yield run(RunResumed, pid=4000 + n, host="host", epoch=n + 1)
    yield run(NodeCompleted, node="approve", duration_ms=1, waited_ms=60_000)
    verdict = "approved" if approved else "rejected"
    yield from run.checkpoint(
        "approve", {"verdicts": {"approve": verdict}, "iterations": {"approve": n}}
    )


def write_store(home: Path, events: int, seed: int = 3) -> tuple[str, int]:
    """The long run and some others in ``home``'s store: (the run's hex id, its events)."""
    from benchmarks.history import write_history

    rng = random.Random(seed)
    run_id = uuid4()
    with EventStore(home / "shep.db") as store:
        write_history(store, 20, 100, seed=seed)
        batch: list[Event] = []
        count = 0
        for event in long_run_events(run_id, events, rng):
            batch.append(event)
            if len(batch) == 2000:
                store.append(batch)
                count += len(batch)
                batch = []
        store.append(batch)
        write_history(store, 20, 100, seed=seed + 1)
    return run_id.hex, count + len(batch)


def bench(quick: bool) -> dict[str, float]:
    """``replay_open_ratio``: `shep replay RUN --json --at last` on the long run, over the
    import of click, apsw and msgspec (both as fresh processes, interleaved medians).
    """
    from benchmarks.run import _cold_ratio, _compile_sources

    with tempfile.TemporaryDirectory(prefix="shep-bench-replay-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir(mode=0o700)
        run_hex, events = write_store(home, 5_000 if quick else 20_000)
        env = {**os.environ, "SHEP_HOME": str(home), "PYTHONPATH": str(ROOT)}
        _compile_sources()
        command = [sys.executable, "-m", "shep", "replay", run_hex, "--json", "--at", "last"]
        last = subprocess.run(command, check=True, env=env, capture_output=True, text=True)
        frame = json.loads(last.stdout)
        if frame["kind"] != "run" or frame["status"] != "completed":
            raise AssertionError(f"the last frame is not the run's end: {frame}")
        ours, baseline, cpu, baseline_cpu = _cold_ratio(command, env, rounds=5 if quick else 9)
    return {
        "replay_events": events,
        "replay_frames": frame["index"],
        "replay_open_s": round(ours, 4),
        "replay_baseline_s": round(baseline, 4),
        "replay_open_ratio": round(ours / baseline, 3),
        "replay_cpu_ratio": round(cpu / baseline_cpu, 3),
    }


if __name__ == "__main__":
    print(json.dumps(bench("--quick" in sys.argv[1:]), indent=2))
