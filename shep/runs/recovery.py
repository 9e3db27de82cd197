"""Finding runs whose worker is gone, and marking them interrupted.

Every shep command runs ``find_orphans`` on the runs projection (a cheap
indexed read). A running run is an orphan when

- its worker ran on this host and that process is gone: no process has its
  pid, or the one that has it started at another time (a reused pid). A
  worker that is still there is **not** an orphan however old its heartbeat
  (a stopped process, a sleeping laptop): it would wake and go on;
- its worker ran on another host and its last heartbeat is older than
  ``orphan_after`` seconds (the only sign there is).

A pending run is an orphan when the process that created it is gone before
starting it (a failure or Ctrl-C in between), or, for a creator on another
host, when it has been pending longer than ``orphan_after``.

Marking it is an event (``RunInterrupted``), written through ``commands``,
compare-and-set on the owner the decision was made about (its epoch): if the
run was resumed meanwhile, nothing is recorded.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import apsw
import msgspec

from events.runs import RunStatus
from events.setting_values import SECONDS_SETTINGS
from shep.home.procs import worker_alive

if TYPE_CHECKING:
    from shep.home.runtime import Runtime

DEFAULT_ORPHAN_AFTER = SECONDS_SETTINGS["orphan_after"].default


@dataclass(frozen=True)
class Orphan:
    run_id: str
    reason: str
    #: The owner found gone (0: the run never started), for the compare-and-set.
    epoch: int


class _Owner(msgspec.Struct):
    """The fields of ``RunCreated``/``RunStarted``/``RunResumed`` that name the run's process."""

    pid: int | None = None
    host: str | None = None
    process_start: str | None = None
    epoch: int = 0


_OWNER_TOPICS = tuple(f"events.runs:{name}" for name in ("RunStarted", "RunResumed", "RunCreated"))
_LATEST_OWNER = (
    "SELECT topic, state FROM stored_events WHERE originator_id=? AND topic IN (?,?,?) "
    "ORDER BY originator_version DESC LIMIT 1"
)
_OWNERS_SO_FAR = "SELECT count(*) FROM stored_events WHERE originator_id=? AND topic IN (?,?)"


def _owner(conn: apsw.Connection, run_id: str) -> _Owner:
    """The run's newest owner as the log says (the projection keeps no process start time)."""
    row = conn.execute(_LATEST_OWNER, (run_id, *_OWNER_TOPICS)).fetchone()
    if row is None:
        return _Owner()
    owner = msgspec.json.decode(row[1], type=_Owner)
    if row[0] != _OWNER_TOPICS[2] and not owner.epoch:
        # Written before fencing: the fold counts owners, so count them here too.
        count = conn.execute(_OWNERS_SO_FAR, (run_id, *_OWNER_TOPICS[:2])).fetchone()
        owner.epoch = int(count[0]) if count else 0
    return owner


def find_orphans(
    conn: apsw.Connection,
    *,
    host: str,
    orphan_after: float = DEFAULT_ORPHAN_AFTER,
    now: datetime | None = None,
) -> list[Orphan]:
    """Running or pending runs whose process is gone (see the module docstring)."""
    moment = now or datetime.now(UTC)
    stale_before = (moment - timedelta(seconds=orphan_after)).isoformat()
    orphans = []
    for run_id, status, heartbeat, created_at in conn.execute(
        "SELECT run_id, status, last_heartbeat, created_at FROM runs WHERE status IN (?, ?)",
        (RunStatus.RUNNING.value, RunStatus.PENDING.value),
    ):
        run = str(run_id)
        owner = _owner(conn, run)
        running = status == RunStatus.RUNNING
        epoch = owner.epoch if running else 0
        pid, who = owner.pid, "worker" if running else "creator"
        if owner.host == host and pid is not None:
            if not worker_alive(pid, owner.process_start):
                orphans.append(Orphan(run, f"{who} pid {pid} on {host} is gone", epoch))
        elif running:
            if heartbeat is None or str(heartbeat) < stale_before:
                orphans.append(
                    Orphan(
                        run,
                        f"no heartbeat for more than {orphan_after:g}s (pid {pid} on {owner.host})",
                        epoch,
                    )
                )
        elif str(created_at) < stale_before:
            orphans.append(Orphan(run, f"never started in {orphan_after:g}s", epoch))
    return orphans


def orphan_after(conn: apsw.Connection) -> float:
    """The ``orphan_after`` setting, read straight from the settings stream.

    Cheap (apsw and msgspec, no eventsourcing): the orphan check of every command runs it.
    """
    from shep.home.settings import read_setting_values

    return read_setting_values(conn).values["orphan_after"]


def mark_orphans(runtime: Runtime) -> list[str]:
    """Mark running (or never started) runs whose process is gone as interrupted; the ids
    (hex) of those this process marked, for a face to say so. Every command does it first;
    cheap when nothing is running (``Runtime.may_have_orphans``, one indexed read).
    """
    if not runtime.may_have_orphans():
        return []
    from shep.home.identity import host_name

    conn = runtime.read_db()
    orphans = find_orphans(conn, host=host_name(), orphan_after=orphan_after(conn))
    if not orphans:
        return []  # a live worker: nothing imported for writing (status stays light)
    from uuid import UUID

    from commands.mark_interrupted import mark_interrupted
    from events.errors import (
        ConcurrencyError,
        InvalidTransitionError,
        StoreTooNewError,
        WorkerFencedError,
    )
    from projections.catch_up import catch_up

    marked: list[str] = []
    for orphan in orphans:
        try:
            mark_interrupted(
                runtime.store(),
                UUID(orphan.run_id),
                reason=orphan.reason,
                detected_by_pid=os.getpid(),
                detected_by_host=host_name(),
                epoch=orphan.epoch,
            )
            marked.append(orphan.run_id)
        except (InvalidTransitionError, ConcurrencyError, WorkerFencedError):
            continue  # another process got there first, the run ended, or was resumed
        except StoreTooNewError:
            return marked  # a newer shep's store: read as it is; this shep writes none of it
    catch_up(conn)
    return marked
