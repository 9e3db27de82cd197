"""The inbox projection: questions and approval gates, pending or answered, across runs."""

from __future__ import annotations

import json

import apsw

from events.base import Event
from events.inbox import (
    ApprovalGranted,
    ApprovalRejected,
    ApprovalRequested,
    QuestionAnswered,
    QuestionAsked,
)
from projections.base import Projection, iso

DDL = (
    "CREATE TABLE IF NOT EXISTS inbox ("
    "item_id TEXT PRIMARY KEY, kind TEXT NOT NULL, run_id TEXT NOT NULL, node TEXT NOT NULL, "
    "prompt TEXT NOT NULL, choices TEXT NOT NULL DEFAULT '[]', status TEXT NOT NULL, "
    "answer TEXT, actor TEXT, rationale TEXT, policy TEXT, asked_at TEXT NOT NULL, "
    "answered_at TEXT)",
    "CREATE INDEX IF NOT EXISTS inbox_status ON inbox (status, asked_at)",
)


def _asked(c: apsw.Cursor, position: int, event: Event, _: bytes) -> None:
    assert isinstance(event, QuestionAsked)
    c.execute(
        "INSERT INTO inbox (item_id, kind, run_id, node, prompt, choices, status, asked_at) "
        "VALUES (?, 'question', ?, ?, ?, ?, 'pending', ?)",
        (
            event.originator_id.hex,
            event.run_id.hex,
            event.node,
            event.question,
            json.dumps(event.choices),
            iso(event.timestamp),
        ),
    )


def _requested(c: apsw.Cursor, position: int, event: Event, _: bytes) -> None:
    assert isinstance(event, ApprovalRequested)
    c.execute(
        "INSERT INTO inbox (item_id, kind, run_id, node, prompt, status, asked_at) "
        "VALUES (?, 'approval', ?, ?, ?, 'pending', ?)",
        (
            event.originator_id.hex,
            event.run_id.hex,
            event.node,
            event.summary,
            iso(event.timestamp),
        ),
    )


def _answered(c: apsw.Cursor, position: int, event: Event, _: bytes) -> None:
    assert isinstance(event, QuestionAnswered)
    c.execute(
        "UPDATE inbox SET status='answered', answer=?, actor=?, answered_at=? WHERE item_id=?",
        (event.answer, event.actor, iso(event.timestamp), event.originator_id.hex),
    )


def _decided(c: apsw.Cursor, position: int, event: Event, _: bytes) -> None:
    assert isinstance(event, ApprovalGranted | ApprovalRejected)
    status = "granted" if isinstance(event, ApprovalGranted) else "rejected"
    c.execute(
        "UPDATE inbox SET status=?, actor=?, rationale=?, policy=?, answered_at=? WHERE item_id=?",
        (
            status,
            event.actor,
            event.rationale,
            event.policy,
            iso(event.timestamp),
            event.originator_id.hex,
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
