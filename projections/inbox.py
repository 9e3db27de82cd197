"""The inbox projection: questions and approval gates, pending or answered, across runs."""

from __future__ import annotations

import json

from events.base import Event
from events.inbox import (
    ApprovalGranted,
    ApprovalRejected,
    ApprovalRequested,
    QuestionAnswered,
    QuestionAsked,
)
from projections.base import Batch, Projection

DDL = (
    "CREATE TABLE IF NOT EXISTS inbox ("
    "item_id TEXT PRIMARY KEY, kind TEXT NOT NULL, run_id TEXT NOT NULL, node TEXT NOT NULL, "
    "prompt TEXT NOT NULL, choices TEXT NOT NULL DEFAULT '[]', status TEXT NOT NULL, "
    "answer TEXT, actor TEXT, rationale TEXT, policy TEXT, asked_at TEXT NOT NULL, "
    "answered_at TEXT)",
    "CREATE INDEX IF NOT EXISTS inbox_status ON inbox (status, asked_at)",
)


def _asked(b: Batch, event: Event) -> None:
    assert isinstance(event, QuestionAsked)
    b.cursor.execute(
        "INSERT INTO inbox (item_id, kind, run_id, node, prompt, choices, status, asked_at) "
        "VALUES (?, 'question', ?, ?, ?, ?, 'pending', ?)",
        (
            b.stream,
            event.run_id.hex,
            event.node,
            event.question,
            json.dumps(event.choices),
            b.at,
        ),
    )


def _requested(b: Batch, event: Event) -> None:
    assert isinstance(event, ApprovalRequested)
    b.cursor.execute(
        "INSERT INTO inbox (item_id, kind, run_id, node, prompt, status, asked_at) "
        "VALUES (?, 'approval', ?, ?, ?, 'pending', ?)",
        (
            b.stream,
            event.run_id.hex,
            event.node,
            event.summary,
            b.at,
        ),
    )


def _answered(b: Batch, event: Event) -> None:
    assert isinstance(event, QuestionAnswered)
    b.cursor.execute(
        "UPDATE inbox SET status='answered', answer=?, actor=?, answered_at=? WHERE item_id=?",
        (event.answer, event.actor, b.at, b.stream),
    )


def _decided(b: Batch, event: Event) -> None:
    assert isinstance(event, ApprovalGranted | ApprovalRejected)
    status = "granted" if isinstance(event, ApprovalGranted) else "rejected"
    b.cursor.execute(
        "UPDATE inbox SET status=?, actor=?, rationale=?, policy=?, answered_at=? WHERE item_id=?",
        (
            status,
            event.actor,
            event.rationale,
            event.policy,
            b.at,
            b.stream,
        ),
    )


INBOX = Projection(
    name="inbox",
    ddl=DDL,
    tables=("inbox",),
    handlers={
        QuestionAsked: _asked,
        ApprovalRequested: _requested,
        QuestionAnswered: _answered,
        ApprovalGranted: _decided,
        ApprovalRejected: _decided,
    },
)
