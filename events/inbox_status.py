"""The words of the inbox, apart from the events (``events.inbox``) that set them: an item's
kind and status, and the verdict each decision event records.

The read side imports this alone (as it does ``events.run_status``), without defining every
event type.
"""

from __future__ import annotations

from enum import StrEnum


class ItemKind(StrEnum):
    """What an inbox item asks for: an answer, or a yes or no at a gate."""

    QUESTION = "question"
    APPROVAL = "approval"


class ItemStatus(StrEnum):
    """Where an inbox item is: pending until decided, then answered, approved or rejected;
    withdrawn when its run is cancelled or fails first. ``approved`` and ``rejected`` are
    also a gate's verdict, wherever one is recorded or shown.
    """

    PENDING = "pending"
    ANSWERED = "answered"
    APPROVED = "approved"
    REJECTED = "rejected"
    WITHDRAWN = "withdrawn"


#: The verdict each decision event records, by the event's type name (the supervisor's
#: ``SupervisorDecisionMade`` carries its own, in its ``decision``). One map for the
#: audit export's ``verdict`` and the OTLP writer's.
DECISION_VERDICTS: dict[str, str] = {
    "QuestionAnswered": ItemStatus.ANSWERED,
    "ApprovalGranted": ItemStatus.APPROVED,
    "ApprovalRejected": ItemStatus.REJECTED,
    "ApprovalVoted": "vote",
    "SupervisorDecisionRefused": "refused",
}
