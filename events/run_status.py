"""The status words of a run and of its nodes, apart from the events (``events.runs``) that
set them.

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


class NodeStatus(StrEnum):
    """Where a node of a run is: the runs projection's ``nodes.status``, and the same words in
    every reader that follows a node (replay, the feature timeline, the OTLP writer).
    """

    PENDING = "pending"
    RUNNING = "running"
    #: Asked a question or a gate, and waits for people.
    WAITING = "waiting"
    COMPLETED = "completed"
    FAILED = "failed"
    #: Left running or waiting when its run ended.
    STOPPED = "stopped"
    #: A node whose item was withdrawn (its run was cancelled or failed first).
    WITHDRAWN = "withdrawn"
