"""shep.home.procs, the one reader of processes, on real child processes: their start as
recorded on events (and as an earlier shep recorded it), liveness (zombies count as gone),
their environment, their process groups, and who holds a lock or a file."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from shep.home import procs

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]
LINUX = os.path.exists("/proc/sys/kernel/random/boot_id")


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    """A live child that sleeps; killed and reaped afterwards."""
    process = subprocess.Popen(SLEEP)
    yield process
    process.kill()
    process.wait()


def _zombie(process: subprocess.Popen[bytes]) -> None:
    """Kill ``process`` and wait until it is a zombie (exited, not reaped)."""
    import psutil

    process.kill()
    deadline = time.monotonic() + 10
    while psutil.Process(process.pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the child never exited"
        time.sleep(0.01)
    assert process.returncode is None  # not reaped: the pid still exists


def _earlier_shep_start(pid: int) -> str | None:
    """``process_start`` as shep 0.2 recorded it on RunStarted/RunResumed/feature notes
    (shep.home.identity before psutil): ``<boot id>:<starttime ticks>`` from /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            start = stat.read().rsplit(b")", 1)[1].split()[19].decode()
        with open("/proc/sys/kernel/random/boot_id") as boot:
            return f"{boot.read().strip()}:{start}"
    except (OSError, IndexError, UnicodeDecodeError):
        return None


def test_a_start_is_fixed_for_a_process_and_differs_between_processes(
    child: subprocess.Popen[bytes],
) -> None:
    """A process's recorded start reads the same every time, and another process's differs:
    (pid, start) names one process."""
    first = procs.process_start(child.pid)
    assert first is not None
    time.sleep(0.05)
    assert procs.process_start(child.pid) == first
    assert procs.process_start(os.getpid()) not in (None, first)


def test_a_dead_or_reaped_process_is_gone_and_has_no_start() -> None:
    """Once a child is killed and reaped, it is not alive, not the recorded worker, and has
    no start to read."""
    process = subprocess.Popen(SLEEP)
    started = procs.process_start(process.pid)
    assert procs.pid_alive(process.pid)
    assert procs.worker_alive(process.pid, started)
    process.kill()
    process.wait()
    assert not procs.pid_alive(process.pid)
    assert not procs.worker_alive(process.pid, started)
    assert not procs.worker_alive(process.pid, None)
    assert procs.process_start(process.pid) is None


def test_a_zombie_counts_as_gone() -> None:
    """A child that exited but was not reaped still has its pid, yet is not alive: nothing
    is left to wait for or to signal."""
    process = subprocess.Popen(SLEEP)
    started = procs.process_start(process.pid)
    try:
        _zombie(process)
        assert not procs.pid_alive(process.pid)
        assert not procs.worker_alive(process.pid, started)
    finally:
        process.wait()


@pytest.mark.skipif(not LINUX, reason="the earlier form was recorded on Linux only")
def test_a_start_recorded_by_an_earlier_shep_still_names_its_worker() -> None:
    """Upgrade: a run whose RunStarted holds the start in the form shep recorded before
    psutil still has its live worker recognised (recovery leaves it running), and is
    refused for a process that reused the pid (another start) or a dead one. The value
    recorded now is the very same on Linux."""
    process = subprocess.Popen(SLEEP)
    recorded = _earlier_shep_start(process.pid)
    assert recorded is not None
    assert procs.process_start(process.pid) == recorded
    assert procs.worker_alive(process.pid, recorded)
    boot, ticks = recorded.rsplit(":", 1)
    # The same pid, started at another tick (the pid was reused) or in another boot.
    assert not procs.worker_alive(process.pid, f"{boot}:{int(ticks) - 1}")
    assert not procs.worker_alive(process.pid, f"{uuid.uuid4()}:{ticks}")
    process.kill()
    process.wait()
    assert not procs.worker_alive(process.pid, recorded)


def test_a_start_in_the_portable_form_is_compared_in_that_form(
    child: subprocess.Popen[bytes],
) -> None:
    """A start recorded where Linux's boot id is not read (macOS: psutil's creation time)
    names its live process, and not the same pid with another start."""
    import psutil

    portable = f"{psutil.Process(child.pid).create_time():.6f}"
    assert procs.worker_alive(child.pid, portable)
    assert not procs.worker_alive(child.pid, f"{float(portable) - 1:.6f}")


def test_the_environment_search_finds_a_child_by_its_variable() -> None:
    """processes_with finds the process whose environment sets the variable, with its value,
    and not once the process is gone."""
    mark = uuid.uuid4().hex
    process = subprocess.Popen(SLEEP, env={**os.environ, "SHEP_TEST_MARK": mark})
    try:
        found = dict(procs.processes_with("SHEP_TEST_MARK"))
        assert found.get(process.pid) == mark
        assert procs.environ(process.pid, None) is not None
    finally:
        process.kill()
        process.wait()
    assert process.pid not in dict(procs.processes_with("SHEP_TEST_MARK"))


