"""Events of question and approval streams: one stream per question or approval gate.

An item's stream id is derived from its run and the LangGraph interrupt that
asked it (``item_stream_id``), so asking again after a crash finds the same
stream. The item is version 1; its decision follows, appended with optimistic
concurrency on the stream's version: exactly one decision takes effect, and a
second (two terminals, the supervisor racing the user) is a conflict, never an
overwrite. Two things may come before or after it: a user's approval that
waits for the supervisor's co-signature (``ApprovalVoted``, under a cosign
policy), and a user's decision that overrides the supervisor's while the run
still waits on the item (``overrides``): the user always wins.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar
from uuid import UUID, uuid5

import msgspec

from events.base import Event


def item_stream_id(run_id: UUID, interrupt_id: str) -> UUID:
    """The stream of the inbox item a run's interrupt asks."""
    return uuid5(run_id, f"interrupt:{interrupt_id}")


class QuestionOption(msgspec.Struct, frozen=True, kw_only=True):
    """One answer a question offers; exactly one option of a question is recommended."""

    id: str
    label: str
    description: str = ""
    recommended: bool = False


class ArtifactRef(msgspec.Struct, frozen=True, kw_only=True):
    """Something an approval is about, with the hash of the content being approved.

    ``kind`` ``file``: ``path`` is a file of the worktree, ``sha256`` its content's
    (empty when it could not be read). ``diff``: the change a merge brings, ``path``
    ``BASE..TREE`` (the base commit and the worktree's tree), ``sha256`` of those two
    ids. ``tests``: the test result, ``path`` the command, ``sha256`` of the command
    and its exit code.
    """

    path: str
    sha256: str
    kind: str = "file"


#: The kind of a gate that names none.
GATE = "gate"
#: The feature workflow's gate nodes by the kind a policy names them with, as shep 0.2.0
#: knew them: what its ``ApprovalRequested`` (which said no kind) are read with.
_GATE_KINDS_0_2 = {"prd": "prd", "plan_gate": "plan", "merge_gate": "merge"}


class QuestionAsked(Event, frozen=True, kw_only=True, tag_field="class_version", tag=2):
    """A workflow asked a person something: 2 to 9 options, one recommended, free text allowed.

    ``deadline`` (UTC) is when the recommended option is applied by
    ``system:deadline`` if nobody answered.
    """

    class_version: ClassVar[int] = 2

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        """Version 1 (shep 0.1.0) had no ``reapply``."""
        state.setdefault("reapply", None)

    run_id: UUID
    node: str
    question: str
    choices: list[str] = []
    options: list[QuestionOption] = []
    free_text: bool = True
    context: str = ""
    iteration: int = 1
    interrupt_id: str = ""
    deadline: str | None = None
    #: A fork made with ``--reapply-answers``: whether the origin's answer was reapplied
    #: to this question, and why (None when the origin asked no such question).
    reapply: str | None = None

    def offered(self) -> list[QuestionOption]:
        """The options, as the inbox shows them (a question of plain ``choices``: each one
        its own id and label).
        """
        return self.options or [QuestionOption(id=c, label=c) for c in self.choices]

    def option_named(self, answer: str) -> QuestionOption | None:
        """The option ``answer`` names: its id (what the inbox shows in brackets), else its
        label; any case, outer spaces ignored. None: ``answer`` is no option's.
        """
        wanted = answer.strip().casefold()
        offered = self.offered()
        for option in offered:
            if option.id.casefold() == wanted:
                return option
        return next((o for o in offered if o.label.casefold() == wanted), None)


def already_decided(item_hex: str, decided: str, actor: str, at: datetime) -> str:
    """Why a decision was refused: ``Item 1a2b3c4d was already approved by user:alice at
    2024-05-01 10:00:00 UTC.`` (``decided``: approved, rejected, answered 'x').
    """
    return f"Item {item_hex[:8]} was already {decided} by {actor} at {at:%Y-%m-%d %H:%M:%S} UTC."


