"""The decisions projection: every answer, approval, rejection and supervisor decision.

It is the audit trail's table: who decided, under which policy and prompt
version, why, when, and the chain hash of the event that records it.
"""

from __future__ import annotations

import apsw

from events.base import Event
from events.inbox import (
    ApprovalGranted,
    ApprovalRejected,
    ApprovalRequested,
    QuestionAnswered,
    QuestionAsked,
)
from events.supervisor import SupervisorDecisionMade
from projections.base import Batch, Projection

DDL = (
    "CREATE TABLE IF NOT EXISTS decision_subjects ("
    "subject_id TEXT PRIMARY KEY, run_id TEXT NOT NULL, node TEXT NOT NULL, "
    "prompt_version TEXT) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS decisions ("
    "position INTEGER PRIMARY KEY, subject_id TEXT, run_id TEXT, node TEXT, kind TEXT NOT NULL, "
    "decision TEXT NOT NULL, actor TEXT NOT NULL, policy TEXT, policy_version TEXT, "
    "prompt_version TEXT, rationale TEXT NOT NULL DEFAULT '', timestamp TEXT NOT NULL, "
    "chain_hash TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS decisions_run ON decisions (run_id, position)",
)

_INSERT = "INSERT INTO decisions VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)"


def _subject(b: Batch, event: Event) -> None:
    assert isinstance(event, QuestionAsked | ApprovalRequested)
    prompt_version = event.prompt_version if isinstance(event, ApprovalRequested) else None
    b.cursor.execute(
        "INSERT OR REPLACE INTO decision_subjects VALUES (?,?,?,?)",
        (event.originator_id.hex, event.run_id.hex, event.node, prompt_version),
    )


def _subject_of(c: apsw.Cursor, subject: str) -> tuple[str | None, str | None, str | None]:
    row = c.execute(
        "SELECT run_id, node, prompt_version FROM decision_subjects WHERE subject_id=?", (subject,)
    ).fetchone()
    return (row[0], row[1], row[2]) if row else (None, None, None)


def _answered(b: Batch, event: Event) -> None:
    assert isinstance(event, QuestionAnswered | ApprovalGranted | ApprovalRejected)
    subject = b.stream
    run_id, node, prompt_version = _subject_of(b.cursor, subject)
    if isinstance(event, QuestionAnswered):
        kind, decision, rationale, policy = "question", event.answer, "", None
    else:
        kind = "approval"
        decision = "granted" if isinstance(event, ApprovalGranted) else "rejected"
        rationale, policy = event.rationale, event.policy
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
        ),
    )


def _supervisor(b: Batch, event: Event) -> None:
    assert isinstance(event, SupervisorDecisionMade)
    subject = event.subject_id.hex if event.subject_id else None
    node = _subject_of(b.cursor, subject)[1] if subject else None
    b.cursor.execute(
        _INSERT,
        (
            b.position,
            subject,
            event.run_id.hex,
            node,
            "supervisor",
            event.decision,
            f"supervisor:{event.evaluator_agent}",
            event.policy,
            event.policy_version,
            event.prompt_version,
            event.rationale,
            b.at,
            b.chain.hex(),
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
        SupervisorDecisionMade: _supervisor,
    },
)
