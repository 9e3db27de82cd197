"""This home's processes: whether one still lives (and is the one recorded), starting a
detached shep, and which process holds a lock. The module that reads ``/proc`` (issue
19's layout: the remaining readers move here as the reshape goes on).
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from shep.home.identity import process_start


def lock_holders(inode: int, kind: str) -> list[int]:
    """Pids that ``/proc/locks`` lists as holding a ``kind`` lock (``"FLOCK"``,
    ``"POSIX"``) on the file whose inode is ``inode`` (empty where there is no /proc)."""
    try:
        with open("/proc/locks") as locks:
            lines = locks.read().splitlines()
    except OSError:
        return []
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


def worker_alive(pid: int, started: str | None) -> bool:
    """Whether process ``pid`` still exists here and is the one that started at ``started``.

    Without a recorded start time (or off Linux) the pid alone decides.
    """
    if not pid_alive(pid):
        return False
    if started is None:
        return True
    now = process_start(pid)
    return now is None or now == started


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this host (zombies count as gone)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except OSError as e:
        return e.errno == errno.EPERM
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            # The state letter follows the parenthesised command name.
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


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


def processes_with(variable: str) -> Iterator[tuple[int, str]]:
    """(pid, value) of every process of this user whose environment sets ``variable``
    (Linux: none where there is no ``/proc``). How shep finds the agents a run started
    and the evaluators a supervisor started, even after the process that started them died.
    """
    needle = f"{variable}=".encode()
    proc = Path("/proc")
    if not proc.is_dir():
        return
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue  # gone meanwhile, or another user's
        found = next((v for v in environ.split(b"\0") if v.startswith(needle)), None)
        if found is not None:
            yield int(entry.name), found[len(needle) :].decode(errors="replace")
