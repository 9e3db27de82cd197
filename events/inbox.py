"""Events of question and approval streams: one stream per question or approval gate.

One stream each means the first answer wins: a second answer (the user racing
the supervisor) is a concurrency conflict, never a silent overwrite.
"""

from __future__ import annotations

from uuid import UUID

from events.base import Event


class QuestionAsked(Event, frozen=True, kw_only=True):
    """The agent or workflow asked the user something."""

    run_id: UUID
    node: str
    question: str
    choices: list[str] = []


class QuestionAnswered(Event, frozen=True, kw_only=True):
    """Someone answered a question."""

    answer: str
    actor: str


class ApprovalRequested(Event, frozen=True, kw_only=True):
    """A workflow gate needs a yes or no before the run goes on."""

    run_id: UUID
    node: str
    summary: str
    prompt_version: str | None = None


class ApprovalGranted(Event, frozen=True, kw_only=True):
    """The gate was approved: by whom, under which policy, and why."""

    actor: str
    rationale: str = ""
    policy: str | None = None


class ApprovalRejected(Event, frozen=True, kw_only=True):
    """The gate was rejected: by whom, under which policy, and why."""

    actor: str
    rationale: str = ""
    policy: str | None = None
