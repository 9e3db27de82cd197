"""Events of the supervisor's stream: one stream per supervised run."""

from __future__ import annotations

from uuid import UUID

from events.base import Event, named_stream_id


def supervisor_stream_id(run_id: UUID) -> UUID:
    """The supervisor stream that belongs to a run."""
    return named_stream_id(f"supervisor:{run_id}")


class SupervisorDecisionMade(Event, frozen=True, kw_only=True):
    """The supervisor evaluated something and decided; the policy and prompt are recorded."""

    run_id: UUID
    subject_id: UUID | None = None
    decision: str
    rationale: str
    policy: str
    policy_version: str
    prompt_version: str
    evaluator_agent: str
