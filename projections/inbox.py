"""The inbox projection: questions and approval gates, pending or decided, across runs.

``supervisor`` is the supervisor's newest decision on the item (its verdict,
rationale, advice, policy), shown where the user decides; ``votes`` the users
whose approval waits for the supervisor's co-signature (cosign policies).

``workflow`` and ``repo`` are the run's (from its ``RunCreated``, kept in
``inbox_runs``), so that listing the pending items is one indexed read of
this table; they are NULL for an item of a run the log does not hold, which
no query lists (as a join with the runs would not).

``awaited`` marks the items the run is suspended on (its latest
``RunSuspended``) until a worker resumes it: an awaited item that has a
decision means the run should be resumed (a decider that died before starting
the worker, or a deadline that was applied).
"""

from __future__ import annotations

import json

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
from events.runs import RunCancelled, RunCreated, RunFailed, RunResumed, RunSuspended
from events.supervisor import SupervisorDecisionMade
from projections.base import Batch, Projection

DDL = (
    "CREATE TABLE IF NOT EXISTS inbox ("
    "item_id TEXT PRIMARY KEY, kind TEXT NOT NULL, run_id TEXT NOT NULL, node TEXT NOT NULL, "
    "iteration INTEGER NOT NULL DEFAULT 1, prompt TEXT NOT NULL, context TEXT NOT NULL DEFAULT '', "
    "options TEXT NOT NULL DEFAULT '[]', free_text INTEGER NOT NULL DEFAULT 1, phase TEXT, "
    "artifacts TEXT NOT NULL DEFAULT '[]', deadline TEXT, interrupt_id TEXT, "
    "status TEXT NOT NULL, answer TEXT, option_id TEXT, actor TEXT, rationale TEXT, policy TEXT, "
    "asked_at TEXT NOT NULL, answered_at TEXT, awaited INTEGER NOT NULL DEFAULT 0, "
    "supervisor TEXT, votes TEXT NOT NULL DEFAULT '[]', workflow TEXT, repo TEXT)",
    # The workflow and repository of each run, copied onto its items as they are asked.
    "CREATE TABLE IF NOT EXISTS inbox_runs ("
    "run_id TEXT PRIMARY KEY, workflow TEXT NOT NULL, repo TEXT NOT NULL) WITHOUT ROWID",
    # Pending items oldest first, in the listing's order (ties by id): no sort to read them.
    "CREATE INDEX IF NOT EXISTS inbox_status ON inbox (status, asked_at, item_id)",
    "CREATE INDEX IF NOT EXISTS inbox_run ON inbox (run_id, asked_at)",
    # Decided items a run is still suspended on: empty but for a moment, checked by every
    # command, so a partial index answers at once however long the inbox's history.
    "CREATE INDEX IF NOT EXISTS inbox_awaited ON inbox (run_id) "
    # The status is spelt out (not bound) here and in the queries that read this index:
    # SQLite uses a partial index only for a WHERE that says its terms literally.
    f"WHERE awaited=1 AND status!='{ItemStatus.PENDING}'",
)


_RUN_INSERT = "INSERT INTO inbox_runs (run_id, workflow, repo) VALUES (?, ?, ?)"


def _created(b: Batch, event: Event) -> None:
    assert isinstance(event, RunCreated)
    row = (b.stream, event.workflow, event.repo)
    b.defer(_RUN_INSERT, row)  # written with the batch; known to this batch's items here
    b.memo[("inbox_run", b.stream)] = row[1:]


def _run_of(b: Batch, run_id: str) -> tuple[str | None, str | None]:
    """The workflow and repository of the run an item is asked in (None: no such run)."""
    known: tuple[str, str] | None = b.memo.get(("inbox_run", run_id))
    if known is not None:
        return known
    row = b.cursor.execute(
        "SELECT workflow, repo FROM inbox_runs WHERE run_id=?", (run_id,)
    ).fetchone()
    return (row[0], row[1]) if row else (None, None)


def _asked(b: Batch, event: Event) -> None:
    assert isinstance(event, QuestionAsked)
    options = [
        {"id": o.id, "label": o.label, "description": o.description, "recommended": o.recommended}
        for o in event.options
    ] or [{"id": c, "label": c, "description": "", "recommended": False} for c in event.choices]
    run_id = event.run_id.hex
    b.cursor.execute(
        "INSERT INTO inbox (item_id, kind, run_id, node, iteration, prompt, context, options, "
        "free_text, deadline, interrupt_id, status, asked_at, workflow, repo) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            b.stream,
            ItemKind.QUESTION.value,
            run_id,
            event.node,
            event.iteration,
            event.question,
            event.context,
            json.dumps(options),
            int(event.free_text),
            event.deadline,
            event.interrupt_id,
            ItemStatus.PENDING.value,
            b.at,
            *_run_of(b, run_id),
        ),
    )


