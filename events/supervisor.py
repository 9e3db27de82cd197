"""Events of the supervisor: its policies (one stream) and its decisions (one stream per run).

A policy is configured for a scope: ``global``, ``repo:<absolute path>`` or
``run:<run id hex>``; the most specific enabled policy covering an item wins.
Each ``PolicyConfigured`` of a scope replaces the previous one and carries the
scope's next version, so every decision names exactly the rules it applied
(``policy_version``, e.g. ``global@3``).

A supervisor decision is evidence: the verdict, its rationale and confidence,
the rules that fired, the policy, prompt and model versions, and the sha256 of
exactly the input the decision was made on. Whether it also decided the item
(``acted``) depends on the autonomy: ``advisory`` never acts, ``cosign``
approves a gate only together with a user, ``autonomous`` approves, rejects
and answers.
"""

from __future__ import annotations

from enum import StrEnum
from uuid import UUID

import msgspec

from events.base import Event, named_stream_id

#: The one stream of every scope's policy.
POLICY_STREAM_ID = named_stream_id("supervisor-policies")


class Autonomy(StrEnum):
    """What a policy lets the supervisor do: advise only, approve together with a user, or
    decide on its own."""

    ADVISORY = "advisory"
    COSIGN = "cosign"
    AUTONOMOUS = "autonomous"


class SupervisorVerdict(StrEnum):
    """What the supervisor's evaluator decided about an item (``SupervisorDecisionMade``'s
    ``decision``)."""

    APPROVE = "approve"
    REJECT = "reject"
    ANSWER = "answer"
    ESCALATE = "escalate"
    ADVISE = "advise"


AUTONOMY_LEVELS = tuple(a.value for a in Autonomy)
#: What a policy can treat apart: the feature workflow's three gates, and questions.
ITEM_KINDS = ("prd", "plan", "merge", "question")
VERDICTS = tuple(v.value for v in SupervisorVerdict)
#: Verdicts that decide an item (the others leave it to people).
DECIDING_VERDICTS = frozenset(
    {SupervisorVerdict.APPROVE, SupervisorVerdict.REJECT, SupervisorVerdict.ANSWER}
)
#: Seconds the evaluator may take before the item is escalated, unless a policy says.
EVALUATOR_TIMEOUT = 300.0


def supervisor_stream_id(run_id: UUID) -> UUID:
    """The supervisor stream that belongs to a run."""
    return named_stream_id(f"supervisor:{run_id}")


class Guardrails(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Deterministic rules checked before the evaluator is consulted (gates only).

    A breached rule is final (the evaluator is not asked); a rule whose metric
    cannot be measured fails closed (escalate). ``auto_approve``: approve
    without the evaluator when every configured rule passes.
    """

    max_diff_lines: int | None = None
    max_files_changed: int | None = None
    blocked_paths: list[str] = []
    tests_must_pass: bool = False
    auto_approve: bool = False

    def configured(self) -> bool:
        return bool(
            self.max_diff_lines is not None
            or self.max_files_changed is not None
            or self.blocked_paths
            or self.tests_must_pass
        )


class PolicyConfigured(Event, frozen=True, kw_only=True):
    """A scope's policy was set (it replaces the scope's previous one, and is enabled)."""

    scope: str
    version: int
    autonomy: str
    #: Per item kind (prd, plan, merge, question): an autonomy other than ``autonomy``.
    overrides: dict[str, str] = {}
    guardrails: Guardrails = Guardrails()
    #: The evaluator's model (None: the agent's configured default).
    model: str | None = None
    #: Seconds the evaluator may take before the item is escalated.
    timeout: float = EVALUATOR_TIMEOUT
    configured_by: str


class PolicyEnabled(Event, frozen=True, kw_only=True):
    """A scope's policy applies again."""

    scope: str
    changed_by: str


class PolicyDisabled(Event, frozen=True, kw_only=True):
    """A scope's policy no longer applies (a less specific one may)."""

    scope: str
    changed_by: str


class RuleResult(msgspec.Struct, frozen=True, kw_only=True):
    """One guardrail as checked: ``passed`` None means its metric was missing."""

    rule: str
    passed: bool | None
    detail: str


class SupervisorDecisionMade(Event, frozen=True, kw_only=True):
    """The supervisor evaluated an item and decided; the evidence is all here.

    ``decision`` is the verdict (approve, reject, escalate, advise); ``advice``
    what an advisory evaluator suggested; ``answer``/``option_id`` a question's
    answer. ``acted`` says whether the item was decided by it (or, under
    cosign, co-signed: ``cosign_pending``).
    """

    run_id: UUID
    subject_id: UUID | None = None
    decision: str
    rationale: str
    policy: str
    policy_version: str
    prompt_version: str
    evaluator_agent: str
    model: str | None = None
    confidence: float | None = None
    input_hash: str = ""
    autonomy: str = ""
    item_kind: str = ""
    advice: str | None = None
    answer: str | None = None
    option_id: str | None = None
    rules: list[RuleResult] = []
    acted: bool = False
    cosign_pending: bool = False


class SupervisorDecisionRefused(Event, frozen=True, kw_only=True):
    """The supervisor decided an item a user had decided meanwhile: the user wins."""

    run_id: UUID
    subject_id: UUID
    decision: str
    decided_by: str
    policy_version: str
    reason: str