class QuestionAnswered(Event, frozen=True, kw_only=True):
    """Someone answered a question: an option's id, or free text (``option_id`` None)."""

    answer: str
    actor: str
    option_id: str | None = None
    run_id: UUID | None = None
    node: str | None = None
    #: Carried over by ``shep fork --reapply-answers``: the origin's item it repeats.
    reapplied_from: UUID | None = None
    #: A user's decision replacing the supervisor's (its actor), while the run still waited.
    overrides: str | None = None


class ApprovalRequested(Event, frozen=True, kw_only=True, tag_field="class_version", tag=3):
    """A workflow gate needs a yes or no before the run goes on.

    ``phase`` is the node a rejection sends the run back to; ``artifacts`` are
    the files being approved, each with the sha256 of its content. ``gate_kind`` is
    what a supervisor policy calls the gate (the workflow says it).
    """

    class_version: ClassVar[int] = 3

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        """Version 1 (shep 0.1.0) had no ``reapply``."""
        state.setdefault("reapply", None)

    @staticmethod
    def upcast_v2_v3(state: dict[str, Any]) -> None:
        """Version 2 (shep 0.2.0) had no ``gate_kind``: the only gates then were the feature
        workflow's, known by their node names."""
        state.setdefault("gate_kind", _GATE_KINDS_0_2.get(state.get("node", ""), GATE))

    run_id: UUID
    node: str
    summary: str
    prompt_version: str | None = None
    phase: str = ""
    artifacts: list[ArtifactRef] = []
    iteration: int = 1
    interrupt_id: str = ""
    #: A fork made with ``--reapply-answers``: whether the origin's decision was reapplied
    #: to this gate, and why; it is only when every artifact is byte-identical to those
    #: the origin's decision was about (None when the origin asked no such gate).
    reapply: str | None = None
    #: What a supervisor policy calls this gate: the feature workflow's ``prd``, ``plan`` and
    #: ``merge``; ``gate`` for a gate that names no kind.
    gate_kind: str = GATE


class ApprovalGranted(Event, frozen=True, kw_only=True):
    """The gate was approved: by whom, under which policy, and why."""

    actor: str
    rationale: str = ""
    policy: str | None = None
    run_id: UUID | None = None
    node: str | None = None
    #: Carried over by ``shep fork --reapply-answers``: the origin's item it repeats.
    reapplied_from: UUID | None = None
    #: A user's decision replacing the supervisor's (its actor), while the run still waited.
    overrides: str | None = None
    #: Under a cosign policy: the other approver (the supervisor, or the user who voted first).
    cosigned_by: str | None = None


class ApprovalRejected(Event, frozen=True, kw_only=True):
    """The gate was rejected: by whom, under which policy, and why (given to the agent)."""

    actor: str
    rationale: str = ""
    policy: str | None = None
    run_id: UUID | None = None
    node: str | None = None
    #: Carried over by ``shep fork --reapply-answers``: the origin's item it repeats.
    reapplied_from: UUID | None = None
    #: A user's decision replacing the supervisor's (its actor), while the run still waited.
    overrides: str | None = None


class ApprovalVoted(Event, frozen=True, kw_only=True):
    """A user approved a gate under a cosign policy before the supervisor co-signed it.

    The gate stays open: it is approved when the supervisor approves too. If
    the supervisor declines (rejects or escalates), the user's next approval
    decides alone.
    """

    actor: str
    rationale: str = ""
    policy: str | None = None
    run_id: UUID | None = None
    node: str | None = None


def notification_stream_id(item_id: UUID) -> UUID:
    """The stream of an inbox item's notifications (kept apart from the item's decision)."""
    return uuid5(item_id, "notify")


class NotificationSent(Event, frozen=True, kw_only=True):
    """The ``notify_command`` was given a new inbox item and exited 0.

    On the item's notification stream (``notification_stream_id``); ``run_id``
    is the item's run (None in events written before it was recorded).
    """

    item_id: UUID
    command: str
    run_id: UUID | None = None


class NotificationFailed(Event, frozen=True, kw_only=True):
    """The ``notify_command`` could not start, failed or hung; the run went on regardless."""

    item_id: UUID
    command: str
    error: str
    run_id: UUID | None = None
