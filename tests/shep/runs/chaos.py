"""Chaos: start background runs, SIGKILL their workers at random moments, resume, repeat.

Used by tests/shep/runs/test_chaos.py and by benchmarks (``resume_reexecuted_nodes``).
Everything is real: a fake agent CLI subprocess, detached shep workers, SIGKILL.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from shep.home.procs import pid_alive

FAKE = Path(__file__).with_name("fake_claude.py")


@dataclass
class ChaosReport:
    kills: int = 0
    runs: list[str] = field(default_factory=list)
    statuses: dict[str, str] = field(default_factory=dict)
    reexecuted_nodes: int = 0
    seconds: float = 0.0


class Chaos:
    """Drives whole runs through the real CLI under one SHEP_HOME."""

    def __init__(self, workdir: Path, *, seed: int) -> None:
        self.rng = random.Random(seed)
        self.home = workdir / "home"
        self.repo = workdir / "repo"
        self.agent_log = workdir / "agent.jsonl"
        (self.repo / "src").mkdir(parents=True)
        (self.repo / "src" / "main.py").write_text("print('hi')\n")
        binary = workdir / "bin" / "claude"
        binary.parent.mkdir()
        binary.write_text(f"#!{sys.executable}\n" + FAKE.read_text())
        binary.chmod(0o755)
        root = str(Path(__file__).resolve().parents[3])
        self.env = {
            **os.environ,
            "SHEP_HOME": str(self.home),
            "FAKE_AGENT_LOG": str(self.agent_log),
            "PATH": f"{binary.parent}{os.pathsep}{os.environ['PATH']}",
            "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", ""),
        }
        self.shep("settings", "agent", "--agent", "claude-code", "--binary", str(binary))
        self.shep("settings", "set", "heartbeat_interval", "0.3")

    def shep(
        self, *args: str, extra: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [sys.executable, "-m", "shep", *args],
            capture_output=True,
            text=True,
            env={**self.env, **(extra or {})},
            timeout=300,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        return result

    def status(self, run_id: str) -> dict[str, Any]:
        out = self.shep("status", run_id, "--json")
        if out.returncode != 0:
            raise AssertionError(out.stderr)
        return dict(json.loads(out.stdout))

    def run(self, total_kills: int, *, max_kills_per_run: int = 4) -> ChaosReport:
        report = ChaosReport()
        started = time.monotonic()
        while report.kills < total_kills:
            delay = f"{self.rng.uniform(0.05, 0.4):.2f}"
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
            kills = self.rng.randint(1, max_kills_per_run)
            for _ in range(kills):
                if report.kills >= total_kills:
                    break
                if not self._kill_soon(run_id):
                    break  # the run finished before we got to it
                report.kills += 1
                resumed = self.shep("resume", run_id, "--background", extra={"FAKE_DELAY": delay})
                if resumed.returncode != 0:
                    raise AssertionError(f"resume {run_id}: {resumed.stderr}")
            self._wait_final(run_id)
        for run_id in report.runs:
            report.statuses[run_id] = str(self.status(run_id)["status"])
        report.reexecuted_nodes = self.reexecuted_nodes()
        report.seconds = time.monotonic() - started
        return report

    def _kill_soon(self, run_id: str) -> bool:
        """SIGKILL the run's worker at a random moment; False if the run ended first."""
        time.sleep(self.rng.uniform(0.0, 2.0))
        row = self.status(run_id)
        if row["status"] != "running":
            return False
        pid = int(row["pid"])
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        # Any command notices the dead pid and marks the run interrupted.
        row = self.status(run_id)
        if row["status"] == "completed":
            return False
        if row["status"] != "interrupted":
            raise AssertionError(f"after SIGKILL run {run_id} is {row['status']}")
        return True

    def _wait_final(self, run_id: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            row = self.status(run_id)
            if row["status"] in ("completed", "failed", "cancelled"):
                return
            if row["status"] == "interrupted":
                self.shep("resume", run_id, "--background")
            time.sleep(0.1)
        raise AssertionError(f"run {run_id} did not finish")

    def node_completions(self) -> dict[tuple[str, str], float]:
        """(run, node) -> when its NodeCompleted was recorded (seconds since the epoch)."""
        out: dict[tuple[str, str], float] = {}
        for run_id in {r for r in self.run_ids()}:
            logs = self.shep("logs", run_id, "--json")
            for line in logs.stdout.splitlines():
                row = json.loads(line)
                if row["kind"] == "node.completed":
                    key = (run_id, row["node"])
                    if key in out:
                        raise AssertionError(f"{key} completed twice")
                    out[key] = datetime.fromisoformat(row["timestamp"]).timestamp()
        return out

    def run_ids(self) -> list[str]:
        runs = json.loads(self.shep("status", "--all", "--json").stdout)
        return [r["run_id"] for r in runs]

    def reexecuted_nodes(self) -> int:
        """Agent calls that started for a (run, node) after its completion was recorded.

        The runner gives each agent process SHEP_RUN_ID, and the fake agent logs it,
        so each call is matched to its run exactly.
        """
        completed = self.node_completions()
        again = 0
        for line in self.agent_log.read_text().splitlines():
            call = json.loads(line)
            if call["phase"] != "start":
                continue
            at = completed.get((call["run"], call["node"]))
            if at is not None and call["time"] > at:
                again += 1
        return again