def _requested(b: Batch, event: Event) -> None:
    assert isinstance(event, ApprovalRequested)
    artifacts = [{"kind": a.kind, "path": a.path, "sha256": a.sha256} for a in event.artifacts]
    run_id = event.run_id.hex
    b.cursor.execute(
        "INSERT INTO inbox (item_id, kind, run_id, node, iteration, prompt, phase, artifacts, "
        "free_text, interrupt_id, status, asked_at, workflow, repo) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?)",
        (
            b.stream,
            ItemKind.APPROVAL.value,
            run_id,
            event.node,
            event.iteration,
            event.summary,
            event.phase or None,
            json.dumps(artifacts),
            event.interrupt_id,
            ItemStatus.PENDING.value,
            b.at,
            *_run_of(b, run_id),
        ),
    )


def _answered(b: Batch, event: Event) -> None:
    assert isinstance(event, QuestionAnswered)
    b.cursor.execute(
        "UPDATE inbox SET status=?, answer=?, option_id=?, actor=?, answered_at=? WHERE item_id=?",
        (ItemStatus.ANSWERED.value, event.answer, event.option_id, event.actor, b.at, b.stream),
    )


def _decided(b: Batch, event: Event) -> None:
    assert isinstance(event, ApprovalGranted | ApprovalRejected)
    status = ItemStatus.APPROVED if isinstance(event, ApprovalGranted) else ItemStatus.REJECTED
    b.cursor.execute(
        "UPDATE inbox SET status=?, actor=?, rationale=?, policy=?, answered_at=? WHERE item_id=?",
        (status.value, event.actor, event.rationale, event.policy, b.at, b.stream),
    )


def _supervised(b: Batch, event: Event) -> None:
    assert isinstance(event, SupervisorDecisionMade)
    if event.subject_id is None:
        return
    note = {
        "verdict": event.decision,
        "rationale": event.rationale,
        "advice": event.advice,
        "answer": event.answer,
        "policy": event.policy_version,
        "cosign_pending": event.cosign_pending,
        "acted": event.acted,
        "at": b.at,
    }
    b.cursor.execute(
        "UPDATE inbox SET supervisor=? WHERE item_id=?", (json.dumps(note), event.subject_id.hex)
    )


def _voted(b: Batch, event: Event) -> None:
    assert isinstance(event, ApprovalVoted)
    b.cursor.execute(
        "UPDATE inbox SET votes=json_insert(votes, '$[#]', ?) WHERE item_id=?",
        (event.actor, b.stream),
    )


def _suspended(b: Batch, event: Event) -> None:
    assert isinstance(event, RunSuspended)
    b.cursor.execute("UPDATE inbox SET awaited=0 WHERE run_id=? AND awaited=1", (b.stream,))
    b.cursor.executemany(
        "UPDATE inbox SET awaited=1 WHERE item_id=?", [(i.hex,) for i in event.item_ids]
    )


def _resumed(b: Batch, event: Event) -> None:
    b.cursor.execute("UPDATE inbox SET awaited=0 WHERE run_id=? AND awaited=1", (b.stream,))


def _ended(b: Batch, event: Event) -> None:
    # A cancelled or failed run's open items can no longer be decided: off the inbox.
    b.cursor.execute(
        "UPDATE inbox SET status=?, awaited=0 WHERE run_id=? AND status=?",
        (ItemStatus.WITHDRAWN.value, b.stream, ItemStatus.PENDING.value),
    )


INBOX = Projection(
    name="inbox",
    ddl=DDL,
    tables=("inbox", "inbox_runs"),
    handlers={
        RunCreated: _created,
        QuestionAsked: _asked,
        ApprovalRequested: _requested,
        QuestionAnswered: _answered,
        ApprovalGranted: _decided,
        ApprovalRejected: _decided,
        ApprovalVoted: _voted,
        SupervisorDecisionMade: _supervised,
        RunSuspended: _suspended,
        RunResumed: _resumed,
        RunCancelled: _ended,
        RunFailed: _ended,
    },
)
