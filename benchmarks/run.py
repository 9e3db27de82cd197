"""shep's benchmarks: each figure measured side by side with its baseline, in one run.

    python benchmarks/run.py --json [--quick]

prints one JSON object. Ratios, not absolute times, are what to compare: the
machines are noisy, so every ratio's two sides run interleaved in the same process.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from uuid import UUID, uuid4

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import apsw  # noqa: E402

from benchmarks.history import write_history  # noqa: E402
from events.base import utc_now  # noqa: E402
from events.runs import HeartbeatRecorded  # noqa: E402
from events.sqlite_file import DEFAULT_SYNCHRONOUS, connect  # noqa: E402
from events.store import EventStore  # noqa: E402

TOPIC = "events.runs:HeartbeatRecorded"
RAW_TABLE = (
    "CREATE TABLE raw (id INTEGER PRIMARY KEY, originator_id TEXT, originator_version INTEGER, "
    "topic TEXT, state BLOB, UNIQUE (originator_id, originator_version))"
)


def _heartbeat(stream: UUID, version: int) -> HeartbeatRecorded:
    return HeartbeatRecorded(
        originator_id=stream,
        originator_version=version,
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
    #: Each side's CPU seconds per round: steadier than the wall times, which the syncs'
    #: waits on a busy disk swing both ways.
    cpu: dict[str, list[float]] = {name: [] for name in ("ours1", "raw1", "ours100", "raw100")}

    def ours_single() -> float:
        stream = uuid4()
        events = [_heartbeat(stream, v) for v in range(1, n_single + 1)]
        start, start_cpu = time.perf_counter(), time.process_time()
        for event in events:
            store.append([event])
        cpu["ours1"].append(time.process_time() - start_cpu)
        return n_single / (time.perf_counter() - start)

    def raw_single() -> float:
        stream = uuid4().hex
        start, start_cpu = time.perf_counter(), time.process_time()
        for v in range(1, n_single + 1):
            raw.execute("INSERT INTO raw VALUES (NULL,?,?,?,?)", (stream, v, TOPIC, payload))
        cpu["raw1"].append(time.process_time() - start_cpu)
        return n_single / (time.perf_counter() - start)

    def ours_batch() -> float:
        stream = uuid4()
        batches = [
            [_heartbeat(stream, b * 100 + i) for i in range(1, 101)] for b in range(n_batches)
        ]
        start, start_cpu = time.perf_counter(), time.process_time()
        for batch in batches:
            store.append(batch)
        cpu["ours100"].append(time.process_time() - start_cpu)
        return n_batches * 100 / (time.perf_counter() - start)

    def raw_batch() -> float:
        stream = uuid4().hex
        start, start_cpu = time.perf_counter(), time.process_time()
        for b in range(n_batches):
            raw.execute("BEGIN")
            raw.executemany(
                "INSERT INTO raw VALUES (NULL,?,?,?,?)",
                [(stream, b * 100 + i, TOPIC, payload) for i in range(1, 101)],
            )
            raw.execute("COMMIT")
        cpu["raw100"].append(time.process_time() - start_cpu)
        return n_batches * 100 / (time.perf_counter() - start)

    single, raw_single_rate = _interleaved(ours_single, raw_single, rounds)
    batch, raw_batch_rate = _interleaved(ours_batch, raw_batch, rounds)
    median = {name: statistics.median(seconds) for name, seconds in cpu.items()}
    store.close()
    raw.close()
    return {
        "append_single_per_s": round(single),
        "append_single_raw_per_s": round(raw_single_rate),
        "append_single_ratio": round(single / raw_single_rate, 3),
        "append_batch_per_s": round(batch),
        "append_batch_raw_per_s": round(raw_batch_rate),
        "append_batch_ratio": round(batch / raw_batch_rate, 3),
        # The same ratios (ours / raw, of rates) from this process's CPU time.
        "append_single_cpu_ratio": round(median["raw1"] / median["ours1"], 3),
        "append_batch_cpu_ratio": round(median["raw100"] / median["ours100"], 3),
    }


def _append_node(store: EventStore, run_id: UUID, node: str, epoch: int) -> None:
    """What a worker appends for one node: started, its session, agent output in five
    batches, a heartbeat, completed; each a command that loads the run and checks its owner.
    """
    from commands.record_agent_output import OutputItem, record_agent_output
    from commands.record_heartbeat import record_heartbeat
    from commands.record_node import (
        record_agent_session,
        record_node_completed,
        record_node_started,
    )

    record_node_started(store, run_id, node, epoch=epoch)
    record_agent_session(store, run_id, node, f"session-{node}", epoch=epoch)
    for batch in range(5):
        items = [OutputItem(kind="text", text=f"line {batch}.{i}") for i in range(20)]
        record_agent_output(store, run_id, node, items, epoch=epoch)
    record_heartbeat(store, run_id, pid=1, host="bench", node=node, epoch=epoch)
    record_node_completed(store, run_id, node, duration_ms=1, epoch=epoch)


def bench_long_run(workdir: Path, long_events: int, rounds: int) -> dict[str, float]:
    """A node's events appended to a run that already has ``long_events`` events, over the
    same appended to a new run; each node by a newly opened store (a new process's first
    command finds no fold of the run in memory).
    """
    from commands.create_run import create_run
    from commands.record_agent_output import OutputItem, record_agent_output
    from commands.start_run import start_run

    path = workdir / "long.db"

    def new_run(store: EventStore) -> UUID:
        run_id = create_run(
            store, workflow="bench", agent_type="demo", repo="/r", node_names=[], created_by="b"
        )
        start_run(store, run_id, pid=1, host="bench")
        return run_id

    with EventStore(path) as store:
        long_run = new_run(store)
        items = [OutputItem(kind="text", text=f"output line {i}") for i in range(1000)]
        while store.stream_version(long_run) < long_events:
            record_agent_output(store, long_run, "long", items, epoch=1)
        size = store.stream_version(long_run)

    cpu: dict[bool, list[float]] = {True: [], False: []}

    def node_on(run_id: UUID | None) -> float:
        with EventStore(path) as store:
            target = run_id if run_id is not None else new_run(store)
        with EventStore(path) as store:
            start, start_cpu = time.perf_counter(), time.process_time()
            _append_node(store, target, f"n{uuid4().hex[:6]}", epoch=1)
            cpu[run_id is not None].append(time.process_time() - start_cpu)
            return time.perf_counter() - start

    node_on(long_run)  # warm the page cache for both sides alike
    node_on(None)
    cpu[True].clear()
    cpu[False].clear()
    long_s, fresh_s = _interleaved(lambda: node_on(long_run), lambda: node_on(None), rounds)
    return {
        "long_run_events": size,
        "append_long_run_node_ms": round(long_s * 1000, 2),
        "append_new_run_node_ms": round(fresh_s * 1000, 2),
        "append_long_run_ratio": round(long_s / fresh_s, 3),
        # This process's CPU for the same: steadier than the wall times (the syncs'
        # waits) on a busy machine.
        "append_long_run_cpu_ratio": round(
            statistics.median(cpu[True]) / statistics.median(cpu[False]), 3
        ),
    }


def bench_rebuild(db: Path, rounds: int) -> dict[str, float]:
    """Full rebuild of every projection from the log (median of ``rounds``)."""
    from projections.catch_up import rebuild
    from projections.database import open_database

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


def _timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system) of running ``cmd`` to its end.

    The CPU time is what the machine's other work cannot inflate much: on a
    loaded machine it says where the time goes when the wall time wanders.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def _wall(cmd: list[str], env: dict[str, str]) -> float:
    return _timed(cmd, env)[0]


def _compile_sources(*files: Path) -> None:
    """Write bytecode for our packages (and ``files``), as an install of shep would.

    An installed shep has bytecode (pip compiles it), like the baselines' libraries.
    From a source checkout under PYTHONDONTWRITEBYTECODE=1 every run would compile
    our modules again.
    """
    import compileall
    import py_compile

    for package in ("shep", "commands", "events", "projections"):
        compileall.compile_dir(ROOT / package, quiet=2)
    for file in files:
        py_compile.compile(str(file), doraise=True)


#: The baseline of the read commands: the libraries any shep command imports.
CLI_BASELINE = [sys.executable, "-c", "import click, apsw, msgspec"]


def _cold_ratio(
    cmd: list[str], env: dict[str, str], rounds: int
) -> tuple[float, float, float, float]:
    """Median wall and CPU times of ``cmd`` and of ``CLI_BASELINE``, interleaved, after a
    warm-up: (wall, baseline wall, CPU, baseline CPU).
    """
    _wall(cmd, env)  # warm the page cache (and catch the projections up) for both sides
    _wall(CLI_BASELINE, env)
    ours: list[tuple[float, float]] = []
    base: list[tuple[float, float]] = []
    for _ in range(rounds):
        ours.append(_timed(cmd, env))
        base.append(_timed(CLI_BASELINE, env))
    return (
        statistics.median(w for w, _ in ours),
        statistics.median(w for w, _ in base),
        statistics.median(c for _, c in ours),
        statistics.median(c for _, c in base),
    )


def bench_status_cold(home: Path, runs: int, events: int, rounds: int) -> dict[str, float]:
    """Wall time of `shep status` on a big store over `python -c "import click, apsw, msgspec"`."""
    env = {**os.environ, "SHEP_HOME": str(home), "PYTHONPATH": str(ROOT)}
    _compile_sources()
    ours, baseline, _, _ = _cold_ratio([sys.executable, "-m", "shep", "status"], env, rounds)
    return {
        "status_runs": runs,
        "status_events": events,
        "status_cold_s": round(ours, 4),
        "status_baseline_s": round(baseline, 4),
        "status_cold_ratio": round(ours / baseline, 3),
    }


def bench_status_empty(home: Path, rounds: int) -> dict[str, float]:
    """`shep status` on a home with no run over `python -c "import click, apsw, msgspec"`:
    what every command pays before its own work (the warm-up creates the store).
    """
    env = {**os.environ, "SHEP_HOME": str(home), "PYTHONPATH": str(ROOT)}
    _compile_sources()
    ours, baseline, cpu, baseline_cpu = _cold_ratio(
        [sys.executable, "-m", "shep", "status"], env, rounds
    )
    return {
        "status_empty_s": round(ours, 4),
        "status_empty_baseline_s": round(baseline, 4),
        "status_empty_ratio": round(ours / baseline, 3),
        "status_empty_cpu_ratio": round(cpu / baseline_cpu, 3),
    }


def bench_inbox_cold(home: Path, runs: int, waiting: int, rounds: int) -> dict[str, float]:
    """Wall time of `shep inbox --json` with ``waiting`` of ``runs`` runs waiting, each on a
    pending question or gate, over `python -c "import click, apsw, msgspec"`.
    """
    with EventStore(home / "shep.db") as store:
        events = write_history(store, runs, 103, seed=2, waiting_every=runs // waiting)
    env = {**os.environ, "SHEP_HOME": str(home), "PYTHONPATH": str(ROOT)}
    _compile_sources()
    inbox = [sys.executable, "-m", "shep", "inbox", "--json"]
    ours, baseline, cpu, baseline_cpu = _cold_ratio(inbox, env, rounds)
    listed = subprocess.run(inbox, check=True, env=env, capture_output=True, text=True).stdout
    items = json.loads(listed)
    if len(items) != waiting:
        raise AssertionError(f"shep inbox listed {len(items)} items, not {waiting}")
    return {
        "inbox_runs": runs,
        "inbox_waiting": waiting,
        "inbox_events": events,
        "inbox_cold_s": round(ours, 4),
        "inbox_baseline_s": round(baseline, 4),
        "inbox_cold_ratio": round(ours / baseline, 3),
        "inbox_cpu_ratio": round(cpu / baseline_cpu, 3),
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
        while True:
            line = follower.stdout.readline()
            if not line:  # the follower died: fail rather than spin forever
                raise AssertionError(f"shep logs --follow exited ({follower.wait()})")
            if marker in line:
                break
        latencies.append((time.perf_counter() - sent) * 1000)
        time.sleep(0.05)
    follower.kill()
    store.close()
    return {
        "follow_latency_ms": round(statistics.median(latencies), 1),
        "follow_latency_p90_ms": round(sorted(latencies)[int(len(latencies) * 0.9) - 1], 1),
    }


class _GatedRuns:
    """Runs of ``real-gate`` (agent, gate, agent) with the fake claude, in one SHEP_HOME.

    The workflow comes from tests/support/real_gate_workflows.py (SHEP_WORKFLOW_MODULES);
    the agent is tests/shep/runs/fake_claude.py, which answers at once.
    """

    def __init__(self, workdir: Path) -> None:
        from tests.shep.runs.chaos import FAKE

        self.home = workdir / "home"
        self.home.mkdir(parents=True, mode=0o700)
        self.repo = workdir / "repo"
        (self.repo / "src").mkdir(parents=True)
        (self.repo / "src" / "main.py").write_text("print('hi')\n")
        binary = workdir / "bin" / "claude"
        binary.parent.mkdir()
        binary.write_text(f"#!{sys.executable}\n" + FAKE.read_text())
        binary.chmod(0o755)
        self.env = {
            **os.environ,
            "SHEP_HOME": str(self.home),
            "SHEP_WORKFLOW_MODULES": "tests.support.real_gate_workflows",
            "PYTHONPATH": str(ROOT),
            "FAKE_DELAY": "0",
            "PATH": f"{binary.parent}{os.pathsep}{os.environ['PATH']}",
        }
        self.shep("settings", "agent", "--agent", "claude-code", "--binary", str(binary))
        self.store = EventStore(self.home / "shep.db")

    def shep(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "shep", *args],
            env=self.env,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        if done.returncode != 0:
            raise AssertionError(f"shep {' '.join(args)}: {done.stderr}")
        return done.stdout

    def wait_for(self, run_id: UUID, what: Callable[[object], bool], timeout: float = 60) -> object:
        """Poll the run's stream (every ms or so) until an event matches ``what``; return it."""
        from events.runs import RunFailed

        deadline = time.perf_counter() + timeout
        seen = 0
        while time.perf_counter() < deadline:
            for event in self.store.load(run_id, after_version=seen):
                seen = event.originator_version
                if isinstance(event, RunFailed):
                    raise AssertionError(f"run {run_id.hex} failed: {event.message}")
                if what(event):
                    return event
            time.sleep(0.001)
        raise AssertionError(f"run {run_id.hex}: nothing matched within {timeout}s")

    def wait_worker_gone(self, run_id: UUID) -> None:
        """Wait until the run's latest worker process has exited."""
        from events.runs import RunResumed, RunStarted
        from shep.home.procs import pid_alive

        pids = [e.pid for e in self.store.load(run_id) if isinstance(e, RunStarted | RunResumed)]
        deadline = time.perf_counter() + 30
        while pids and pid_alive(pids[-1]) and time.perf_counter() < deadline:
            time.sleep(0.01)

    def to_gate(self) -> UUID:
        """Start a run in the background; return once it waits at its gate with no worker."""
        from events.runs import RunSuspended

        run_id = UUID(
            self.shep("run", "real-gate", "--repo", str(self.repo), "--background").strip()
        )
        self.wait_for(run_id, lambda e: isinstance(e, RunSuspended))
        self.wait_worker_gone(run_id)
        return run_id

    def approve(self, run_id: UUID) -> tuple[float, float, float]:
        """`shep approve` the run's gate: (seconds the command took, seconds from its
        return to apply's NodeStarted in the log, CPU seconds the resumed worker had
        used by then).
        """
        from events.runs import NodeStarted, RunCompleted, RunResumed

        start = time.perf_counter()
        self.shep("approve", run_id.hex)
        returned = time.perf_counter()
        self.wait_for(run_id, lambda e: isinstance(e, NodeStarted) and e.node == "apply")
        resumed = time.perf_counter()
        worker = [e for e in self.store.load(run_id) if isinstance(e, RunResumed)][-1].pid
        cpu = _process_cpu(worker)
        self.wait_for(run_id, lambda e: isinstance(e, RunCompleted))
        self.wait_worker_gone(run_id)
        return returned - start, resumed - returned, cpu


