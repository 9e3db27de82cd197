"""Chaos with stopped workers: SIGSTOP at random moments, orphan checks, takeovers, SIGCONT.

Used by tests/shep/runs/test_chaos_stop.py. Everything is real, as in
``tests.shep.runs.chaos`` (whose ``Chaos`` this extends): detached shep workers,
the fake agent CLI, signals, the SQLite store read back event by event.

One *trial* disrupts the run's current worker once, at a random moment:

- ``stop``: SIGSTOP it, wait until its heartbeat is older than ``orphan_after``,
  check that ``shep status`` does not take it for an orphan (it is alive here)
  and that ``shep resume`` refuses; then one of
  ``force`` (``shep resume --force --background``),
  ``elsewhere`` (another host's orphan check, which sees only the stale
  heartbeat, marks it interrupted; then ``shep resume --background``), or
  ``wake`` (SIGCONT, and it goes on). After a takeover the old worker gets
  SIGCONT at a random moment (``wake`` says when).
- ``stop`` that lands while the worker holds the store's write lock (rare; the
  action ``stop-locked`` waits for such a moment): no command can read the
  store until the worker runs again, so straight to ``shep resume --force``,
  which must stop it and take the run over.
- ``kill``: SIGKILL it; ``shep status`` marks the run interrupted; resume it
  (``shep resume``, or ``shep run --resume``).

The fake agent is wrapped so that each call also notes its parent (the worker
that started it) in ``spawn.jsonl``: with the fake's own log (node, start/done,
time) that attributes every agent call to one owner of the run.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import apsw

from commands.mark_interrupted import mark_interrupted
from commands.run_state import RunState, load_run
from events.base import Event
from events.runs import (
    FINAL_STATUSES,
    AgentOutputRecorded,
    AgentStarted,
    HeartbeatRecorded,
    NodeCompleted,
    RunInterrupted,
    RunResumed,
    RunStarted,
    RunStatus,
)
from events.store import EventStore
from projections.catch_up import catch_up
from projections.database import open_database
from projections.tables import PROJECTION_TABLES
from shep.home.procs import worker_alive
from shep.runs.recovery import find_orphans, orphan_after
from tests.shep.runs.chaos import FAKE, Chaos

#: orphan_after's lower bound (events.setting_values): a stopped worker's heartbeat
#: must get this old before the orphan check is worth asking.
ORPHAN_AFTER = 10.0
#: The host name another machine sharing the log would have.
OTHER_HOST = "chaos-other-host"

#: The fake claude, noting first (a shell starts in a millisecond, so its parent is
#: still the worker that started it) its pid, its parent's and the run's.
_WRAPPER = """#!/bin/sh
printf '{{"pid": %s, "ppid": %s, "run": "%s"}}\\n' "$$" "$PPID" "$SHEP_RUN_ID" >> '{log}'
exec '{python}' '{fake}' "$@"
"""


@dataclass
class Trial:
    """One disruption of one worker, and what the driver saw."""

    run_id: str
    action: str  # stop | stop-locked | kill
    takeover: str  # force | elsewhere | wake | resume | run-resume
    wake: str | None  # when the old worker got SIGCONT after a takeover
    old_pid: int
    old_epoch: int
    #: Where the worker was: its node in flight, or how many nodes were done.
    at: str = ""
    #: The stopped worker held the store's write lock.
    in_transaction: bool = False
    stopped_at: float = 0.0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


@dataclass
class StopReport:
    trials: list[Trial] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    #: Runs that ended before a disruption landed (not trials).
    missed: int = 0
    seconds: float = 0.0

    def counts(self) -> Counter[str]:
        return Counter(f"{t.action}/{t.takeover}/{t.wake}" for t in self.trials)


class StopChaos(Chaos):
    """``Chaos`` with stopped workers; trials run one after another in one SHEP_HOME."""

    def __init__(self, workdir: Path, *, seed: int) -> None:
        super().__init__(workdir, seed=seed)
        self.workdir = workdir
        self.spawn_log = workdir / "spawn.jsonl"
        binary = workdir / "bin" / "claude"
        binary.write_text(
            _WRAPPER.format(python=sys.executable, log=str(self.spawn_log), fake=str(FAKE))
        )
        self.db = self.home / "shep.db"
        #: (run, pid, when) of each SIGKILLed worker.
        self.killed: list[tuple[str, int, float]] = []
        self.store = EventStore(self.db)
        for key, value in (("orphan_after", f"{ORPHAN_AFTER:g}"), ("heartbeat_interval", "0.3")):
            out = self.shep("settings", "set", key, value)
            if out.returncode != 0:
                raise AssertionError(out.stderr)

    def close(self) -> None:
        """Let no worker of the session outlive it (one left stopped by a failed trial)."""
        for run_id in self.run_ids_in_store():
            for e in self.events(run_id):
                if isinstance(e, RunStarted | RunResumed) and worker_alive(e.pid, e.process_start):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(e.pid, signal.SIGKILL)
        self.store.close()

    # -- the trials ---------------------------------------------------------------------

    def run_trials(
        self, trials: int, *, max_per_run: int = 2, plan: list[tuple[str, str]] | None = None
    ) -> StopReport:
        """Disrupt workers until ``trials`` disruptions landed; every run ends on its own.

        ``plan`` fixes the (action, takeover) of each trial in turn; else they are drawn.
        """
        report = StopReport()
        started = time.monotonic()
        while len(report.trials) < trials:
            delay = f"{self.rng.uniform(0.1, 0.5):.2f}"
            launched = self.shep(
                "run",
                "analyze-repository",
                "--repo",
                str(self.repo),
                "--background",
                "--no-resume",
                extra={"FAKE_DELAY": delay},
            )
            if launched.returncode != 0:
                raise AssertionError(launched.stderr)
            run_id = launched.stdout.strip()
            report.runs.append(run_id)
            for _ in range(self.rng.randint(1, max_per_run)):
                if len(report.trials) >= trials:
                    break
                kind = plan[len(report.trials)] if plan else self._draw()
                trial = self._disrupt(run_id, kind, delay)
                if trial is None:
                    report.missed += 1
                    break  # the run ended before the disruption landed
                report.trials.append(trial)
            self.wait_final(run_id)
        report.seconds = time.monotonic() - started
        return report

    def _draw(self) -> tuple[str, str]:
        if self.rng.random() < 0.2:
            return "kill", self.rng.choice(["resume", "run-resume"])
        # Mostly the takeovers that leave an old worker to fence off.
        return "stop", self.rng.choices(["elsewhere", "force", "wake"], [0.45, 0.35, 0.2])[0]

    def _disrupt(self, run_id: str, kind: tuple[str, str], delay: str) -> Trial | None:
        # About a run's length: a worker takes ~0.7s to start, a node ~0.15s more than the delay.
        time.sleep(self.rng.uniform(0.0, 0.7 + 4 * (float(delay) + 0.15)))
        state = self.run_state(run_id)
        if state.status is not RunStatus.RUNNING or state.pid is None:
            return None
        action, takeover = kind
        trial = Trial(run_id, action, takeover, None, state.pid, state.epoch)
        trial.at = state.current_node or f"between nodes ({len(state.completed_nodes)} done)"
        began = time.monotonic()
        if action == "kill":
            if not self._kill(trial, state, delay):
                return None
        elif not self._stop(trial, state, delay):
            return None
        trial.seconds = time.monotonic() - began
        return trial

    def _kill(self, trial: Trial, state: RunState, delay: str) -> bool:
        pid = trial.old_pid
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        trial.stopped_at = time.time()
        self.killed.append((trial.run_id, pid, trial.stopped_at))
        self._wait(lambda: not worker_alive(pid, state.process_start), 10, f"{pid} to die")
        row = self.status(trial.run_id)  # any command notices the dead worker
        if row["status"] == "completed":
            return False
        if row["status"] != "interrupted":
            raise AssertionError(f"after SIGKILL of {pid} run {trial.run_id} is {row['status']}")
        if trial.takeover == "run-resume":
            args = ["run", "analyze-repository", "--repo", str(self.repo), "--resume"]
        else:
            args = ["resume", trial.run_id]
        resumed = self.shep(*args, "--background", extra={"FAKE_DELAY": delay})
        if resumed.returncode != 0 or resumed.stdout.strip() != trial.run_id:
            raise AssertionError(f"{' '.join(args)}: {resumed.stdout}{resumed.stderr}")
        return True

    def _stop(self, trial: Trial, state: RunState, delay: str) -> bool:
        pid, run_id = trial.old_pid, trial.run_id
        if trial.action == "stop-locked":
            if not self._stop_inside_a_transaction(run_id, pid):
                return False
        else:
            os.kill(pid, signal.SIGSTOP)
            self._wait(lambda: _process_state(pid) in ("T", None), 5, f"{pid} to stop")
        trial.stopped_at = time.time()
        state = self.run_state(run_id)
        if state.status is not RunStatus.RUNNING or state.pid != pid:
            os.kill(pid, signal.SIGCONT)
            return False  # it had just finished the run
        trial.at = state.current_node or f"between nodes ({len(state.completed_nodes)} done)"
        trial.in_transaction = self._write_locked()
        if trial.in_transaction:
            # Every command first catches the projections up, a write: none can answer
            # while this worker sleeps inside its transaction (as with any SQLite writer).
            # Taking the run over is what --force is for: it stops the worker first.
            trial.takeover = "force"
            trial.notes.append("stopped holding the write lock: resume --force")
            self._force(trial, delay)
            return True
        beat = self._last_beat(run_id)
        time.sleep(max(0.0, beat + ORPHAN_AFTER + 0.5 - time.time()))
        self._check_not_orphaned(trial, beat)
        if trial.takeover == "wake":
            os.kill(pid, signal.SIGCONT)
            return True
        if trial.takeover == "force":
            self._force(trial, delay)
        else:
            self._elsewhere(trial, state, delay)
        return True

    def _stop_inside_a_transaction(self, run_id: str, pid: int) -> bool:
        """SIGSTOP the worker at a moment it holds the store's write lock; False if the run
        ended first. Such moments are short: stop, look, and let it go on until one comes.
        """
        for attempt in range(100_000):
            os.kill(pid, signal.SIGSTOP)
            self._wait(lambda: _process_state(pid) in ("T", None), 5, f"{pid} to stop")
            if self._write_locked():
                return True
            os.kill(pid, signal.SIGCONT)
            if attempt % 20 == 0 and self.run_state(run_id).status is not RunStatus.RUNNING:
                return False
            time.sleep(self.rng.uniform(0.0, 0.005))
        return False

    def _check_not_orphaned(self, trial: Trial, beat: float) -> None:
        """The stopped worker's heartbeat is stale, yet this host does not call it an orphan."""
        pid, run_id, short = trial.old_pid, trial.run_id, trial.run_id[:8]
        status = self.shep("status", run_id, "--json")
        if status.returncode != 0:
            raise AssertionError(f"shep status with worker {pid} stopped: {status.stderr}")
        row = json.loads(status.stdout)
        age = time.time() - beat
        if row["status"] != "running" or row["pid"] != pid or "interrupted" in status.stderr:
            raise AssertionError(
                f"stopped (alive) worker {pid} of run {short} taken for an orphan after a "
                f"{age:.1f}s old heartbeat: {row['status']}, {status.stderr!r}"
            )
        if age <= ORPHAN_AFTER:
            raise AssertionError(f"heartbeat of {pid} only {age:.1f}s old")
        after = self.run_state(run_id)
        if after.status is not RunStatus.RUNNING or after.epoch != trial.old_epoch:
            raise AssertionError(f"run {short} of a live worker became {after.status.value}")
        refused = self.shep("resume", run_id)
        if refused.returncode != 2 or f"is still running (worker {pid} on " not in refused.stderr:
            raise AssertionError(f"resume of a running run: {refused.returncode} {refused.stderr}")

    def _force(self, trial: Trial, delay: str) -> None:
        pid = trial.old_pid
        began = time.monotonic()
        forced = self.shep(
            "resume", trial.run_id, "--force", "--background", extra={"FAKE_DELAY": delay}
        )
        if forced.returncode != 0 or forced.stdout.strip() != trial.run_id:
            where = " holding the write lock" if trial.in_transaction else ""
            raise AssertionError(
                f"shep resume {trial.run_id} --force, worker {pid} stopped{where} "
                f"(now: process state {_process_state(pid)}, run "
                f"{self.run_state(trial.run_id).status.value}) in {trial.at}: exit "
                f"{forced.returncode} after {time.monotonic() - began:.1f}s: "
                f"{forced.stdout}{forced.stderr}\n{self.describe(trial.run_id)}"
            )
        if (
            f"stopped worker {pid}" not in forced.stderr
            and f"killed worker {pid}" not in forced.stderr
        ):
            raise AssertionError(f"resume --force did not stop worker {pid}: {forced.stderr}")
        trial.notes.extend(line for line in forced.stderr.splitlines() if f"worker {pid}" in line)
        self._wake_later(trial)

    def _elsewhere(self, trial: Trial, state: RunState, delay: str) -> None:
        """Another host shares the log: it sees only the stale heartbeat and interrupts the run."""
        conn = open_database(self.db)
        try:
            catch_up(conn)
            found = [
                o
                for o in find_orphans(conn, host=OTHER_HOST, orphan_after=orphan_after(conn))
                if o.run_id == trial.run_id
            ]
        finally:
            conn.close()
        if [o.epoch for o in found] != [state.epoch]:
            raise AssertionError(f"other host's orphan check found {found} for epoch {state.epoch}")
        mark_interrupted(
            self.store,
            UUID(trial.run_id),
            reason=found[0].reason,
            detected_by_pid=os.getpid(),
            detected_by_host=OTHER_HOST,
            epoch=found[0].epoch,
        )
        trial.notes.append(found[0].reason)
        if self.rng.random() < 0.25:
            trial.wake = "before-resume"
            os.kill(trial.old_pid, signal.SIGCONT)
            time.sleep(self.rng.uniform(0.0, 0.5))
        resumed = self.shep("resume", trial.run_id, "--background", extra={"FAKE_DELAY": delay})
        if resumed.returncode != 0 or resumed.stdout.strip() != trial.run_id:
            raise AssertionError(f"resume after the other host's check: {resumed.stderr}")
        if trial.wake is None:
            self._wake_later(trial)

    def _wake_later(self, trial: Trial) -> None:
        """SIGCONT the old worker: at once, soon, after the new one's first node, or at the end."""
        trial.wake = self.rng.choice(["at-once", "soon", "after-node", "after-end"])
        if trial.wake == "soon":
            time.sleep(self.rng.uniform(0.0, 1.5))
        elif trial.wake == "after-node":
            self._wait(lambda: self._new_owner_completed_a_node(trial), 60, "the new worker's node")
        elif trial.wake == "after-end":
            self.wait_final(trial.run_id)
        alive = _process_state(trial.old_pid) is not None
        trial.notes.append(f"old worker {'alive' if alive else 'gone'} at SIGCONT")
        with contextlib.suppress(ProcessLookupError):
            os.kill(trial.old_pid, signal.SIGCONT)

    def _new_owner_completed_a_node(self, trial: Trial) -> bool:
        state = self.run_state(trial.run_id)
        if state.status in FINAL_STATUSES:
            return True
        events = self.events(trial.run_id)
        owner = max(i for i, e in enumerate(events) if isinstance(e, RunStarted | RunResumed))
        return owner > 0 and any(isinstance(e, NodeCompleted) for e in events[owner:])

    # -- reading ------------------------------------------------------------------------

    def run_state(self, run_id: str) -> RunState:
        return load_run(self.store, UUID(run_id))

    def events(self, run_id: str) -> list[Event]:
        return list(self.store.load(UUID(run_id)))

    def _last_beat(self, run_id: str) -> float:
        """When the run's last heartbeat (or its owner's start) was recorded."""
        beats = self.store.load(UUID(run_id), types=[HeartbeatRecorded, RunStarted, RunResumed])
        return beats[-1].timestamp.timestamp()

    def _write_locked(self) -> bool:
        probe = apsw.Connection(str(self.db))
        try:
            probe.setbusytimeout(0)
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
            return False
        except apsw.BusyError:
            return True
        finally:
            probe.close()

    def wait_final(self, run_id: str, timeout: float = 120) -> None:
        """Until the run ends by itself (through ``shep status``, which runs the orphan check).

        Never resumes it: a run left interrupted or stuck here is a failure.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            row = self.status(run_id)
            if row["status"] in FINAL_STATUSES:
                return
            if row["status"] == "interrupted":
                raise AssertionError(f"run {run_id} was left interrupted:\n{self.describe(run_id)}")
            time.sleep(0.1)
        raise AssertionError(f"run {run_id} did not finish:\n{self.describe(run_id)}")

    def _wait(self, condition: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(0.02)

    def agent_calls(self) -> list[dict[str, Any]]:
        """Each agent call that started a node: run, node, start time, its worker's pid.

        A call whose worker was SIGKILLed as it started it was adopted by init before
        it could note its parent; the kill, a moment before, names its worker.
        """
        parents = {row["pid"]: row["ppid"] for row in _json_lines(self.spawn_log) if row["run"]}
        calls = []
        for row in _json_lines(self.agent_log):
            if row["phase"] != "start" or not row["run"]:
                continue
            worker = parents.get(row["pid"])
            killed = [
                pid
                for run_id, pid, at in self.killed
                if run_id == row["run"] and worker != pid and at - 0.1 < row["time"] < at + 1
            ]
            if worker not in self.workers_of(row["run"]) and len(killed) == 1:
                worker = killed[0]
            calls.append({**row, "worker": worker, "parent": parents.get(row["pid"])})
        return calls

    def workers_of(self, run_id: str) -> set[int]:
        """The pids of the run's owners, from its RunStarted/RunResumed events."""
        owners = self.store.load(UUID(run_id), types=[RunStarted, RunResumed])
        return {e.pid for e in owners if isinstance(e, RunStarted | RunResumed)}

    def run_ids_in_store(self) -> list[str]:
        conn = apsw.Connection(str(self.db))
        try:
            topic = "events.runs:RunCreated"
            rows = conn.execute(
                "SELECT originator_id FROM stored_events WHERE topic=?", (topic,)
            ).fetchall()
        finally:
            conn.close()
        return [str(r[0]) for r in rows]

    def describe(self, run_id: str) -> str:
        """The run's stream, one event a line, and its agent calls: evidence for a report."""
        lines = []
        for e in self.events(run_id):
            extra = {
                k: getattr(e, k)
                for k in ("node", "pid", "epoch", "reason", "detected_by_pid", "detected_by_host")
                if getattr(e, k, None) is not None
            }
            lines.append(
                f"  v{e.originator_version} {e.timestamp.isoformat()} {type(e).__name__} {extra}"
            )
        for call in self.agent_calls():
            if call["run"] == run_id:
                at = datetime.fromtimestamp(call["time"]).astimezone().isoformat()
                lines.append(
                    f"  agent pid {call['pid']} of worker {call['worker']}: "
                    f"{call['node']} started {at}"
                )
        return "\n".join(lines)

    def projection_tables(self) -> dict[str, list[tuple[object, ...]]]:
        conn = apsw.Connection(str(self.db))
        try:
            return {
                t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr)
                for t in PROJECTION_TABLES
            }
        finally:
            conn.close()


