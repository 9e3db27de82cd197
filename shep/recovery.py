"""Finding runs whose worker is gone, and marking them interrupted.

Every shep command runs ``find_orphans`` on the runs projection (a cheap
indexed read). A running run is an orphan when its worker pid no longer exists
on this host, or when its last heartbeat is older than ``orphan_after`` seconds
(a worker on another host, or a pid reused by another process). Marking it is
an event (``RunInterrupted``), written through ``commands`` like any other.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import apsw

DEFAULT_ORPHAN_AFTER = 120.0


@dataclass(frozen=True)
class Orphan:
    run_id: str
    reason: str


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


def find_orphans(
    conn: apsw.Connection,
    *,
    host: str,
    orphan_after: float = DEFAULT_ORPHAN_AFTER,
    now: datetime | None = None,
) -> list[Orphan]:
    """Running runs whose worker is gone (pid dead here) or silent (stale heartbeat)."""
    moment = now or datetime.now(UTC)
    stale_before = (moment - timedelta(seconds=orphan_after)).isoformat()
    orphans = []
    for run_id, pid, run_host, heartbeat in conn.execute(
        "SELECT run_id, pid, host, last_heartbeat FROM runs WHERE status='running'"
    ):
        if run_host == host and pid is not None and not pid_alive(int(pid)):
            orphans.append(Orphan(str(run_id), f"worker pid {pid} on {host} is gone"))
        elif heartbeat is None or str(heartbeat) < stale_before:
            orphans.append(
                Orphan(
                    str(run_id),
                    f"no heartbeat for more than {orphan_after:g}s (pid {pid} on {run_host})",
                )
            )
    return orphans


def orphan_after(conn: apsw.Connection) -> float:
    """The ``orphan_after`` setting, read straight from the settings stream (no fold needed)."""
    import msgspec

    from events.settings import SETTINGS_STREAM_ID, SettingChanged

    topic = f"{SettingChanged.__module__}:{SettingChanged.__qualname__}"
    value = DEFAULT_ORPHAN_AFTER
    for (state,) in conn.execute(
        "SELECT state FROM stored_events WHERE originator_id=? AND topic=? "
        "ORDER BY originator_version",
        (SETTINGS_STREAM_ID.hex, topic),
    ):
        event = msgspec.json.decode(state, type=SettingChanged)
        if event.key == "orphan_after":
            value = float(event.value)
    return value