def _process_cpu(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far (NaN: gone)."""
    from shep.home.procs import cpu_seconds

    return cpu_seconds(pid)


def bench_approve_to_resume(workdir: Path, samples: int) -> dict[str, float]:
    """From `shep approve` returning to the resumed run's next node started (its
    ``NodeStarted`` in the log), over the wall time of `python -c "import langgraph.graph"`.
    """
    _compile_sources(
        ROOT / "tests" / "__init__.py",
        ROOT / "tests" / "support" / "__init__.py",
        ROOT / "tests" / "support" / "real_gate_workflows.py",
    )
    runs = _GatedRuns(workdir)
    base = [sys.executable, "-c", "import langgraph.graph"]
    _wall(base, runs.env)  # warm the page cache for both sides alike
    runs.approve(runs.to_gate())
    approve_s: list[float] = []
    resume_s: list[float] = []
    worker_cpu: list[float] = []
    base_s: list[float] = []
    base_cpu: list[float] = []
    for _ in range(samples):
        run_id = runs.to_gate()
        wall, cpu = _timed(base, runs.env)
        base_s.append(wall)
        base_cpu.append(cpu)
        took, resumed, used = runs.approve(run_id)
        approve_s.append(took)
        resume_s.append(resumed)
        worker_cpu.append(used)
    runs.store.close()
    ours, baseline = statistics.median(resume_s), statistics.median(base_s)
    cpu, baseline_cpu = statistics.median(worker_cpu), statistics.median(base_cpu)
    return {
        "approve_samples": samples,
        "approve_command_s": round(statistics.median(approve_s), 4),
        "approve_to_resume_s": round(ours, 4),
        "approve_baseline_s": round(baseline, 4),
        "approve_to_resume_ratio": round(ours / baseline, 3),
        # The resumed worker's CPU from its start to apply's NodeStarted, over the
        # baseline's CPU: steadier than the wall times on a busy machine.
        "approve_worker_cpu_s": round(cpu, 3),
        "approve_worker_cpu_ratio": round(cpu / baseline_cpu, 3),
    }


def bench_resume(workdir: Path, kills: int) -> dict[str, float]:
    """SIGKILL background workers at random moments and resume: count re-executed nodes."""
    from tests.shep.runs.chaos import Chaos

    workdir.mkdir()
    report = Chaos(workdir, seed=11).run(kills)
    return {
        "resume_kills": report.kills,
        "resume_runs": len(report.runs),
        "resume_reexecuted_nodes": report.reexecuted_nodes,
        "resume_all_completed": set(report.statuses.values()) == {"completed"},
    }


#: The groups of figures, in the order they run; ``--only`` picks some of them.
GROUPS = (
    "appends", "long_run", "rebuild", "status", "status_empty", "inbox", "follow", "ui",
    "snapshot", "replay", "readers", "audit", "supervisor", "checkpointer", "shared_store",
    "resume", "approve", "upgrade",
)  # fmt: skip


def run_groups(work: Path, quick: bool, only: set[str]) -> dict[str, object]:
    """The figures of the groups in ``only``, in ``GROUPS`` order."""
    results: dict[str, object] = {}
    home = work / "home"
    runs, per_run = (1_000, 103) if quick else (10_000, 103)
    events = 0
    if only & {"rebuild", "status", "ui"}:  # they share one big history
        home.mkdir(mode=0o700)
        with EventStore(home / "shep.db") as store:
            events = write_history(store, runs, per_run)
    for group in (g for g in GROUPS if g in only):
        if group == "appends":
            results.update(
                bench_appends(
                    work,
                    n_single=200 if quick else 1000,
                    n_batches=20 if quick else 100,
                    rounds=3 if quick else 5,
                )
            )
        elif group == "long_run":
            results.update(
                bench_long_run(
                    work, long_events=10_000 if quick else 100_000, rounds=5 if quick else 9
                )
            )
        elif group == "rebuild":
            results.update(bench_rebuild(home / "shep.db", rounds=3))
        elif group == "status":
            results.update(bench_status_cold(home, runs, events, rounds=5 if quick else 9))
        elif group == "status_empty":
            results.update(bench_status_empty(work / "empty", rounds=9 if quick else 21))
        elif group == "inbox":
            inbox_home = work / "inbox"
            inbox_home.mkdir(mode=0o700)
            inbox_runs, waiting = (1_000, 100) if quick else (10_000, 1_000)
            results.update(
                bench_inbox_cold(inbox_home, inbox_runs, waiting, rounds=5 if quick else 9)
            )
        elif group == "follow":
            follow_home = work / "follow"
            follow_home.mkdir(mode=0o700)
            results.update(bench_follow_latency(follow_home, samples=10 if quick else 30))
        elif group == "ui":
            from benchmarks.ui import bench as bench_ui  # a real `shep ui`, and Chromium

            follow = results.get("follow_latency_ms")
            results.update(
                bench_ui(home, work, quick, follow if isinstance(follow, float) else None)
            )
        elif group == "resume":
            results.update(bench_resume(work / "chaos", kills=5 if quick else 20))
        elif group == "approve":
            results.update(bench_approve_to_resume(work / "gates", samples=3 if quick else 9))
        else:  # a module of its own: benchmarks/<group>.py, whose bench(quick) gives its figures
            import importlib

            results.update(importlib.import_module(f"benchmarks.{group}").bench(quick))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for CI")
    parser.add_argument(
        "--only",
        metavar="GROUP[,GROUP...]",
        help=f"run only these groups of figures (of: {', '.join(GROUPS)})",
    )
    args = parser.parse_args()
    only = set(GROUPS) if args.only is None else set(args.only.split(","))
    if only - set(GROUPS):
        parser.error(f"no such group: {', '.join(sorted(only - set(GROUPS)))}")
    results: dict[str, object] = {
        "quick": args.quick,
        "synchronous": DEFAULT_SYNCHRONOUS,
        "apsw_sqlite": apsw.sqlite_lib_version(),
    }
    with tempfile.TemporaryDirectory(prefix="shep-bench-") as tmp:
        results.update(run_groups(Path(tmp), args.quick, only))
    print(json.dumps(results, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
