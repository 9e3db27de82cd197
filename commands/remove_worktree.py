"""Record that a feature's worktree (and perhaps its branch) was removed."""

from __future__ import annotations

from uuid import UUID

from commands.run_state import append_to_run
from events.features import WorktreeRemoved
from events.store import EventStore


def remove_worktree(
    store: EventStore,
    run_id: UUID,
    *,
    path: str,
    branch: str,
    branch_deleted: bool,
    removed_by: str,
    reason: str,
) -> WorktreeRemoved:
    """Append ``WorktreeRemoved`` to the feature's run, whatever its status.

    The caller has removed the worktree with git first: the event records what
    was done, so a crash between the two leaves a worktree that is gone but not
    yet recorded, which ``shep feat gc`` reports and ``shep feat rm`` records.
    """
    _, events = append_to_run(
        store,
        run_id,
        [
            (
                WorktreeRemoved,
                {
                    "path": path,
                    "branch": branch,
                    "branch_deleted": branch_deleted,
                    "removed_by": removed_by,
                    "reason": reason,
                },
            )
        ],
    )
    return events[0]
