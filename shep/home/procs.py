"""This home's processes: whether one still lives (and is the one recorded), when it
started, which processes a run or a supervisor started, starting a detached shep, and
which process holds a lock or a file. The one module that reads processes (issue 19):
nothing else in shep reads ``/proc`` or imports psutil.

It reads them through psutil, so it works on Linux and macOS alike; psutil is imported
inside the functions (``shep status`` and ``shep inbox`` never pay for it). Two reads keep
a Linux path, because psutil has no public equivalent: a process's start as recorded on
events (:func:`process_start`) and the lock table (:func:`lock_holders`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import psutil

_BOOT_ID = "/proc/sys/kernel/random/boot_id"
_LOCKS = "/proc/locks"
T = TypeVar("T")


def process_start(pid: int) -> str | None:
    """When process ``pid`` started, as recorded on events; None if it cannot be read.

    A pid is reused once its process is gone; (pid, start) is not. On Linux the value is
    ``<boot id>:<clock ticks from boot to its start>``, read from ``/proc`` exactly as shep
    always recorded it (psutil gives the start only as seconds since the epoch, derived
    from a boot time that moves with the clock, so a live worker recorded by an earlier
    shep would no longer match). Elsewhere (macOS) it is psutil's creation time, which the
    kernel keeps fixed for the process's life, as ``<seconds since the epoch>`` with six
    decimals. The two forms never compare equal: a start recorded in one form is compared
    with the same form (see :func:`worker_alive`).
    """
    return _linux_start(pid) if os.path.exists(_BOOT_ID) else _portable_start(pid)


def _linux_start(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            # Field 22 (starttime); the fields after the parenthesised name start at 3.
            start = stat.read().rsplit(b")", 1)[1].split()[19].decode()
        with open(_BOOT_ID) as boot:
            return f"{boot.read().strip()}:{start}"
    except (OSError, IndexError, UnicodeDecodeError):
        return None


def _portable_start(pid: int) -> str | None:
    import psutil

    try:
        return f"{psutil.Process(pid).create_time():.6f}"
    except (psutil.Error, OSError):
        return None


def worker_alive(pid: int, started: str | None) -> bool:
    """Whether process ``pid`` still exists here and is the one that started at ``started``.

    ``started`` is compared in the form it was recorded in (Linux's boot id and ticks, or
    the portable creation time), so a start recorded by an earlier shep still matches its
    live worker and never a process that reused the pid. Without a recorded start, or when
    the start of ``pid`` cannot be read, the pid alone decides.
    """
    if not pid_alive(pid):
        return False
    if started is None:
        return True
    now = _linux_start(pid) if ":" in started else _portable_start(pid)
    return now is None or now == started


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this host (zombies count as gone)."""
    if pid <= 0:
        return False
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:  # ZombieProcess is one too
        return False
    except psutil.AccessDenied:
        return True  # it exists, as another user's