def _process_state(pid: int) -> str | None:
    """The state letter of process ``pid`` (R, S, T, ...); None if it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            letter = stat.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        return None
    return None if letter in ("Z", "X") else letter


def _json_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# -- what a run's stream must show ------------------------------------------------------


def fencing_problems(
    run_id: str, events: list[Event], calls: list[dict[str, Any]], nodes: list[str]
) -> list[str]:
    """Everything in one run's history that breaks ownership; [] when it holds.

    Walking the stream in order, the owner is the latest RunStarted/RunResumed:

    - owners are numbered 1, 2, 3, ...; each interruption names the owner it ended;
    - every heartbeat (and a worker's own interruption) carries the owner's pid;
    - once the run is interrupted nothing is appended until the next owner, and
      nothing after it completed;
    - every event of an owner's stretch was made after that owner began (an
      event stamped earlier was built by the worker before it, fenced off);
    - each node completes exactly once, by an owner one of whose agent calls
      started that node; every agent output names a node its owner called;
    - every agent call was started by its worker as owner: its ``AgentStarted``
      (appended under the write lock with the ownership check and the start)
      lies in its worker's stretch; a call without one (its worker was killed,
      or got SIGTERM, while starting it) is the last work that worker did: at
      most its heartbeat and its own interruption follow (the worker kills an
      unrecorded agent before it records anything else).
    """
    problems: list[str] = []
    short = run_id[:8]
    owners: list[RunStarted | RunResumed] = []
    pids: set[int] = {e.pid for e in events if isinstance(e, RunStarted | RunResumed)}
    running = False
    recorded: set[int] = set()  # agent pids with an AgentStarted
    worked_at: dict[int, float] = {}  # owner pid -> its newest work's time (not a beat or its end)
    by_worker: dict[int | None, list[dict[str, Any]]] = {}
    call_workers: dict[int, int | None] = {}
    for call in calls:
        if call["run"] == run_id:
            by_worker.setdefault(call["worker"], []).append(call)
            call_workers[call["pid"]] = call["worker"]
    for call in by_worker.get(None, []) + [
        c for w, cs in by_worker.items() if w is not None and w not in pids for c in cs
    ]:
        problems.append(f"{short}: agent call {call} has no owner of the run as its parent")

    for e in events:
        what = f"{short} v{e.originator_version} {type(e).__name__}"
        if isinstance(e, RunStarted | RunResumed):
            if e.epoch != len(owners) + 1:
                problems.append(f"{what}: epoch {e.epoch}, expected {len(owners) + 1}")
            if running:
                problems.append(f"{what}: a new owner while epoch {len(owners)} still ran")
            owners.append(e)
            running = True
            continue
        if not owners:
            continue  # RunCreated
        owner = owners[-1]
        if not running:
            problems.append(f"{what}: appended after the run stopped being epoch {owner.epoch}'s")
        if e.timestamp < owner.timestamp:
            problems.append(
                f"{what}: stamped {e.timestamp.isoformat()}, before its owner "
                f"(epoch {owner.epoch}, pid {owner.pid}) began at {owner.timestamp.isoformat()}"
            )
        if not isinstance(e, HeartbeatRecorded | RunInterrupted):
            worked_at[owner.pid] = e.timestamp.timestamp()
        if isinstance(e, AgentStarted):
            recorded.add(e.pid)
            if e.pid in call_workers and call_workers[e.pid] != owner.pid:
                problems.append(
                    f"{what} {e.node}: agent pid {e.pid} is worker {call_workers[e.pid]}'s, "
                    f"the owner is pid {owner.pid}"
                )
        if isinstance(e, HeartbeatRecorded) and (e.pid, e.host) != (owner.pid, owner.host):
            problems.append(f"{what}: heartbeat of pid {e.pid}, owner is pid {owner.pid}")
        if isinstance(e, RunInterrupted):
            if e.epoch != owner.epoch:
                problems.append(f"{what}: interrupts epoch {e.epoch}, owner is {owner.epoch}")
            if e.detected_by_pid in pids and e.detected_by_pid != owner.pid:
                problems.append(f"{what}: by worker {e.detected_by_pid}, owner is pid {owner.pid}")
            running = False
        if isinstance(e, NodeCompleted | AgentOutputRecorded):
            mine = [
                c
                for c in by_worker.get(owner.pid, [])
                if c["node"] == e.node and c["time"] < e.timestamp.timestamp()
            ]
            if not mine:
                problems.append(
                    f"{what} {e.node}: no agent call of its owner (pid {owner.pid}) ran that node"
                )
        if type(e).__name__ in ("RunCompleted", "RunFailed", "RunCancelled"):
            running = False

    completed = Counter(e.node for e in events if isinstance(e, NodeCompleted))
    if completed != Counter(nodes):
        problems.append(
            f"{short}: node completions {dict(completed)}, expected each of {nodes} once"
        )
    for owner in owners:
        last = worked_at.get(owner.pid, 0.0)
        for call in by_worker.get(owner.pid, []):
            if call["pid"] not in recorded and call["time"] < last:
                problems.append(
                    f"{short}: agent call for {call['node']} (pid {call['pid']}) of epoch "
                    f"{owner.epoch}'s worker {owner.pid} has no AgentStarted, yet that worker "
                    "went on recording after it"
                )
    return problems


def log_problems(db: Path) -> list[str]:
    """Gaps in global positions or in any stream's versions."""
    problems = []
    conn = apsw.Connection(str(db))
    try:
        positions = [
            r[0]
            for r in conn.execute(
                "SELECT notification_id FROM stored_events ORDER BY notification_id"
            )
        ]
        if positions != list(range(1, len(positions) + 1)):
            problems.append("global positions have gaps")
        for stream, count, low, high in conn.execute(
            "SELECT originator_id, count(*), min(originator_version), max(originator_version) "
            "FROM stored_events GROUP BY originator_id"
        ):
            if (low, high) != (1, count):
                problems.append(f"stream {stream}: versions {low}..{high} for {count} events")
    finally:
        conn.close()
    return problems
