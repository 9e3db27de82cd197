"""The decisions projection: every answer, approval, rejection and supervisor decision.

It is the audit trail's table: who decided, under which policy and prompt
version, why, when, and the chain hash of the event that records it. The
supervisor's decisions (actor ``supervisor:<policy version>``) sit beside the
users', with the model, confidence and input hash they were made with; so do
the supervisor's refused decisions (a user decided first: ``decided_by``) and
users' cosign votes. ``acted`` says whether the row decided the item.

``kind``: ``question`` and ``approval`` (an item's decision), ``vote`` (a
user's approval waiting for the supervisor's co-signature), ``supervisor`` (a
supervisor decision) and ``refused`` (a supervisor decision that was not
recorded as the item's: ``decision`` is what it had decided).
"""

from __future__ import annotations

from events.base import Event
from events.inbox import (
    ApprovalGranted,
    ApprovalRejected,
    ApprovalRequested,
    ApprovalVoted,
    QuestionAnswered,
    QuestionAsked,
)
from events.inbox_status import ItemKind, ItemStatus
from events.supervisor import SupervisorDecisionMade, SupervisorDecisionRefused
from projections.base import Batch, Projection, Writer

DDL = (
    "CREATE TABLE IF NOT EXISTS decision_subjects ("
    "subject_id TEXT PRIMARY KEY, run_id TEXT NOT NULL, node TEXT NOT NULL, "
    "prompt_version TEXT) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS decisions ("
    "position INTEGER PRIMARY KEY, subject_id TEXT, run_id TEXT, node TEXT, kind TEXT NOT NULL, "
    "decision TEXT NOT NULL, actor TEXT NOT NULL, policy TEXT, policy_version TEXT, "
    "prompt_version TEXT, rationale TEXT NOT NULL DEFAULT '', timestamp TEXT NOT NULL, "
    "chain_hash TEXT NOT NULL, acted INTEGER NOT NULL, input_hash TEXT, model TEXT, "
    "confidence REAL, overrides TEXT, cosigned_by TEXT, decided_by TEXT)",
    "CREATE INDEX IF NOT EXISTS decisions_run ON decisions (run_id, position)",
)

_INSERT = "INSERT INTO decisions VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"


def _subject(b: Batch, event: Event) -> None:
    assert isinstance(event, QuestionAsked | ApprovalRequested)
    prompt_version = event.prompt_version if isinstance(event, ApprovalRequested) else None
    b.cursor.execute(
        "INSERT OR REPLACE INTO decision_subjects VALUES (?,?,?,?)",
        (event.originator_id.hex, event.run_id.hex, event.node, prompt_version),
    )


def _subject_of(c: Writer, subject: str) -> tuple[str | None, str | None, str | None]:
    row = c.execute(
        "SELECT run_id, node, prompt_version FROM decision_subjects WHERE subject_id=?", (subject,)
    ).fetchone()
    return (row[0], row[1], row[2]) if row else (None, None, None)


def _answered(b: Batch, event: Event) -> None:
    assert isinstance(event, QuestionAnswered | ApprovalGranted | ApprovalRejected | ApprovalVoted)
    subject = b.stream
    run_id, node, prompt_version = _subject_of(b.cursor, subject)
    acted, overrides, cosigned_by = 1, None, None
    if isinstance(event, QuestionAnswered):
        kind, decision, rationale, policy = ItemKind.QUESTION.value, event.answer, "", None
        overrides = event.overrides
    elif isinstance(event, ApprovalVoted):
        kind, decision, rationale, policy = "vote", "approve", event.rationale, event.policy
        acted = 0
    else:
        kind = ItemKind.APPROVAL.value
        verdict = ItemStatus.APPROVED if isinstance(event, ApprovalGranted) else ItemStatus.REJECTED
        decision = verdict.value
        rationale, policy, overrides = event.rationale, event.policy, event.overrides
        cosigned_by = event.cosigned_by if isinstance(event, ApprovalGranted) else None
    b.cursor.execute(
        _INSERT,
        (
            b.position,
            subject,
            run_id,
            node,
            kind,
            decision,
            event.actor,
            policy,
            None,
            prompt_version,
            rationale,
            b.at,
            b.chain.hex(),
            acted,
            None,
            None,
            None,
            overrides,
            cosigned_by,
            None,
        ),
    )


def _supervisor(b: Batch, event: Event) -> None:
    assert isinstance(event, SupervisorDecisionMade | SupervisorDecisionRefused)
    subject = event.subject_id.hex if event.subject_id else None
    node = _subject_of(b.cursor, subject)[1] if subject else None
    actor = f"supervisor:{event.policy_version}"
    if isinstance(event, SupervisorDecisionMade):
        kind, policy, prompt_version, rationale = (
            "supervisor",
            event.policy,
            event.prompt_version,
            event.rationale,
        )
        evidence = (int(event.acted), event.input_hash or None, event.model, event.confidence)
        decided_by = None
    else:
        kind, policy, prompt_version, rationale = "refused", None, None, event.reason
        evidence, decided_by = (0, None, None, None), event.decided_by
    b.cursor.execute(
        _INSERT,
        (
            b.position,
            subject,
            event.run_id.hex,
            node,
            kind,
            event.decision,
            actor,
            policy,
            event.policy_version,
            prompt_version,
            rationale,
            b.at,
            b.chain.hex(),
            *evidence,
            None,
            None,
            decided_by,
        ),
    )


DECISIONS = Projection(
    name="decisions",
    ddl=DDL,
    tables=("decision_subjects", "decisions"),
    handlers={
        QuestionAsked: _subject,
        ApprovalRequested: _subject,
        QuestionAnswered: _answered,
        ApprovalGranted: _answered,
        ApprovalRejected: _answered,
        ApprovalVoted: _answered,
        SupervisorDecisionMade: _supervisor,
        SupervisorDecisionRefused: _supervisor,
    },
)
