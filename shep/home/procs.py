"""What the system says about processes: the one module that reads ``/proc``.

(Issue 19's layout: other readers of processes move here as the reshape goes on.)
"""

from __future__ import annotations


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
