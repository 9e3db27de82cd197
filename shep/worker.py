"""Starting, resuming and stopping workers: foreground, detached background, cancel.

A background worker is ``python -m shep _worker RUN`` in a new session with its
output in ``$SHEP_HOME/logs/RUN.log``; it survives the terminal that started it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from uuid import UUID

from commands.run_state import RunStatus, load_run
from events.errors import ShepError
from events.store import EventStore
from shep.recovery import pid_alive


def log_path(home: Path, run_id: UUID) -> Path:
    return home / "logs" / f"{run_id.hex}.log"


def spawn_worker(home: Path, run_id: UUID, *, resume: bool, timeout: float | None) -> int:
    """Start a detached worker for the run; return its pid at once."""
    path = log_path(home, run_id)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "shep", "_worker", run_id.hex]
    if resume:
        argv.append("--resume")
    if timeout is not None:
        argv += ["--timeout", str(timeout)]
    with open(path, "ab", buffering=0) as log:
        os.chmod(path, 0o600)
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            close_fds=True,
            env={**os.environ, "SHEP_HOME": str(home)},
        )
    return process.pid


def agent_process_groups(run_id: UUID) -> set[int]:
    """Process groups of agent CLIs started for this run (found by ``SHEP_RUN_ID``; Linux)."""
    needle = f"SHEP_RUN_ID={run_id.hex}".encode()
    groups: set[int] = set()
    proc = Path("/proc")
    if not proc.is_dir():
        return groups
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            with contextlib.suppress(OSError):
                groups.add(os.getpgid(int(entry.name)))
    groups.discard(os.getpgid(0))
    return groups


def stop_worker(pid: int | None, run_id: UUID, *, grace: float) -> list[str]:
    """TERM the worker, KILL it after ``grace`` seconds, then kill the agent's process groups."""
    done: list[str] = []
    if pid is not None and pid != os.getpid() and pid_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if pid_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            done.append(f"killed worker {pid}")
        else:
            done.append(f"stopped worker {pid}")
    for group in agent_process_groups(run_id):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while _group_alive(group) and time.monotonic() < deadline:
            time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
        done.append(f"killed agent process group {group}")
    return done


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class WorkerNotAssignedError(ShepError):
    """The launcher never recorded this worker as the run's worker."""


def wait_until_assigned(store: EventStore, run_id: UUID, pid: int, *, timeout: float = 60) -> None:
    """Block until the run is running with ``pid`` as its worker (the launcher records it)."""
    deadline = time.monotonic() + timeout
    while True:
        state = load_run(store, run_id)
        if state.status is RunStatus.RUNNING and state.pid == pid:
            return
        if time.monotonic() > deadline:
            raise WorkerNotAssignedError(
                f"Run {run_id.hex[:8]} was not handed to worker {pid} "
                f"(it is {state.status.value}, worker {state.pid}); exiting."
            )
        time.sleep(0.02)