def group_alive(pgid: int) -> bool:
    """Whether any member of process group ``pgid`` still runs (zombies do not count: an
    orphan that exited stays one until init reaps it, and answers a signal all the same)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's members: still members
    return any(_group_of(p) == pgid and _running(p) for p in _processes())


def group_leaders_started_by(pid: int) -> list[int]:
    """The children of process ``pid`` that lead a process group of their own (how a
    worker finds the agents it started in their own sessions)."""
    import psutil

    try:
        children = psutil.Process(pid).children()
    except psutil.Error:
        return []
    return [c.pid for c in children if _group_of(c) == c.pid]


def processes_with(variable: str) -> Iterator[tuple[int, str]]:
    """(pid, value) of every process of this user whose environment sets ``variable``
    (other users' environments cannot be read). How shep finds the agents a run started
    and the evaluators a supervisor started, even after the process that started them died.
    """
    import psutil

    for process in _processes():
        try:
            value = process.environ().get(variable)
        except (psutil.Error, OSError):
            continue  # gone meanwhile, or another user's
        if value is not None:
            yield process.pid, value


def environ(pid: int, unreadable: dict[str, str] | None = None) -> dict[str, str] | None:
    """The environment of process ``pid``; ``unreadable`` when it cannot be read (gone, or
    another user's)."""
    return _read(pid, lambda p: p.environ(), unreadable)


def command_line(pid: int) -> str | None:
    """The command line of process ``pid``, its words joined by spaces (None: gone)."""
    return _read(pid, lambda p: " ".join(p.cmdline()), None)


def process_name(pid: int) -> str:
    """The executable's name of process ``pid`` (empty when it cannot be read)."""
    return _read(pid, lambda p: p.name(), "")


def working_directory(pid: int) -> str | None:
    """The working directory of process ``pid`` (None when it cannot be read)."""
    return _read(pid, lambda p: p.cwd(), None)


def has_open(pid: int, path: str) -> bool:
    """Whether process ``pid`` holds the file at ``path`` (a real path) open."""
    return _read(pid, lambda p: any(f.path == path for f in p.open_files()), False)


def others() -> list[int]:
    """The pids of every process on this host but this one."""
    import psutil

    me = os.getpid()
    return [pid for pid in psutil.pids() if pid != me]


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far (NaN: gone)."""
    return _read(pid, lambda p: float(sum(p.cpu_times()[:2])), float("nan"))


def lock_holders(path: str, kind: str) -> list[int]:
    """Pids holding a ``kind`` lock (``"FLOCK"``, ``"POSIX"``) on the file at ``path``.

    Linux lists the locks themselves (``/proc/locks``), so it names exactly the holders.
    Elsewhere (macOS) no system call lists locks: a ``"POSIX"`` lock (SQLite's) is
    answered with the processes that have the file open (one of them holds it), a
    ``"FLOCK"`` with none (the caller says the lock is held by a process it cannot name).
    """
    try:
        inode = os.stat(path).st_ino
    except OSError:
        return []
    try:
        with open(_LOCKS) as locks:
            lines = locks.read().splitlines()
    except OSError:
        if kind != "POSIX":
            return []
        real = os.path.realpath(path)
        return sorted(pid for pid in [os.getpid(), *others()] if has_open(pid, real))
    pids = []
    for line in lines:
        # "1: FLOCK  ADVISORY  WRITE 4242 08:01:1234 0 EOF"; waiters are marked "->".
        fields = line.split()
        if (
            len(fields) > 5
            and "->" not in fields
            and fields[1] == kind
            and fields[5].rsplit(":", 1)[-1] == str(inode)
            and fields[4].isdigit()
        ):
            pids.append(int(fields[4]))
    return sorted(set(pids))


def spawn_shep(home: Path, args: list[str], log: Path) -> int:
    """Start ``shep ARGS`` detached (its own session, in ``home``, output to ``log``)."""
    log.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    # -P: never put the working directory (or a script's) first on sys.path. A flag, not
    # PYTHONSAFEPATH: every child would inherit that, and `python -m pytest` in the
    # user's project would no longer import the project.
    argv = [sys.executable, "-P", "-m", "shep", *args]
    with open(log, "ab", buffering=0) as out:
        os.chmod(log, 0o600)
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
            close_fds=True,
            cwd=home,
            env={**os.environ, "SHEP_HOME": str(home)},
        )
    return process.pid


def _read(pid: int, read: Callable[[psutil.Process], T], default: T) -> T:
    """What ``read`` gets from process ``pid``, or ``default`` when it cannot be read (gone,
    or another user's)."""
    import psutil

    try:
        return read(psutil.Process(pid))
    except (psutil.Error, OSError):
        return default


def _processes() -> Iterator[psutil.Process]:
    import psutil

    return psutil.process_iter()


def _group_of(process: psutil.Process) -> int | None:
    try:
        return os.getpgid(process.pid)
    except OSError:
        return None


def _running(process: psutil.Process) -> bool:
    import psutil

    try:
        return process.status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True
