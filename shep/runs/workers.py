"""Starting, resuming and stopping workers: foreground, detached background, cancel.

A background worker is ``python -P -m shep _worker RUN`` in a new session,
started in ``$SHEP_HOME`` with its output in ``$SHEP_HOME/logs/RUN.log``; it
survives the terminal that started it. ``-P`` and the neutral directory keep
the caller's directory (the user's repository, which may have its own
``events/`` or ``shep/`` package) off ``sys.path``: a worker imports only shep.
``-P`` is a flag of shep's own interpreter only: the worker's environment is the
caller's (plus ``SHEP_HOME``), so what it starts (the project's test and setup
commands, agent CLIs, ``notify_command``) runs as it would from the user's shell.

A worker is identified by pid, host and process start time: a pid reused by
another process never matches, so it is never signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from uuid import UUID

from commands.run_state import RunState, load_run
from events.errors import WorkerNotAssignedError
from events.run_ids import RUN_ID_ENV
from events.runs import RunStatus
from events.store import EventStore
from shep.home.procs import group_alive, process_start, processes_with, spawn_shep, worker_alive

if TYPE_CHECKING:
    from shep.home.runtime import Runtime


@dataclass(frozen=True)
class Background:
    """A run handed to a detached worker: its id and the worker's pid."""

    run_id: UUID
    pid: int

    @property
    def notice(self) -> str:
        """What a person is told: the worker, and how to follow it."""
        return (
            f"Started worker {self.pid} in the background. Follow it with "
            f"`shep logs {self.run_id.hex[:8]} --follow`."
        )


def start_in_background(
    runtime: Runtime, run_id: UUID, *, resume: bool, timeout: float | None
) -> Background:
    """Start (or resume) the run in a detached worker, and record that it owns the run.

    The start is recorded here, not by the worker: a worker that dies while still
    importing is then a running run with a dead pid, which recovery marks interrupted.
    A new run whose worker cannot be started fails with the reason.
    """
    from commands.fail_run import fail_run
    from commands.resume_run import resume_run
    from commands.start_run import start_run
    from events.errors import ShepError
    from shep.home.identity import host_name

    try:
        pid = spawn_worker(runtime.home, run_id, resume=resume, timeout=timeout)
    except OSError as e:
        message = f"Cannot start a background worker: {e}."
        if not resume:
            fail_run(runtime.store(), run_id, error_type="WorkerStartError", message=message)
        raise ShepError(message) from e
    begin = resume_run if resume else start_run
    try:
        begin(
            runtime.store(),
            run_id,
            pid=pid,
            host=host_name(),
            background=True,
            log_path=str(log_path(runtime.home, run_id)),
            process_start=process_start(pid),
        )
    except BaseException:
        # Not handed the run (another worker took it first): it must not linger.
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        raise
    return Background(run_id, pid)


def local_worker(state: RunState) -> tuple[int | None, str | None]:
    """The pid and start time of the process that last owned the run, if it ran on this host.

    ``state`` is the run as it was when the worker was last known to run it
    (a running run, or the fold just before a cancel).
    """
    from shep.home.identity import host_name

    if state.epoch == 0 or state.host != host_name():
        return None, None
    return state.pid, state.process_start


def log_path(home: Path, run_id: UUID) -> Path:
    return home / "logs" / f"{run_id.hex}.log"


def spawn_worker(home: Path, run_id: UUID, *, resume: bool, timeout: float | None) -> int:
    """Start a detached worker for the run; return its pid at once."""
    args = ["_worker", run_id.hex]
    if resume:
        args.append("--resume")
    if timeout is not None:
        args += ["--timeout", str(timeout)]
    return spawn_shep(home, args, log_path(home, run_id))


def agent_process_groups(run_id: UUID) -> set[int]:
    """Process groups of agent CLIs started for this run (found by ``SHEP_RUN_ID``; Linux)."""
    groups: set[int] = set()
    for pid, value in processes_with(RUN_ID_ENV):
        if value == run_id.hex:
            with contextlib.suppress(OSError):
                groups.add(os.getpgid(pid))
    groups.discard(os.getpgid(0))
    return groups


def stop_worker(pid: int | None, started: str | None, run_id: UUID, *, grace: float) -> list[str]:
    """TERM the worker, KILL it after ``grace`` seconds, then kill the agent's process groups.

    The worker is signalled only while it is still the process that was
    recorded (pid and start time ``started``); pass ``pid=None`` for a run
    known to have no worker on this host.
    """
    done: list[str] = []

    def alive() -> bool:
        return pid is not None and worker_alive(pid, started)

    if pid is not None and pid != os.getpid() and alive():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
            # A stopped worker (SIGSTOP, Ctrl-Z) handles TERM only once it runs again.
            os.kill(pid, signal.SIGCONT)
        deadline = time.monotonic() + grace
        while alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            done.append(f"killed worker {pid}")
        else:
            done.append(f"stopped worker {pid}")
    for group in agent_process_groups(run_id):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while group_alive(group) and time.monotonic() < deadline:
            time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
        done.append(f"killed agent process group {group}")
    return done


def wait_until_assigned(
    store: EventStore, run_id: UUID, pid: int, *, timeout: float = 60
) -> RunState:
    """Block until the run is running with this process as its worker (the launcher records it).

    Returns that state: its ``epoch`` is this worker's, to fence its appends with.
    """
    deadline = time.monotonic() + timeout
    started = process_start(pid)
    while True:
        state = load_run(store, run_id)
        if (
            state.status is RunStatus.RUNNING
            and state.pid == pid
            and (state.process_start is None or state.process_start == started)
        ):
            return state
        if time.monotonic() > deadline:
            raise WorkerNotAssignedError(
                f"Run {run_id.hex[:8]} was not handed to worker {pid} "
                f"(it is {state.status.value}, worker {state.pid}); exiting."
            )
        time.sleep(0.02)
