"""A fake agent executable per test, and helpers to drive executors against it."""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from shep.agents import AgentExecutor, ProcessLimits, create_executor

HERE = Path(__file__).parent
SAMPLES = HERE / "samples"
FAKE_AGENT = HERE / "fakes" / "fake_agent.py"
TOKEN = "sk-shep-test-token-4242"

# Short grace periods keep the suite fast; the defaults are exercised in test_process.
FAST = ProcessLimits(kill_grace=0.5, linger=0.3, drain=0.3)


def sample(name: str) -> Path:
    path = SAMPLES / name
    assert path.is_file(), f"missing sample {name}"
    return path


def pid_gone(pid: int) -> bool:
    """The process no longer runs (gone, or a zombie waiting to be reaped by init)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return True
    return fields[0] in ("Z", "X")


@dataclass
class Fake:
    """A fake agent binary in tmp_path, and where it records how it was called."""

    binary: Path
    record: Path
    pidfile: Path
    tmp: Path

    def env(
        self,
        stdout: str | None = None,
        *,
        stream: str | None = None,
        stderr: str | None = None,
        exit: int = 0,
        mode: str | None = None,
        **extra: str,
    ) -> dict[str, str]:
        env = {"FAKE_RECORD": str(self.record), "FAKE_PIDFILE": str(self.pidfile), **extra}
        if stdout is not None:
            env["FAKE_STDOUT"] = str(sample(stdout))
        if stream is not None:
            env["FAKE_STDOUT_STREAM"] = str(sample(stream))
        if stderr is not None:
            env["FAKE_STDERR"] = str(sample(stderr))
        if exit:
            env["FAKE_EXIT"] = str(exit)
        if mode is not None:
            env["FAKE_MODE"] = mode
        return env

    def executor(
        self,
        agent: str,
        stdout: str | None = None,
        *,
        token: str | None = TOKEN,
        limits: ProcessLimits = FAST,
        **kwargs: Any,
    ) -> AgentExecutor:
        return create_executor(
            agent,
            token=token,
            binary=str(self.binary),
            env=self.env(stdout, **kwargs),
            limits=limits,
        )

    def write(self, name: str, text: str) -> Path:
        path = self.tmp / name
        path.write_text(text)
        return path

    def recorded(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.record.read_text())
        return data

    def argv(self) -> list[str]:
        argv: list[str] = self.recorded()["argv"]
        return argv

    def pids(self) -> list[int]:
        return [int(p) for p in self.pidfile.read_text().split()]


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[Fake]:
    """An executable Python script that replays samples (see fakes/fake_agent.py)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    binary = bin_dir / "fake-agent"
    binary.write_text(
        f"#!{sys.executable}\n"
        "import runpy\n"
        f"runpy.run_path({str(FAKE_AGENT)!r}, run_name='__main__')\n"
    )
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    fake = Fake(
        binary=binary, record=tmp_path / "record.json", pidfile=tmp_path / "pids", tmp=tmp_path
    )
    yield fake
    if fake.pidfile.exists() and fake.pidfile.read_text().strip():
        for pid in fake.pids():
            assert pid_gone(pid), f"process {pid} outlived the test"
