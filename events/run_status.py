"""The status words of a run, apart from the events (``events.runs``) that set them.

The read side imports this alone: `shep status` filters on the words without defining
every event type.
"""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    """Where a run is. The status words, said once: the write side folds them, the read side
    stores and filters on them.
    """

    PENDING = "pending"
    RUNNING = "running"
    WAITING_APPROVAL = "waiting_approval"
    WAITING_ANSWER = "waiting_answer"
    COMPLETED = "completed"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    CANCELLED = "cancelled"


#: A run in one of these never changes again (unless a user forks or retries it).
FINAL_STATUSES = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED})
#: Waiting for people: no worker runs; a decision starts one.
WAITING_STATUSES = frozenset({RunStatus.WAITING_APPROVAL, RunStatus.WAITING_ANSWER})