def test_a_group_with_only_a_zombie_left_is_not_alive() -> None:
    """A process group lives while a member runs; a member that exited unreaped (a zombie
    still answers a signal to the group) does not keep it alive."""
    leader = subprocess.Popen(SLEEP, start_new_session=True)
    try:
        assert procs.group_alive(leader.pid)
        _zombie(leader)
        assert not procs.group_alive(leader.pid)
    finally:
        leader.wait()
    assert not procs.group_alive(leader.pid)


def test_the_group_leaders_a_process_started_are_its_children_in_their_own_group() -> None:
    """A worker's agents are its children that lead their own group: a child in this
    process's group is not one, nor is a grandchild."""
    own = subprocess.Popen(SLEEP, start_new_session=True)
    shared = subprocess.Popen(SLEEP)
    nested = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys, time; "
         "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], "
         "start_new_session=True); print(p.pid, flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    assert nested.stdout is not None
    grandchild = int(nested.stdout.readline())
    try:
        leaders = procs.group_leaders_started_by(os.getpid())
        assert own.pid in leaders
        assert shared.pid not in leaders
        assert grandchild not in leaders
        assert procs.group_leaders_started_by(nested.pid) == [grandchild]
    finally:
        os.kill(grandchild, signal.SIGKILL)
        for process in (own, shared, nested):
            process.kill()
            process.wait()


def test_what_a_process_is_doing_reads_from_the_process(
    child: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    """Its command line, name, directory and open files are the child's own; a gone pid
    reads as nothing."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; f = open(sys.argv[1], 'w'); "
         "print('open', flush=True); time.sleep(60)", str(tmp_path / "held")],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
    )  # fmt: skip
    assert holder.stdout is not None
    assert holder.stdout.readline() == b"open\n"
    try:
        assert procs.command_line(child.pid) == " ".join(SLEEP)
        assert procs.process_name(child.pid).startswith("python")
        assert procs.working_directory(holder.pid) == os.path.realpath(tmp_path)
        assert procs.has_open(holder.pid, os.path.realpath(tmp_path / "held"))
        assert not procs.has_open(child.pid, os.path.realpath(tmp_path / "held"))
        assert holder.pid in procs.others()
        assert os.getpid() not in procs.others()
        assert procs.cpu_seconds(child.pid) >= 0
    finally:
        holder.kill()
        holder.wait()
    assert procs.command_line(holder.pid) is None
    assert procs.working_directory(holder.pid) is None
    assert math.isnan(procs.cpu_seconds(holder.pid))


def _locker(path: Path, how: str) -> subprocess.Popen[bytes]:
    """A child holding a ``how`` (``flock`` or ``lockf``) exclusive lock on ``path``."""
    process = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time; "
         "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
         f"fcntl.{how}(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)",
         str(path)],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    assert process.stdout is not None
    assert process.stdout.readline() == b"held\n"
    return process


@pytest.mark.skipif(not os.path.exists("/proc/locks"), reason="Linux's lock table")
@pytest.mark.parametrize(("how", "kind"), [("flock", "FLOCK"), ("lockf", "POSIX")])
def test_lock_holders_names_the_process_holding_the_lock(
    tmp_path: Path, how: str, kind: str
) -> None:
    """Linux: the lock table names the holder of a flock or POSIX lock, and only it (a
    process with the file open but no lock is not named); none once it is released."""
    path = tmp_path / "lock"
    holder = _locker(path, how)
    try:
        with open(path):  # this process has it open, without a lock
            assert procs.lock_holders(str(path), kind) == [holder.pid]
            other = "POSIX" if kind == "FLOCK" else "FLOCK"
            assert procs.lock_holders(str(path), other) == []
    finally:
        holder.kill()
        holder.wait()
    assert procs.lock_holders(str(path), kind) == []
    assert procs.lock_holders(str(tmp_path / "missing"), kind) == []


def test_without_a_lock_table_a_posix_lock_is_answered_with_who_has_the_file_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where no lock table can be read (macOS), a POSIX lock's holders are the processes
    with the file open (the holder among them); a flock's cannot be named."""
    monkeypatch.setattr(procs, "_LOCKS", str(tmp_path / "no-lock-table"))
    path = tmp_path / "lock"
    holder = _locker(path, "lockf")
    try:
        assert procs.lock_holders(str(path), "POSIX") == [holder.pid]
        assert procs.lock_holders(str(path), "FLOCK") == []
    finally:
        holder.kill()
        holder.wait()
    assert procs.lock_holders(str(path), "POSIX") == []
